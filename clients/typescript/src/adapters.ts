// adapters holds what the framework entry points (@opledger/client/ai-sdk,
// @opledger/client/openai-agents) share: reading the ledger's decision on a call without running it,
// and what the model is told about a call a person's decision ended before it ran.

import type { JsonObject } from "@bufbuild/protobuf";
import type { OpledgerClient } from "./client";
import { isOpledgerError } from "./errors";
import { State, type Operation } from "./gen/opledger/v1/ledger_pb";
import { deriveKey } from "./keys";
import { Failed, type ToolOutcome } from "./runner";

/** decisionMessage is what an adapter tells the model about a call that a person's denial (with the
 * approver's reason) or a cancellation ended before it ran; undefined for any other state. The same
 * words as the Python adapters'. */
export function decisionMessage(op: Operation): string | undefined {
  if (op.state === State.REJECTED) {
    const reason = op.approval?.reason ?? "";
    return `An approver denied ${op.tool} (operation ${op.id})${reason ? ": " + reason : ""}. Nothing happened. Tell the user; do not try to get around the decision.`;
  }
  if (op.state === State.CANCELLED) {
    return `${op.tool} (operation ${op.id}) was cancelled before it ran. Nothing happened. Tell the user.`;
  }
  return undefined;
}

/** callKey is an adapter's default idempotency key: the conversation and the model's tool call id. */
export function callKey(conversation: string, tool: string, toolCallId: string): string {
  if (!conversation) {
    throw new RangeError("opledger: no conversation id to derive the call's key from: a model's tool call id alone is not unique across conversations");
  }
  if (!toolCallId) {
    throw new RangeError("opledger: the tool call has no id to derive its key from");
  }
  return deriveKey({ conversation, round: 0, toolCall: toolCallId, tool });
}

/** LedgerDecision is the ledger's word on a call that needed approval. */
export type LedgerDecision =
  | { kind: "undecided"; operation?: Operation }
  | { kind: "approved"; operation: Operation }
  | { kind: "denied"; operation: Operation; message: string };

/** recordedCall is the operation the ledger records under key: Prepare without execute, which answers
 * with the recorded operation when there is one (replayed) and records it awaiting approval when
 * there is none; it never runs anything. */
export async function recordedCall(client: OpledgerClient, tool: string, args: JsonObject, key: string, toolVersion?: string): Promise<Operation> {
  return (await client.prepare(tool, args, { idempotencyKey: key, toolVersion })).operation!;
}

/** decisionOf reads the ledger's decision on the call under key (see recordedCall). An approval that
 * lapsed is undecided again: the ledger asks its approvers again. */
export async function decisionOf(client: OpledgerClient, tool: string, args: JsonObject, key: string, toolVersion?: string): Promise<LedgerDecision> {
  let op: Operation;
  try {
    op = await recordedCall(client, tool, args, key, toolVersion);
  } catch (err) {
    if (isOpledgerError(err, "APPROVAL_EXPIRED")) return { kind: "undecided" };
    throw err;
  }
  const message = decisionMessage(op);
  if (message !== undefined) return { kind: "denied", operation: op, message };
  if (op.state === State.AWAITING_APPROVAL) return { kind: "undecided", operation: op };
  return { kind: "approved", operation: op };
}

/** toldModel is what a tool returns to the model: the runner's forModel text, with decisionMessage
 * as the message of a call a denial or a cancellation ended. */
export function toldModel(outcome: ToolOutcome): string {
  if (outcome instanceof Failed && outcome.operation) {
    const words = decisionMessage(outcome.operation);
    if (words !== undefined) return new Failed(outcome.reason, words, outcome.operation).forModel();
  }
  return outcome.forModel();
}
