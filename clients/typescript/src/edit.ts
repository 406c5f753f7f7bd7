// edit is what a runner tells the model about a tool's policy: an approver's edit of a call
// (approve-with-edit: the operation that ran is not the one the agent prepared), the refusals of a
// policy or a budget, and the policy's summary in the model's tool description. The texts are the
// same in every opledger client (clients/testdata/tool_outcomes.json).

import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { canonicalize } from "./fingerprint";

/** MESSAGE_EDITED (with the changes, the verb of the outcome's status, the arguments that ran, the
 * edited operation and the original) tells the model that an approver changed the call's
 * arguments before approving it: what ran is not what the model asked for, and the call as made
 * never runs. */
export const MESSAGE_EDITED =
  "An approver changed {changes}; {verb}: {args}. Operation {operation_id} replaces {supersedes}, the call as it was made, which will not run.";

/** MESSAGE_POLICY_DENIED (with the ledger's refusal, which names the rule and says its message)
 * tells the model that the tool's policy refuses the call and that the same call is refused
 * again. */
export const MESSAGE_POLICY_DENIED =
  "The tool's policy refuses this call: {message}. Calling the tool again with the same arguments will be refused again: tell the user, and do not try to get around the rule.";

/** MESSAGE_LIMIT_EXCEEDED (with the ledger's refusal) tells the model that a budget of the tools
 * file refused the call. */
export const MESSAGE_LIMIT_EXCEEDED =
  "This call was not made: {message}. Nothing was recorded; the same call may be accepted once the limit's window has room again, but do not split or change it to get around the limit: tell the user.";

/** MESSAGE_OPERATION_DUPLICATE (with the other call's state, as stateWords gives it) tells the
 * model that the same action (the tool's business identity) is already recorded under another
 * key. */
export const MESSAGE_OPERATION_DUPLICATE =
  "This call was not made: the same action is already recorded as another call, operation_id, which is {state}. Do not make it again, under this key or another; call check_operation with that operation_id to learn its outcome.";

/** MAX_POLICY_SUMMARY is the longest Policy.summary (in characters: code points) modelDescription
 * adds to a tool's description; a longer one is left to ListTools. */
export const MAX_POLICY_SUMMARY = 300;

const VERBS: Record<string, string> = {
  succeeded: "this ran",
  failed: "this did not take effect",
  outcome_unknown: "this was sent, and its outcome is not known yet",
  awaiting_approval: "this awaits approval",
};

/** Change is one argument an approver changed: from is its value in the call as made (undefined
 * when added), to the value that ran (undefined when removed). */
export interface Change {
  field: string;
  from?: JsonValue;
  to?: JsonValue;
  added: boolean;
  removed: boolean;
}

/** Edit is an approver's change of a call's arguments (approve-with-edit, docs/policy.md): the
 * outcome's operation is the edited one, which the runner followed the link to
 * (Operation.supersededBy) and ran. supersedes is the call as made, REJECTED, which never runs;
 * args what ran; changes the fields the approver changed, in canonical JSON order. */
export class Edit {
  constructor(
    readonly supersedes: string,
    readonly args: JsonObject,
    readonly changes: readonly Change[],
  ) {}

  /** of describes the edit from the arguments of the call as made to args. */
  static of(supersedes: string, original: JsonObject, args: JsonObject): Edit {
    // JavaScript's default sort compares UTF-16 code units, as RFC 8785 orders names.
    const names = [...new Set([...Object.keys(original), ...Object.keys(args)])].sort();
    const changes: Change[] = [];
    for (const name of names) {
      const had = Object.hasOwn(original, name);
      const has = Object.hasOwn(args, name);
      if (had && has && canonicalize(original[name]!) === canonicalize(args[name]!)) continue;
      changes.push({ field: name, from: had ? original[name] : undefined, to: has ? args[name] : undefined, added: !had, removed: !has });
    }
    return new Edit(supersedes, args, changes);
  }

  /** message is the sentence forModel gives the model about the edit (MESSAGE_EDITED), for an
   * outcome of that status about operation operationId. */
  message(status: string, operationId: string): string {
    const parts = this.changes.map(
      (c) => `${c.field} from ${c.added ? "nothing" : canonicalize(c.from!)} to ${c.removed ? "nothing" : canonicalize(c.to!)}`,
    );
    const fill: Record<string, string> = {
      changes: parts.join(", ") || "nothing",
      verb: VERBS[status] ?? "",
      args: canonicalize(this.args),
      operation_id: operationId,
      supersedes: this.supersedes,
    };
    return MESSAGE_EDITED.replace(/\{(\w+)\}/g, (_, k: string) => fill[k]!);
  }

  /** forModel is the edit as forModel's "edited" member: {"args", "changes": [{"field", "from",
   * "to"}], "message", "supersedes"}. */
  forModel(status: string, operationId: string): JsonObject {
    const changes = this.changes.map((c) => {
      const m: JsonObject = { field: c.field };
      if (!c.added) m["from"] = c.from!;
      if (!c.removed) m["to"] = c.to!;
      return m;
    });
    return { args: this.args, changes, message: this.message(status, operationId), supersedes: this.supersedes };
  }
}

/** refusalMessage is what a runner tells the model about a refusal of the call with that reason
 * and ledger message: the message itself, or for POLICY_DENIED and LIMIT_EXCEEDED the message with
 * what it means for the model. */
export function refusalMessage(reason: string, message: string): string {
  if (reason === "POLICY_DENIED") return MESSAGE_POLICY_DENIED.replace("{message}", () => message);
  if (reason === "LIMIT_EXCEEDED") return MESSAGE_LIMIT_EXCEEDED.replace("{message}", () => message);
  return message;
}

/** modelDescription is a tool's description for a model: the tools file's description, then the
 * policy's plain-words summary (Policy.summary) when there is one of at most MAX_POLICY_SUMMARY
 * characters, as "\n\nPolicy: <summary>.". */
export function modelDescription(description: string, summary: string | undefined): string {
  if (!summary || [...summary].length > MAX_POLICY_SUMMARY) return description;
  if (!description) return `Policy: ${summary}.`;
  return `${description}\n\nPolicy: ${summary}.`;
}
