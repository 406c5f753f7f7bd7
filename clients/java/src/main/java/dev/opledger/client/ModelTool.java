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

  /** ArgsSchemaJson is the JSON Schema as JSON text. */
  public String argsSchemaJson() {
    return Args.toJson(argsSchema);
  }
}
