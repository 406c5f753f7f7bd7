package dev.opledger.client;

import com.google.protobuf.Struct;
import dev.opledger.v1.LedgerServiceGrpc;
import dev.opledger.v1.Operation;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Fingerprint computes opledger's v1 operation fingerprint (docs/fingerprint.md): {@code "v1:"} +
 * lowercase hex SHA-256 of the RFC 8785 form of {@code {"args","method","tenant","tool",
 * "tool_version","v":1}}. An approver recomputes it from the arguments it shows a person, so the
 * approval is provably for exactly those arguments.
 */
public final class Fingerprint {
  /** VERSION is the prefix of the fingerprints this class computes. */
  public static final String VERSION = "v1";

  /** PREPARE_METHOD is the method member of a Prepare's fingerprint. */
  public static final String PREPARE_METHOD =
      "/" + LedgerServiceGrpc.getPrepareMethod().getFullMethodName();

  private Fingerprint() {}

  /**
   * Preimage returns the canonical JSON text that {@link #compute} hashes. args is a {@link
   * Struct}, a {@code Map<String, ?>} or null (the empty object).
   */
  public static String preimage(
      String method, String tenant, String tool, String toolVersion, Object args) {
    requireNonEmpty("method", method);
    requireNonEmpty("tenant", tenant);
    requireNonEmpty("tool", tool);
    requireNonEmpty("tool_version", toolVersion);
    if (args != null && !(args instanceof Struct) && !(args instanceof Map<?, ?>)) {
      throw new IllegalArgumentException("fingerprint: args must be a JSON object");
    }
    Map<String, Object> in = new LinkedHashMap<>();
    in.put("args", args == null ? Map.of() : args);
    in.put("method", method);
    in.put("tenant", tenant);
    in.put("tool", tool);
    in.put("tool_version", toolVersion);
    in.put("v", 1);
    return Jcs.canonicalize(in);
  }

  /** Compute returns the v1 fingerprint of the given inputs. */
  public static String compute(
      String method, String tenant, String tool, String toolVersion, Object args) {
    byte[] pre = preimage(method, tenant, tool, toolVersion, args).getBytes(StandardCharsets.UTF_8);
    return VERSION + ":" + HexFormat.of().formatHex(sha256(pre));
  }

  /**
   * OfPrepare returns the fingerprint the server gives a Prepare of tool, in its resolved version
   * (never empty), with args, for tenant.
   */
  public static String ofPrepare(String tenant, String tool, String toolVersion, Object args) {
    return compute(PREPARE_METHOD, tenant, tool, toolVersion, args);
  }

  /**
   * Matches recomputes op's fingerprint from its tenant, tool, version and args. It returns false
   * for a fingerprint version it does not know: compare such fingerprints only as opaque strings.
   */
  public static boolean matches(Operation op) {
    if (!op.getFingerprint().startsWith(VERSION + ":")) {
      return false;
    }
    String fp =
        ofPrepare(op.getTenant(), op.getTool(), op.getToolVersion(), op.hasArgs() ? op.getArgs() : null);
    return fp.equals(op.getFingerprint());
  }

  static byte[] sha256(byte[] in) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(in);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this JVM", e);
    }
  }

  private static void requireNonEmpty(String name, String value) {
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("fingerprint: " + name + " is empty");
    }
  }
}
