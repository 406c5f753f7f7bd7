// @opledger/client/openai-agents turns the ledger's declared tools into OpenAI Agents SDK
// (`@openai/agents` 0.20) function tools, with approval mapped to the SDK's own human-in-the-loop:
// `needsApproval`, a run that ends with `interruptions`, a RunState you persist, and
// `state.approve` / `state.reject` before `run(agent, state)` resumes it. See
// docs/integrations/openai-agents-js.md.

import { tool, type FunctionTool, type RunContext, type RunState, type RunToolApprovalItem } from "@openai/agents";
import type { JsonObject } from "@bufbuild/protobuf";
import type { OpledgerClient } from "./client";
import { isOpledgerError } from "./errors";
import { State } from "./gen/opledger/v1/ledger_pb";
import { CHECK_OPERATION_TOOL, ToolRunner, type ModelTool } from "./runner";
import { callKey, decisionOf, recordedCall, toldModel } from "./adapters";

/** KeyFunc derives a call's idempotency key from the run's context, the tool's name, the model's tool
 * call id and the arguments. */
export type KeyFunc = (context: unknown, tool: string, callId: string, input: JsonObject) => string;

/** AgentsToolOptions configure the tools. */
export interface AgentsToolOptions {
  /** key replaces the default key: the run context's conversationId (or conversation_id) and the
   * model's tool call id. */
  key?: KeyFunc;
  /** executeWaitMs: how long Execute waits for a call another caller is executing (30 s). */
  executeWaitMs?: number;
}

function conversationOf(context: unknown): string {
  const c = context as { conversationId?: unknown; conversation_id?: unknown } | undefined;
  const id = c?.conversationId ?? c?.conversation_id;
  if (typeof id !== "string" || !id) {
    throw new RangeError(
      "opledger: the run context has no conversationId: pass run(agent, input, { context: { conversationId: … } }), or make the tools with key; a model's tool call id alone is not unique across conversations",
    );
  }
  return id;
}

/** defaultKey: the context's conversationId and the model's tool call id. */
export const defaultKey: KeyFunc = (context, toolName, callId) => callKey(conversationOf(context), toolName, callId);

function inputOf(input: unknown): JsonObject {
  const parsed = typeof input === "string" ? (input.trim() ? JSON.parse(input) : {}) : input;
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new TypeError("the tool call's arguments must be a JSON object");
  }
  return parsed as JsonObject;
}

/** agentsTool is one declared tool (an element of ToolRunner.modelTools()) as a FunctionTool. */
export function agentsTool(client: OpledgerClient, t: ModelTool, options: AgentsToolOptions = {}): FunctionTool<any, any, string> {
  const key = options.key ?? defaultKey;
  const version = t.version || undefined;
  const runner = new ToolRunner(client, { executeWaitMs: options.executeWaitMs ?? 30_000, toolVersion: version });
  return tool({
    name: t.name,
    description: t.description,
    parameters: t.argsSchema as any, // the ledger's JSON Schema as it is (strict: false); the ledger validates
    strict: false,
    // Errors propagate, as the runner's do: it raises only what the runtime must handle (the ledger
    // unreachable after its retries, a missing conversation); every answer about the call itself
    // comes back as the tool's output.
    errorFunction: null,
    execute: async (input: unknown, runContext?: RunContext<any>, details?: { toolCall?: { callId: string } }): Promise<string> => {
      const args = inputOf(input);
      if (t.name === CHECK_OPERATION_TOOL) {
        return toldModel(await runner.check(String(args["operation_id"] ?? "")));
      }
      const callId = details?.toolCall?.callId ?? "";
      return toldModel(await runner.run(t.name, args, key(runContext?.context, t.name, callId, args)));
    },
    needsApproval: t.approvalRequired
      ? async (runContext: RunContext<any>, input: unknown, callId?: string): Promise<boolean> => {
          const args = inputOf(input);
          const k = key(runContext.context, t.name, callId ?? "", args); // a missing conversation throws: the run fails
          try {
            return (await recordedCall(client, t.name, args, k, version)).state === State.AWAITING_APPROVAL;
          } catch (err) {
            if (isOpledgerError(err, "APPROVAL_EXPIRED")) return true; // the ledger asks its approvers again
            if (isOpledgerError(err)) return false; // refused or unreachable: the tool's own call reports it
            throw err;
          }
        }
      : false,
  }) as FunctionTool<any, any, string>;
}

/** agentsTools reads the ledger's tools (ListTools: each current tool, and check_operation) as FunctionTools. */
export async function agentsTools(client: OpledgerClient, options: AgentsToolOptions = {}): Promise<FunctionTool<any, any, string>[]> {
  return (await new ToolRunner(client).modelTools()).map((t) => agentsTool(client, t, options));
}

/** decide applies the ledger's decisions to the interruptions of state that are calls of these tools:
 * approve for an approved call, reject with what the model is told for a denied or cancelled one. It
 * returns the interruptions still undecided (resume later: a run resumed with them is interrupted
 * again). It reads each call's operation by Prepare under the call's key, which answers with the
 * recorded operation and runs nothing. `key` must be the one the tools were made with, and `context`
 * the run's context when the key needs it (default: the one the state carries). */
export async function decide(
  client: OpledgerClient,
  state: RunState<any, any>,
  options: { key?: KeyFunc; context?: unknown; tools?: readonly FunctionTool<any, any, any>[] } = {},
): Promise<RunToolApprovalItem[]> {
  const key = options.key ?? defaultKey;
  const context = options.context ?? (state as unknown as { _context?: { context?: unknown } })._context?.context;
  const undecided: RunToolApprovalItem[] = [];
  for (const item of state.getInterruptions()) {
    const raw = item.rawItem as { type?: string; callId?: string; arguments?: string; name?: string };
    const name = item.toolName ?? raw.name ?? "";
    if (raw.type !== "function_call" || !raw.callId || !name || (options.tools && !options.tools.some((t) => t.name === name))) {
      undecided.push(item);
      continue;
    }
    const args = inputOf(raw.arguments ?? "");
    const d = await decisionOf(client, name, args, key(context, name, raw.callId, args));
    if (d.kind === "approved") state.approve(item);
    else if (d.kind === "denied") state.reject(item, { message: d.message });
    else undecided.push(item);
  }
  return undecided;
}
