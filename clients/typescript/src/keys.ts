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
// Derive the key from state your runtime owns and persists (a conversation or workflow id, the
// round or step it is in, an id your application assigned to the intended action) and persist
// the key before calling Prepare. Pass the provider's call id only where your runtime has already
// pinned it (stored the model's response before executing any of its calls); otherwise pass "".

import { createHash } from "node:crypto";
import { canonicalize } from "./fingerprint";

/** KEY_PREFIX marks keys made by deriveKey (and the version of its recipe). */
export const KEY_PREFIX = "opk1-";

/** KeyParts names one intended tool call inside the runtime's workflow. The names are the same in
 * every opledger client (Go KeyParts{Conversation, Round, ToolCall, Tool, ToolVersion}, Python
 * derive_key(conversation=, round=, tool_call=, tool=, tool_version=), Java KeyParts.builder()). */
export interface KeyParts {
  /** conversation is the runtime's durable id of the conversation, workflow or operation; must not
   * be empty. */
  conversation: string;
  /** round is the model round (turn, step) within it: an integer, 0 ≤ round ≤
   * Number.MAX_SAFE_INTEGER. */
  round: number;
  /** toolCall is the call's id within the round, or "" / absent (see the caveat about provider
   * ids). */
  toolCall?: string;
  /** tool is the tool's name, e.g. "pay_invoice"; must not be empty. */
  tool: string;
  /** toolVersion is the version sent in the Prepare request; "" or absent when none is sent. */
  toolVersion?: string;
}

// A lone surrogate: JSON.stringify would escape it as \udXXX, a string no other client can
// produce, so the recipe's "valid Unicode" requirement is enforced instead.
const LONE_SURROGATE = /\p{Surrogate}/u;

/** keyPreimage returns the RFC 8785 canonical JSON text deriveKey hashes (as UTF-8), for checking
 * this client against the shared test vectors or another implementation. It validates the parts
 * as deriveKey does. */
export function keyPreimage(parts: KeyParts): string {
  if (!parts.conversation) {
    throw new RangeError("conversation must not be empty");
  }
  if (!parts.tool) {
    throw new RangeError("tool must not be empty");
  }
  const round: unknown = parts.round;
  // A string round ("3") would be another JSON value than 3, and numbers past 2^53 − 1 are not
  // exact in every language: both are refused rather than converted.
  if (typeof round !== "number" || !Number.isSafeInteger(round)) {
    throw new TypeError("round must be a safe integer number");
  }
  if (round < 0) {
    throw new RangeError("round must not be negative");
  }
  const obj = {
    conversation: parts.conversation,
    round,
    tool_call: parts.toolCall ?? "",
    tool: parts.tool,
    tool_version: parts.toolVersion ?? "",
  };
  for (const [name, value] of Object.entries(obj)) {
    if (typeof value === "string" && LONE_SURROGATE.test(value)) {
      throw new RangeError(`${name} is not valid Unicode (a lone surrogate)`);
    }
  }
  return canonicalize(obj);
}

/** deriveKey returns the idempotency key of one intended tool call: "opk1-" + base64url without
 * padding of SHA-256 over the UTF-8 bytes of the RFC 8785 (JCS) canonical form of
 * {"conversation", "round", "tool_call", "tool", "tool_version"} (docs/fingerprint.md,
 * "Idempotency key derivation"): always 48 printable ASCII characters, the same in every process
 * and every opledger client language, revealing none of its parts.
 *
 * It throws a RangeError for an empty conversation or tool, a negative round or a part that is
 * not valid Unicode, and a TypeError when round is not a safe integer number (a string, a
 * boolean, 1.5 or 2^53 included). */
export function deriveKey(parts: KeyParts): string {
  const text = keyPreimage(parts);
  return KEY_PREFIX + createHash("sha256").update(text, "utf8").digest("base64url");
}
