// keys derives Prepare idempotency keys from an agent runtime's own workflow state.
//
// An idempotency key is the business identity of an operation: every retry of the same intended
// action must send the same key, and a second legitimate action needs another one.
//
// Caveat: a model provider's tool-call id is not a business identity. It matches a tool result
// to one model response, but a regenerated response (a retried model round, another provider)
// may carry a new call id for the same action, and a key built from it would then pay twice.
// Derive the key from state your runtime owns and persists (a workflow or conversation id, the
// step or round it is in, an id your application assigned to the intended action) and persist
// the key before calling Prepare.

import { createHash } from "node:crypto";
import { canonicalize } from "./fingerprint";

/** KEY_PREFIX marks keys made by deriveIdempotencyKey (and the version of its recipe). */
export const KEY_PREFIX = "opk1-";

/** KeyParts names one intended tool call inside the runtime's workflow. */
export interface KeyParts {
  /** workflowId is the runtime's durable id of the conversation, workflow or operation. */
  workflowId: string;
  /** modelRound is the round or step of that workflow the call belongs to. */
  modelRound: number | string;
  /** toolCallId is the call's id within the round (see the caveat about provider ids). */
  toolCallId: string;
  /** toolName is the tool, e.g. "pay_invoice". */
  toolName: string;
  /** toolVersion is the tool's version; empty or absent means unspecified. */
  toolVersion?: string;
}

/** deriveIdempotencyKey returns "opk1-" + the first 43 characters of base64url(SHA-256(JCS of
 * ["opledger-idempotency-key/v1", workflowId, String(modelRound), toolCallId, toolName,
 * toolVersion])): 48 printable ASCII characters, the same in every process and in the Python
 * client, revealing none of its parts. */
export function deriveIdempotencyKey(parts: KeyParts): string {
  if (!parts.workflowId) {
    throw new RangeError("workflowId must not be empty");
  }
  if (!parts.toolName) {
    throw new RangeError("toolName must not be empty");
  }
  const round = parts.modelRound;
  if (typeof round !== "string" && !(typeof round === "number" && Number.isSafeInteger(round))) {
    throw new TypeError("modelRound must be an integer or a string");
  }
  const text = canonicalize([
    "opledger-idempotency-key/v1",
    parts.workflowId,
    String(round),
    parts.toolCallId ?? "",
    parts.toolName,
    parts.toolVersion ?? "",
  ]);
  return KEY_PREFIX + createHash("sha256").update(text, "utf8").digest("base64url").slice(0, 43);
}
