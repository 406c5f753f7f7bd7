// runner runs one tool call of an agent through the ledger end to end, and builds the model's
// tool list from ListTools.
//
// ToolRunner.run does, for one call: Prepare; the approval (onApprovalRequired, then a wait of up
// to approvalWaitMs for a person's decision, or an AwaitingApproval answer at once); Execute with a
// wait; and one typed final answer, a ToolOutcome discriminated by `kind`:
//  - Succeeded: the effect happened once; `result` is the downstream's answer.
//  - Failed: nothing happened (the downstream refused it, a person denied it, it was cancelled,
//    or the ledger refused the request: ARGS_INVALID, TOOL_UNKNOWN …). The agent may correct the
//    call and make it under a new key, except when a refusal of the request carries an operation:
//    its key already names an earlier call, which may have taken effect
//    (MESSAGE_KEY_NAMES_EARLIER_CALL).
//  - OutcomeUnknown: the effect may or may not have happened. Never make it again under a new
//    key; a later run with the same key returns the outcome once it is known.
//  - AwaitingApproval: a person has to decide first (also when an approval given earlier expired
//    before the call ran); run the same call (same key) again later.
// forModel() renders any of them as the JSON text to hand the model, byte for byte the same in
// every opledger client.
//
// Running the same call again (same tool, args and key) is how an agent resumes it after
// AwaitingApproval, after OutcomeUnknown or after a crash: the ledger replays the operation and
// the run continues from its state, without a second effect. A call that needs no approval takes
// one request (prepare with execute, the one-call path).

import type { JsonObject } from "@bufbuild/protobuf";
import type { OpledgerClient } from "./client";
import { decodeErrorInfo, ERROR_DOMAIN, isOpledgerError, type OpledgerError, type Reason } from "./errors";
import { Edit, MESSAGE_OPERATION_DUPLICATE, modelDescription, refusalMessage } from "./edit";
import { canonicalize } from "./fingerprint";
import { Effect, State, type Operation } from "./gen/opledger/v1/ledger_pb";
import { checkNumbers, duplicateMember, hasLoneSurrogate } from "./numbers";

/** MESSAGE_AWAITING_APPROVAL is what forModel tells the model about a call that waits for a
 * person. */
export const MESSAGE_AWAITING_APPROVAL =
  "A person must approve this call before it can run; it is recorded under operation_id. Do not call the tool again for it: a new call would be a second, separate request. Call check_operation with the operation_id later to learn its outcome.";

/** MESSAGE_OUTCOME_UNKNOWN is what forModel tells the model about a call whose effect is unknown. */
export const MESSAGE_OUTCOME_UNKNOWN =
  "The outcome is not known yet: the request may have reached the service. Do not call the tool again for it, or do it another way: a new call would be a second, separate request. Call check_operation with the operation_id later to learn its outcome.";

/** MESSAGE_KEY_NAMES_EARLIER_CALL (with the earlier call's state, as stateWords gives it, for
 * "{state}") is what forModel tells the model about a call refused under a key that already names
 * an earlier call (IDEMPOTENCY_KEY_REUSED, or a tool, version or args refused), which may have
 * taken effect. */
export const MESSAGE_KEY_NAMES_EARLIER_CALL =
  "This call was not made: its idempotency key already names an earlier call, which is {state}. If that was this same action, it is done or under way: do not make it again under a new key.";

/** MESSAGE_KEY_NAMES_UNDONE_CALL is MESSAGE_KEY_NAMES_EARLIER_CALL for an earlier call that did not
 * take effect (failed, rejected, cancelled). */
export const MESSAGE_KEY_NAMES_UNDONE_CALL =
  "This call was not made: its idempotency key already names an earlier call, which is {state} and did not take effect.";

/** stateWords is how the model's texts name a state: "outcome unknown" for OUTCOME_UNKNOWN, and
 * "in a state this client does not know" for one newer than this client. */
export function stateWords(state: State): string {
  const name = State[state];
  if (name === undefined || state === State.UNSPECIFIED) {
    return "in a state this client does not know";
  }
  return name.replace(/^STATE_/, "").replace(/_/g, " ").toLowerCase();
}

/** keyNamesEarlierCall is the message of a refusal under a key that names an earlier call in
 * that state. */
export function keyNamesEarlierCall(state: State): string {
  const undone = state === State.FAILED || state === State.REJECTED || state === State.CANCELLED;
  return (undone ? MESSAGE_KEY_NAMES_UNDONE_CALL : MESSAGE_KEY_NAMES_EARLIER_CALL).replace("{state}", stateWords(state));
}

/** The refusals of the request itself, before anything was recorded: under a key that already
 * names an earlier call, the refusal carries it. */
const KEYED: ReadonlySet<Reason> = new Set<Reason>([
  "IDEMPOTENCY_KEY_REUSED",
  "TOOL_UNKNOWN",
  "TOOL_VERSION_UNKNOWN",
  "ARGS_INVALID",
  "ARGS_TOO_LARGE",
]);

/** The refusals that name another call than this one when they carry an operation_id: the key's
 * earlier call (KEYED; POLICY_DENIED unless it names this call, refused at its claim), or the same
 * action under another key (OPERATION_DUPLICATE). That call may have taken effect. */
const NAMES_OTHER: ReadonlySet<Reason> = new Set<Reason>([...KEYED, "POLICY_DENIED", "OPERATION_DUPLICATE"]);

/** MAX_EDITS bounds the supersede links a run follows (an edit of an edited operation, …), and the
 * way back to the call as made. */
const MAX_EDITS = 8;

/** render is an outcome's forModel text, with an approver's edit as its "edited" member. */
function render(obj: JsonObject, edit: Edit | undefined): string {
  if (edit) obj["edited"] = edit.forModel(obj["status"] as string, obj["operation_id"] as string);
  return canonicalize(obj);
}

/** Succeeded is a call whose effect happened once. */
export class Succeeded {
  readonly kind = "succeeded" as const;
  constructor(
    readonly operation: Operation,
    /** result is the downstream's answer (Operation.result). */
    readonly result: JsonObject = {},
    /** edit, when set, says that an approver changed the arguments: what ran is edit.args. */
    readonly edit?: Edit,
  ) {}
  get operationId(): string {
    return this.operation.id;
  }
  /** forModel: {"edited" (with an edit), "operation_id", "result", "status": "succeeded"} (RFC 8785
   * JSON). */
  forModel(): string {
    return render({ status: this.kind, operation_id: this.operationId, result: this.result }, this.edit);
  }
}

/** Failed is a call that definitively did not happen; reason says why (DOWNSTREAM_REJECTED,
 * OPERATION_REJECTED, ARGS_INVALID …). operation is undefined when the ledger refused the request
 * before recording one. */
export class Failed {
  readonly kind = "failed" as const;
  constructor(
    readonly reason: string,
    readonly message: string,
    readonly operation?: Operation,
    /** edit, when set, says that an approver changed the arguments of the call that failed. */
    readonly edit?: Edit,
  ) {}
  get operationId(): string {
    return this.operation?.id ?? "";
  }
  /** forModel: {"edited" (with an edit), "message", "operation_id" (when there is one), "reason",
   * "status": "failed"}. */
  forModel(): string {
    const obj: JsonObject = { status: this.kind, reason: this.reason, message: this.message };
    if (this.operationId) obj["operation_id"] = this.operationId;
    return render(obj, this.edit);
  }
}

/** OutcomeUnknown is a call that may or may not have taken effect (OUTCOME_UNKNOWN, or still
 * EXECUTING by another caller: pending). Never make it again under a new key. */
export class OutcomeUnknown {
  readonly kind = "outcome_unknown" as const;
  constructor(
    readonly operation: Operation,
    readonly pending = false,
    /** edit, when set, says that an approver changed the arguments of the call that was sent. */
    readonly edit?: Edit,
  ) {}
  get operationId(): string {
    return this.operation.id;
  }
  /** forModel: {"edited" (with an edit), "message", "operation_id", "status": "outcome_unknown"}. */
  forModel(): string {
    return render({ status: this.kind, operation_id: this.operationId, message: MESSAGE_OUTCOME_UNKNOWN }, this.edit);
  }
}

/** AwaitingApproval is a call that waits for a person's decision; run it again later. */
export class AwaitingApproval {
  readonly kind = "awaiting_approval" as const;
  constructor(
    readonly operation: Operation,
    /** edit, when set, says that an approver changed the arguments, and the edited call awaits
     * another approval (a quorum). */
    readonly edit?: Edit,
  ) {}
  get operationId(): string {
    return this.operation.id;
  }
  /** forModel: {"edited" (with an edit), "message", "operation_id", "status": "awaiting_approval"}. */
  forModel(): string {
    return render({ status: this.kind, operation_id: this.operationId, message: MESSAGE_AWAITING_APPROVAL }, this.edit);
  }
}

/** ToolOutcome is a run's final answer; switch on `kind`. */
export type ToolOutcome = Succeeded | Failed | OutcomeUnknown | AwaitingApproval;

/** ModelTool is one tool as a model sees it. Put it in the model's tool list (OpenAI:
 * {type: "function", function: {name, description, parameters: argsSchema}}; Anthropic:
 * {name, description, input_schema: argsSchema}). */
export interface ModelTool {
  name: string;
  description: string;
  /** argsSchema is the JSON Schema of the arguments, which the ledger enforces on Prepare. */
  argsSchema: JsonObject;
  version: string;
  approvalRequired: boolean;
  effect: "read_only" | "idempotent" | "side_effect" | "";
}

/** CHECK_OPERATION_TOOL is the runner's own model tool (as the MCP gateway has): it reports an
 * earlier call's outcome by its operation_id, and runs it if a person approved it since; it never
 * makes a new call. The messages of AwaitingApproval and OutcomeUnknown point the model to it. */
export const CHECK_OPERATION_TOOL = "check_operation";

/** MESSAGE_CHECK_UNKNOWN_OPERATION is the message of a check_operation call whose operation_id
 * the ledger does not know. */
export const MESSAGE_CHECK_UNKNOWN_OPERATION = "No operation has this id. This says nothing about the earlier call: do not make it again; pass the operation_id its answer gave.";

/** checkOperationModelTool is the model tool modelTools adds for CHECK_OPERATION_TOOL. */
export function checkOperationModelTool(): ModelTool {
  return {
    name: CHECK_OPERATION_TOOL,
    description:
      "Report the outcome of an earlier tool call by the operation_id its answer gave, and run it if a person approved it since. " +
      "It never makes a new call: use it, not the original tool, for a call that awaited approval or whose outcome was not known.",
    argsSchema: {
      type: "object",
      additionalProperties: false,
      required: ["operation_id"],
      properties: { operation_id: { type: "string", description: "the operation_id of an earlier answer" } },
    },
    version: "",
    approvalRequired: false,
    effect: "idempotent",
  };
}

/** ToolRunnerOptions configure a ToolRunner. */
export interface ToolRunnerOptions {
  /** approvalWaitMs is how long run waits for a person's decision on a call that needs approval
   * (polling get) before it answers AwaitingApproval; 0 (the default) answers at once. */
  approvalWaitMs?: number;
  /** onApprovalRequired is called with the operation each time a run finds it awaiting approval
   * (a repeated run too), before waiting: notify the approvers, or ask a person in-process and
   * approve with an approver's client. A rejection ends the run with it. */
  onApprovalRequired?: (operation: Operation) => void | Promise<void>;
  /** executeWaitMs is how long Execute waits when another caller is executing the operation
   * (default 30 s). */
  executeWaitMs?: number;
  /** toolVersion pins every call to this tool version (default: the tool's current one). */
  toolVersion?: string;
}

/** The refusals that are answers about the call itself: nothing was done. */
const REFUSALS: ReadonlySet<Reason> = new Set<Reason>([
  "ARGS_INVALID",
  "ARGS_TOO_LARGE",
  "TOOL_UNKNOWN",
  "TOOL_VERSION_UNKNOWN",
  "IDEMPOTENCY_KEY_REUSED",
  "OPERATION_REJECTED",
  "OPERATION_CANCELLED",
  "POLICY_DENIED",
  "LIMIT_EXCEEDED",
  "OPERATION_DUPLICATE",
]);

const EFFECTS: Partial<Record<Effect, ModelTool["effect"]>> = {
  [Effect.READ_ONLY]: "read_only",
  [Effect.IDEMPOTENT]: "idempotent",
  [Effect.SIDE_EFFECT]: "side_effect",
};

/** ToolRunner runs tool calls with an agent's OpledgerClient; see the file comment. */
export class ToolRunner {
  private readonly opts: Required<Omit<ToolRunnerOptions, "onApprovalRequired" | "toolVersion">> &
    Pick<ToolRunnerOptions, "onApprovalRequired" | "toolVersion">;

  constructor(
    private readonly client: OpledgerClient,
    opts: ToolRunnerOptions = {},
  ) {
    this.opts = { approvalWaitMs: 0, executeWaitMs: 30_000, ...opts };
  }

  /** modelTools returns the tools the ledger enforces, current versions only, then
   * checkOperationModelTool(). A tool's description carries its policy's summary
   * (modelDescription). A ledger tool named check_operation is an error: rename it in the tools
   * file. */
  async modelTools(): Promise<ModelTool[]> {
    const resp = await this.client.listTools();
    const current = resp.tools.filter((t) => t.current);
    if (current.some((t) => t.name === CHECK_OPERATION_TOOL)) {
      throw new Error(`the ledger has a tool named "${CHECK_OPERATION_TOOL}", which is the runner's own tool; rename it in the tools file`);
    }
    return current
      .map((t): ModelTool => ({
        name: t.name,
        description: modelDescription(t.description, t.policy?.summary),
        argsSchema: t.argsSchema ?? {},
        version: t.version,
        approvalRequired: t.approvalRequired,
        effect: EFFECTS[t.effect] ?? "",
      }))
      .concat([checkOperationModelTool()]);
  }

  /** run runs one tool call to its final answer. args is a JSON object or the model's JSON text;
   * idempotencyKey is the call's business identity (deriveKey). It rejects with an OpledgerError
   * only for what the runtime, not the model, must handle (the ledger unreachable after the
   * client's retries, a bad key, a rejected hook); the same run may simply be repeated. */
  async run(tool: string, args: JsonObject | string | undefined, idempotencyKey: string): Promise<ToolOutcome> {
    if (tool === CHECK_OPERATION_TOOL) {
      return this.check(operationIdArg(args));
    }
    let op: Operation;
    try {
      // The one-call path: prepare also executes a call that needs no approval.
      const prepared = await this.client.prepare(tool, parseArgs(args), {
        idempotencyKey,
        toolVersion: this.opts.toolVersion,
        execute: true,
        waitMs: this.opts.executeWaitMs,
      });
      op = prepared.operation!;
    } catch (err) {
      const next = supersededBy(err);
      if (next) {
        // The key names a call an approver approved with edits: the edited one is the one to run.
        op = (await this.client.get(next)).operation!;
      } else if (!isOpledgerError(err, "APPROVAL_EXPIRED")) {
        return this.refused(err, undefined);
      } else {
        // The approval lapsed before the call ran: the ledger put the operation back to
        // AWAITING_APPROVAL and asked its approvers again. The same call waits for a new decision.
        op = await this.reawaiting(err, undefined);
      }
    }
    return this.carryOn(op, false);
  }

  /** check is the check_operation tool: the outcome of an earlier call by its operation id. An
   * unknown outcome is looked up at the downstream first (reconcile); an operation approved since,
   * or executing now, is executed or waited for, as run would; anything else is answered as it
   * stands. It never prepares anything. An id the ledger does not know is a Failed. */
  async check(operationId: string): Promise<ToolOutcome> {
    let op: Operation;
    try {
      op = (await this.client.get(operationId)).operation!;
    } catch (err) {
      if (isOpledgerError(err, "OPERATION_NOT_FOUND") || isOpledgerError(err, "FIELD_INVALID")) {
        return new Failed((err as OpledgerError).reason ?? "", MESSAGE_CHECK_UNKNOWN_OPERATION);
      }
      throw err;
    }
    if (op.state === State.OUTCOME_UNKNOWN) {
      try {
        op = (await this.client.reconcile(op.id)).operation!; // the ledger may know more now
      } catch {
        // as it stands
      }
    }
    return this.carryOn(op, true);
  }

  /** carryOn takes the operation to its answer; one an approver approved with edits (REJECTED
   * with supersededBy, or an Execute answered OPERATION_SUPERSEDED) is followed to the edited one,
   * which is run (it may still await another approver), and the answer says what the approver
   * changed (edit). */
  private async carryOn(op: Operation, check: boolean): Promise<ToolOutcome> {
    const out = await this.settle(op, check);
    const last = out.operation;
    if (!last?.supersedes) return out;
    let root = last;
    for (let i = 0; root.supersedes; i++) {
      if (i >= MAX_EDITS) throw new Error(`opledger: more than ${MAX_EDITS} approver edits in a row before ${last.id}`);
      root = (await this.client.get(root.supersedes)).operation!;
    }
    return withEdit(out, Edit.of(root.id, root.args ?? {}, last.args ?? {}));
  }

  /** current is the operation in force for the recorded call op: op itself, or, when an approver
   * approved it with edits (REJECTED with supersededBy), the edited operation the link leads to
   * (followed again while that one was edited too, at most MAX_EDITS links). It runs nothing. The
   * framework adapters read an approver's decision through it, so an edit is an approval of the
   * edited call, never a denial. */
  async current(op: Operation): Promise<Operation> {
    for (let hops = 0; followed(op); hops++) {
      if (hops >= MAX_EDITS) throw new Error(`opledger: more than ${MAX_EDITS} approver edits in a row; stopped at ${op.id}`);
      op = (await this.client.get(op.supersededBy)).operation!;
    }
    return op;
  }

  private async settle(op: Operation, check: boolean): Promise<ToolOutcome> {
    for (let hops = 0; ; hops++) {
      if (hops > MAX_EDITS) throw new Error(`opledger: more than ${MAX_EDITS} approver edits in a row; stopped at ${op.id}`);
      op = await this.current(op);
      if (op.state === State.AWAITING_APPROVAL) {
        op = await this.awaitDecision(op);
        if (followed(op)) continue; // approved with edits meanwhile: follow the link
        if (op.state === State.AWAITING_APPROVAL) {
          return new AwaitingApproval(op);
        }
      } else if (op.state === State.EXECUTING && check) {
        // a check waits for its outcome
      } else if (op.state === State.REJECTED || op.state === State.CANCELLED) {
        // Execute answers it as a refusal (a Failed with the operation)
      } else if (op.state !== State.READY) {
        return final(op); // READY: not executed (a server without the one-call path)
      }
      try {
        const done = await this.client.execute(op.id, { waitMs: this.opts.executeWaitMs });
        return final(done.operation!);
      } catch (err) {
        const next = supersededBy(err);
        if (next) {
          op = (await this.client.get(next)).operation!;
          continue;
        }
        if (isOpledgerError(err, "APPROVAL_REQUIRED")) {
          return new AwaitingApproval(op);
        }
        if (isOpledgerError(err, "APPROVAL_EXPIRED")) {
          return new AwaitingApproval(await this.reawaiting(err, op));
        }
        const refused = await this.refused(err, op);
        if (!["OPERATION_REJECTED", "OPERATION_CANCELLED", "POLICY_DENIED"].includes(refused.reason)) {
          // An Execute refused for another reason (a replica without the tool's version,
          // say): the operation is not settled, and "failed" would say nothing happened. (A
          // POLICY_DENIED here is the policy in force at its claim: it is REJECTED now.)
          return new OutcomeUnknown(op, true);
        }
        return refused;
      }
    }
  }

  /** reawaiting reads the operation an APPROVAL_EXPIRED refusal is about as it stands now (back in
   * AWAITING_APPROVAL). An expired approval is never Failed: the call is the same and must not be
   * made again under a new key. */
  private async reawaiting(err: OpledgerError, op: Operation | undefined): Promise<Operation> {
    const id = err.metadata?.["operation_id"] || op?.id;
    if (!id) {
      throw err;
    }
    return (await this.client.get(id)).operation!;
  }

  /** refused turns a refusal of the call itself into a Failed (with the operation the refusal
   * names: the one-call execution's own, or the earlier call a used key names, which may have
   * taken effect and is said so) and rethrows anything else. */
  private async refused(err: unknown, op: Operation | undefined): Promise<Failed> {
    const failed = refusal(err, op);
    const id = (err as OpledgerError).metadata?.["operation_id"];
    if (!failed.operation && id) {
      let named: Operation | undefined;
      try {
        named = (await this.client.get(id)).operation;
      } catch (getErr) {
        if (NAMES_OTHER.has(failed.reason as Reason)) throw err; // the other call cannot be read now: not a final answer
      }
      if (named) {
        let message = failed.message;
        if (failed.reason === "OPERATION_DUPLICATE") {
          message = MESSAGE_OPERATION_DUPLICATE.replace("{state}", stateWords(named.state));
        } else if (KEYED.has(failed.reason as Reason) || (failed.reason === "POLICY_DENIED" && named.state !== State.REJECTED)) {
          message = keyNamesEarlierCall(named.state);
        }
        return new Failed(failed.reason, message, named);
      }
    }
    return failed;
  }

  private async awaitDecision(op: Operation): Promise<Operation> {
    if (this.opts.onApprovalRequired) {
      await this.opts.onApprovalRequired(op);
    } else if (this.opts.approvalWaitMs <= 0) {
      return op;
    }
    const deadline = Date.now() + this.opts.approvalWaitMs;
    let interval = 200;
    for (;;) {
      op = (await this.client.get(op.id)).operation!;
      const left = deadline - Date.now();
      if (op.state !== State.AWAITING_APPROVAL || left <= 0) {
        return op;
      }
      await new Promise((r) => setTimeout(r, Math.min(interval, left)));
      interval = Math.min(interval * 1.5, 2000);
    }
  }
}

/** operationIdArg reads check_operation's operation_id from arguments in any shape run takes. */
function operationIdArg(args: JsonObject | string | undefined): string {
  let parsed: JsonObject | undefined;
  try {
    parsed = parseArgs(args);
  } catch {
    return "";
  }
  const id = parsed?.["operation_id"];
  return typeof id === "string" ? id : "";
}

function parseArgs(args: JsonObject | string | undefined): JsonObject | undefined {
  if (typeof args !== "string") {
    return args;
  }
  const parsed: unknown = args.trim() === "" ? {} : JSON.parse(args);
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new TypeError("the tool call's arguments must be a JSON object");
  }
  checkNumbers(args);
  const twice = duplicateMember(args);
  if (twice !== undefined) {
    throw new TypeError(`the member ${JSON.stringify(twice)} appears twice in one object: which one counts is not defined`);
  }
  if (hasLoneSurrogate(parsed)) {
    throw new TypeError("a string holds an unpaired UTF-16 surrogate, which the ledger's UTF-8 strings cannot carry");
  }
  return parsed as JsonObject;
}

/** refusal turns a refusal of the call itself into a Failed and rethrows anything else. */
function refusal(err: unknown, op: Operation | undefined): Failed {
  if (isOpledgerError(err) && err.reason !== undefined && REFUSALS.has(err.reason)) {
    return new Failed(err.reason, refusalMessage(err.reason, (err as OpledgerError).rawMessage), op);
  }
  throw err;
}

/** supersededBy is the operation an OPERATION_SUPERSEDED refusal names, or "". */
function supersededBy(err: unknown): string {
  return isOpledgerError(err, "OPERATION_SUPERSEDED") ? (err.metadata?.["superseded_by"] ?? "") : "";
}

/** followed: an approver approved op with edits; the edited operation is the one to run. */
function followed(op: Operation): boolean {
  return op.state === State.REJECTED && op.supersededBy !== "";
}

/** withEdit is the outcome with an approver's edit. */
function withEdit(out: ToolOutcome, edit: Edit): ToolOutcome {
  switch (out.kind) {
    case "succeeded":
      return new Succeeded(out.operation, out.result, edit);
    case "failed":
      return new Failed(out.reason, out.message, out.operation, edit);
    case "outcome_unknown":
      return new OutcomeUnknown(out.operation, out.pending, edit);
    case "awaiting_approval":
      return new AwaitingApproval(out.operation, edit);
  }
}

/** operationErrorReason returns the reason stored in a FAILED or OUTCOME_UNKNOWN operation's
 * error (e.g. "DOWNSTREAM_REJECTED"), or undefined. */
export function operationErrorReason(op: Operation): string | undefined {
  for (const d of op.error?.details ?? []) {
    if (d.typeUrl.endsWith("/google.rpc.ErrorInfo")) {
      const info = decodeErrorInfo(d.value);
      if (info.domain === ERROR_DOMAIN) return info.reason;
    }
  }
  return undefined;
}

/** final maps the operation an Execute answered with to a ToolOutcome. */
export function final(op: Operation): ToolOutcome {
  switch (op.state) {
    case State.SUCCEEDED:
      return new Succeeded(op, op.result ?? {});
    case State.FAILED:
      return new Failed(operationErrorReason(op) ?? "DOWNSTREAM_REJECTED", op.error?.message ?? "", op);
    case State.OUTCOME_UNKNOWN:
      return new OutcomeUnknown(op);
    case State.EXECUTING:
    case State.READY:
      return new OutcomeUnknown(op, true);
  }
  throw new Error(`opledger: Execute answered with state ${State[op.state]}`);
}
