package dev.opledger.client;

import com.google.protobuf.Struct;

/**
 * ModelTool is one tool as a model sees it, from {@link ToolRunner#modelTools()}. Put it in the
 * model's tool list (OpenAI: {"type": "function", "function": {name, description, parameters:
 * argsSchema}}; Anthropic: {name, description, input_schema: argsSchema}).
 *
 * @param name the tool's name
 * @param description what it does, for the model
 * @param argsSchema the JSON Schema of its arguments, which the ledger enforces on Prepare
 * @param version its current version
 * @param approvalRequired whether a person must approve each call
 * @param effect read_only, idempotent or side_effect
 */
public record ModelTool(
    String name,
    String description,
    Struct argsSchema,
    String version,
    boolean approvalRequired,
    String effect) {

  /**
   * MAX_POLICY_SUMMARY is the longest Policy.summary (in characters: code points) {@link
   * #describe} adds to a tool's description; a longer one is left to ListTools.
   */
  public static final int MAX_POLICY_SUMMARY = 300;

  /**
   * Describe is a tool's description for a model: the tools file's description, then the policy's
   * plain-words summary (Policy.summary) when there is one of at most MAX_POLICY_SUMMARY
   * characters, as "\n\nPolicy: &lt;summary&gt;.", so that the model knows before calling what is
   * refused and what a person must approve.
   */
  public static String describe(String description, String summary) {
    if (summary == null
        || summary.isEmpty()
        || summary.codePointCount(0, summary.length()) > MAX_POLICY_SUMMARY) {
      return description;
    }
    if (description == null || description.isEmpty()) {
      return "Policy: " + summary + ".";
    }
    return description + "\n\nPolicy: " + summary + ".";
  }

  /** ArgsSchemaJson is the JSON Schema as JSON text. */
  public String argsSchemaJson() {
    return Args.toJson(argsSchema);
  }
}
