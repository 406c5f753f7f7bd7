// keys derives Prepare idempotency keys from an agent runtime's own workflow state.
//
// An idempotency key is the business identity of an operation: every retry of the same intended
// action must send the same key, and a second legitimate action needs another one.
//
// The recipe ("opk1") is the normative one of docs/fingerprint.md, "Idempotency key derivation",
// shared by every opledger client (Go, Java, Python, TypeScript) and checked against
// clients/go/fingerprint/testdata/key_vectors.json, so every language derives the same key from the same parts.
//
// Caveat: a model provider's tool-call id is not a business identity. It matches a tool result
// to one model response, but a regenerated response (a retried model round, another provider)
// may carry a new call id for the same action, and a key built from it would then pay twice.
// Derive the key from state your runtime owns and persists (a workflow or conversation id, the
// step or round it is in, an id your application assigned to the intended action) and persist
// the key before calling Prepare. Pass the provider's call id only where your runtime has already
// pinned it (stored the model's response before executing any of its calls); otherwise pass "".

import { createHash } from "node:crypto";
import { canonicalize } from "./fingerprint";

/** KEY_PREFIX marks keys made by deriveIdempotencyKey (and the version of its recipe). */
export const KEY_PREFIX = "opk1-";

/** KeyParts names one intended tool call inside the runtime's workflow. */
export interface KeyParts {
  /** workflowId is the runtime's durable id of the conversation, workflow or operation (the
   * "conversation" part); must not be empty. */
  workflowId: string;
  /** modelRound is the round or step of that workflow the call belongs to (the "round" part):
   * an integer, 0 ≤ modelRound ≤ Number.MAX_SAFE_INTEGER. */
  modelRound: number;
  /** toolCallId is the call's id within the round, or "" (see the caveat about provider ids). */
  toolCallId: string;
  /** toolName is the tool, e.g. "pay_invoice"; must not be empty. */
  toolName: string;
  /** toolVersion is the version sent in the Prepare request; empty or absent when none is sent. */
  toolVersion?: string;
}

// A lone surrogate: JSON.stringify would escape it as \udXXX, a string no other client can
// produce, so the recipe's "valid Unicode" requirement is enforced instead.
const LONE_SURROGATE = /\p{Surrogate}/u;

/** keyPreimage returns the RFC 8785 canonical JSON text deriveIdempotencyKey hashes (as UTF-8),
 * for checking this client against the shared test vectors or another implementation. It
 * validates the parts as deriveIdempotencyKey does. */
export function keyPreimage(parts: KeyParts): string {
  if (!parts.workflowId) {
    throw new RangeError("workflowId must not be empty");
  }
  if (!parts.toolName) {
    throw new RangeError("toolName must not be empty");
  }
  const round: unknown = parts.modelRound;
  // A string round ("3") would be another JSON value than 3, and numbers past 2^53 − 1 are not
  // exact in every language: both are refused rather than converted.
  if (typeof round !== "number" || !Number.isSafeInteger(round)) {
    throw new TypeError("modelRound must be a safe integer number");
  }
  if (round < 0) {
    throw new RangeError("modelRound must not be negative");
  }
  const obj = {
    conversation: parts.workflowId,
    round,
    tool_call: parts.toolCallId ?? "",
    tool: parts.toolName,
    tool_version: parts.toolVersion ?? "",
  };
  for (const [name, value] of Object.entries(obj)) {
    if (typeof value === "string" && LONE_SURROGATE.test(value)) {
      throw new RangeError(`${name} is not valid Unicode (a lone surrogate)`);
    }
  }
  return canonicalize(obj);
}

/** deriveIdempotencyKey returns "opk1-" + base64url without padding of SHA-256 over the UTF-8
 * bytes of the RFC 8785 (JCS) canonical form of {"conversation": workflowId, "round": modelRound,
 * "tool_call": toolCallId, "tool": toolName, "tool_version": toolVersion ?? ""}
 * (docs/fingerprint.md, "Idempotency key derivation"): always 48 printable ASCII characters, the
 * same in every process and every opledger client language, revealing none of its parts.
 *
 * It throws a RangeError for an empty workflowId or toolName, a negative modelRound or a part
 * that is not valid Unicode, and a TypeError when modelRound is not a safe integer number (a
 * string, a boolean, 1.5 or 2^53 included). */
export function deriveIdempotencyKey(parts: KeyParts): string {
  const text = keyPreimage(parts);
  return KEY_PREFIX + createHash("sha256").update(text, "utf8").digest("base64url");
}
