package dev.opledger.client;

import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * IdempotencyKeys derives the idempotency key of an agent's tool call, the same string in every
 * opledger client (docs/fingerprint.md, "Idempotency key derivation"): {@code "opk1-"} +
 * base64url-without-padding(SHA-256(RFC 8785 JSON of {@code {"conversation","round","tool_call",
 * "tool","tool_version"}})), 48 printable ASCII characters.
 *
 * <p>A provider's tool-call id alone is not a business identity: a regenerated model response (a
 * retried round, another provider) may carry a new id for the same intended action, and ids are
 * unique only within one response. {@code conversation} must be your own durable id of the unit of
 * work (an operation, ticket or conversation id that survives restarts) and {@code round} the model
 * round within it; persist the key before calling Prepare.
 *
 * <pre>{@code
 * String key = IdempotencyKeys.derive(KeyParts.builder()
 *     .conversation("conv_7f3a9c").round(3).toolCall("call_Qx81ZpT0").tool("pay_invoice").toolVersion("1")
 *     .build()); // "opk1-rJkGVvywp6LW6RR0IMujcmLimnINH4FvCE5fePK7Odc"
 * }</pre>
 */
public final class IdempotencyKeys {
  /** PREFIX starts every derived key and names the derivation. */
  public static final String PREFIX = "opk1-";

  /** MAX_ROUND is the largest round that is exact as an IEEE-754 double (2^53 - 1). */
  public static final long MAX_ROUND = (1L << 53) - 1;

  private IdempotencyKeys() {}

  /**
   * Derive returns the key of one tool call. conversation and tool must be non-empty; toolCall may
   * be "" when the runtime has not pinned the model's response; toolVersion is the version sent in
   * PrepareRequest ("" if none); 0 ≤ round ≤ 2^53 - 1. A violation is an
   * IllegalArgumentException.
   */
  public static String derive(KeyParts parts) {
    byte[] sum = Fingerprint.sha256(preimage(parts).getBytes(StandardCharsets.UTF_8));
    return PREFIX + Base64.getUrlEncoder().withoutPadding().encodeToString(sum);
  }

  /** Preimage returns the canonical JSON text that {@link #derive} hashes. */
  public static String preimage(KeyParts p) {
    if (p.conversation() == null || p.conversation().isEmpty()) {
      throw new IllegalArgumentException("idempotency key: empty conversation");
    }
    if (p.tool() == null || p.tool().isEmpty()) {
      throw new IllegalArgumentException("idempotency key: empty tool");
    }
    if (p.round() < 0 || p.round() > MAX_ROUND) {
      throw new IllegalArgumentException("idempotency key: round must be in [0, 2^53)");
    }
    Map<String, Object> parts = new LinkedHashMap<>();
    parts.put("conversation", p.conversation());
    parts.put("round", p.round());
    parts.put("tool_call", p.toolCall());
    parts.put("tool", p.tool());
    parts.put("tool_version", p.toolVersion());
    return Jcs.canonicalize(parts);
  }
}
