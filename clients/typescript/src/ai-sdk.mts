// @opledger/client/ai-sdk turns the ledger's declared tools into Vercel AI SDK (`ai` 7) tools, with
// approval mapped to the SDK's own tool approvals: a `toolApproval` policy that answers
// "user-approval" while the ledger has the call awaiting a person, and `approvalResponses` that turns
// the ledger's decisions into the `tool-approval-response` parts the next generateText call takes.
// An ES module: `ai` 7 is one. See docs/integrations/ai-sdk.md.

import {
  jsonSchema,
  tool,
  type GenericToolApprovalFunction,
  type JSONSchema7,
  type Tool,
  type ToolApprovalResponse,
  type ToolApprovalStatus,
} from "ai";
import type { JsonObject } from "@bufbuild/protobuf";
import { CHECK_OPERATION_TOOL, ToolRunner, callKey, decisionOf, toldModel } from "./index.js";
import type { ModelTool, OpledgerClient } from "./index.js";

/** KeyFunc derives a call's idempotency key from the tool's name, the model's tool call id and its input. */
export type KeyFunc = (tool: string, toolCallId: string, input: JsonObject) => string;

/** AiSdkOptions configure the tools of one conversation. */
export interface AiSdkOptions {
  /** conversation is your id of the conversation (or workflow) these calls belong to: with the model's
   * tool call id it makes each call's idempotency key. Required unless key is given. */
  conversation?: string;
  /** key replaces the default key (conversation + tool call id). */
  key?: KeyFunc;
  /** executeWaitMs: how long Execute waits for a call another caller is executing (30 s). */
  executeWaitMs?: number;
}

/** OpledgerToolSet is the tools and the approval policy to give generateText / streamText /
 * ToolLoopAgent, and approvalResponses for the call after a person decided. */
export interface OpledgerToolSet {
  tools: Record<string, Tool<JsonObject, string>>;
  toolApproval: GenericToolApprovalFunction<Record<string, Tool<JsonObject, string>>, any, any>;
  /** approvalResponses reads the ledger's decision on each `tool-approval-request` of content (a
   * result's content, or its steps' content) that is one of these tools' calls: an approved one is
   * answered approved, a denied or cancelled one denied with what the model is told, and one still
   * undecided is left out (resume later). Push them as `{ role: "tool", content: responses }` after
   * the result's responseMessages and call generateText again: the SDK then runs the approved calls,
   * whose Prepare under the same key answers with the recorded operation, executed once. */
  approvalResponses(content: readonly ApprovalRequestPart[]): Promise<ToolApprovalResponse[]>;
}

/** ApprovalRequestPart is what approvalResponses reads: the `tool-approval-request` parts of a
 * result's content (or of its steps' content). */
export interface ApprovalRequestPart {
  type: string;
  approvalId?: string;
  isAutomatic?: boolean;
  toolCall?: { toolName: string; toolCallId: string; input: unknown };
}

function keyOf(options: AiSdkOptions): KeyFunc {
  return options.key ?? ((toolName, toolCallId) => callKey(options.conversation ?? "", toolName, toolCallId));
}

/** aiSdkTools makes the tools of modelTools (ToolRunner.modelTools(): each current tool and
 * check_operation) and their approval policy, for one conversation. */
export function aiSdkTools(client: OpledgerClient, modelTools: ModelTool[], options: AiSdkOptions): OpledgerToolSet {
  const key = keyOf(options);
  const tools: Record<string, Tool<JsonObject, string>> = {};
  const versions = new Map<string, string | undefined>();
  const needApproval = new Set<string>();
  for (const t of modelTools) {
    const runner = new ToolRunner(client, { executeWaitMs: options.executeWaitMs ?? 30_000, toolVersion: t.version || undefined });
    versions.set(t.name, t.version || undefined);
    if (t.approvalRequired) needApproval.add(t.name);
    tools[t.name] = tool({
      description: t.description,
      inputSchema: jsonSchema<JsonObject>(t.argsSchema as JSONSchema7),
      execute: async (input, { toolCallId }) =>
        t.name === CHECK_OPERATION_TOOL
          ? toldModel(await runner.check(String(input["operation_id"] ?? "")))
          : toldModel(await runner.run(t.name, input, key(t.name, toolCallId, input))),
    });
  }
  const toolApproval = async ({ toolCall }: { toolCall: { toolName: string; toolCallId: string; input: unknown } }): Promise<ToolApprovalStatus> => {
    if (!needApproval.has(toolCall.toolName)) return undefined;
    const input = (toolCall.input ?? {}) as JsonObject;
    const d = await decisionOf(client, toolCall.toolName, input, key(toolCall.toolName, toolCall.toolCallId, input), versions.get(toolCall.toolName));
    switch (d.kind) {
      case "undecided":
        return "user-approval"; // recorded in the ledger, awaiting a person
      case "denied":
        return { type: "denied", reason: d.message };
      case "approved":
        return undefined; // a person approved it already (a retried call): it runs
    }
  };
  const approvalResponses = async (content: readonly ApprovalRequestPart[]): Promise<ToolApprovalResponse[]> => {
    const out: ToolApprovalResponse[] = [];
    for (const part of content) {
      const call = part.toolCall;
      if (part.type !== "tool-approval-request" || part.isAutomatic || !part.approvalId || !call || !needApproval.has(call.toolName)) {
        continue;
      }
      const input = (call.input ?? {}) as JsonObject;
      const d = await decisionOf(client, call.toolName, input, key(call.toolName, call.toolCallId, input), versions.get(call.toolName));
      if (d.kind === "approved") out.push({ type: "tool-approval-response", approvalId: part.approvalId, approved: true });
      if (d.kind === "denied") out.push({ type: "tool-approval-response", approvalId: part.approvalId, approved: false, reason: d.message });
    }
    return out;
  };
  return { tools, toolApproval: toolApproval as OpledgerToolSet["toolApproval"], approvalResponses };
}

/** opledgerTools reads the ledger's tools (ListTools) and makes them and their approval policy for one
 * conversation (aiSdkTools). */
export async function opledgerTools(client: OpledgerClient, options: AiSdkOptions): Promise<OpledgerToolSet> {
  return aiSdkTools(client, await new ToolRunner(client).modelTools(), options);
}
