package dev.opledger.client;

/**
 * KeyParts names one intended tool call for {@link IdempotencyKeys#derive}: the same parts, with
 * the same names, as in every opledger client (Go {@code KeyParts{Conversation, Round, ToolCall,
 * Tool, ToolVersion}}, Python {@code derive_key(conversation=…, round=…, tool_call=…, tool=…,
 * tool_version=…)}, TypeScript {@code deriveKey({conversation, round, toolCall, tool,
 * toolVersion})}). Built by name, so that two strings cannot be swapped by position:
 *
 * <pre>{@code
 * KeyParts.builder().conversation("conv_7f3a9c").round(3).toolCall("call_Qx81ZpT0")
 *     .tool("pay_invoice").toolVersion("1").build()
 * }</pre>
 *
 * @param conversation the runtime's own durable id of the conversation, workflow or operation;
 *     non-empty
 * @param round the model round (turn, step) within it, 0 ≤ round ≤ 2^53 - 1
 * @param toolCall the tool-call id within the round, or "" (see {@link IdempotencyKeys} about
 *     provider ids)
 * @param tool the tool's name, e.g. pay_invoice; non-empty
 * @param toolVersion the version sent in PrepareRequest, or "" when none is sent
 */
public record KeyParts(
    String conversation, long round, String toolCall, String tool, String toolVersion) {

  /** KeyParts normalizes null toolCall and toolVersion to "". */
  public KeyParts {
    toolCall = toolCall == null ? "" : toolCall;
    toolVersion = toolVersion == null ? "" : toolVersion;
  }

  /** Builder starts an empty set of parts. */
  public static Builder builder() {
    return new Builder();
  }

  /** Builder sets the parts by name. */
  public static final class Builder {
    private String conversation;
    private Long round;
    private String toolCall = "";
    private String tool;
    private String toolVersion = "";

    private Builder() {}

    /** Conversation sets the runtime's durable id of the unit of work (required). */
    public Builder conversation(String conversation) {
      this.conversation = conversation;
      return this;
    }

    /** Round sets the model round within the conversation (required). */
    public Builder round(long round) {
      this.round = round;
      return this;
    }

    /** ToolCall sets the tool-call id within the round (default ""). */
    public Builder toolCall(String toolCall) {
      this.toolCall = toolCall;
      return this;
    }

    /** Tool sets the tool's name (required). */
    public Builder tool(String tool) {
      this.tool = tool;
      return this;
    }

    /** ToolVersion sets the version sent in PrepareRequest (default ""). */
    public Builder toolVersion(String toolVersion) {
      this.toolVersion = toolVersion;
      return this;
    }

    /** Build returns the parts; a missing round is an IllegalArgumentException. */
    public KeyParts build() {
      if (round == null) {
        throw new IllegalArgumentException("idempotency key: round is required");
      }
      return new KeyParts(conversation, round, toolCall, tool, toolVersion);
    }

    /** Derive is {@code IdempotencyKeys.derive(build())}. */
    public String derive() {
      return IdempotencyKeys.derive(build());
    }
  }
}
