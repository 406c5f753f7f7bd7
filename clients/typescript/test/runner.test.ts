// ToolRunner: the shared model-answer vectors, the mapping of every final state (against a fake
// client), and whole tool calls against the real server.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { after, describe, test } from "node:test";
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  AwaitingApproval,
  Code,
  Failed,
  CHECK_OPERATION_TOOL,
  MESSAGE_AWAITING_APPROVAL,
  MESSAGE_CHECK_UNKNOWN_OPERATION,
  MESSAGE_KEY_NAMES_EARLIER_CALL,
  keyNamesEarlierCall,
  OpledgerClient,
  OpledgerError,
  OperationSchema,
  OutcomeUnknown,
  State,
  Succeeded,
  ToolRunner,
  deriveKey,
  Edit,
  inexactNumber,
  MESSAGE_OPERATION_DUPLICATE,
  modelDescription,
  refusalMessage,
  operationFingerprint,
  stateWords,
  type Operation,
  type ToolOutcome,
} from "../src/index";
import { REPO, serverEnv } from "./helpers";

interface OutcomeVector {
  name: string;
  status: string;
  operation_id?: string;
  reason?: string;
  message?: string;
  result?: JsonObject;
  edit?: { supersedes: string; original_args: JsonObject; args: JsonObject };
  for_model: string;
}

const testdata = JSON.parse(readFileSync(resolve(REPO, "clients", "testdata", "tool_outcomes.json"), "utf8")) as {
  vectors: OutcomeVector[];
  key_names_earlier_call: { state: string; message: string }[];
  refusal_messages: { reason: string; message: string; for_model_message: string }[];
  operation_duplicate: { state: string; message: string }[];
  model_descriptions: { description: string; summary: string; model_description: string }[];
};

test("the policy texts are every client's", () => {
  assert.ok(testdata.refusal_messages.length > 0 && testdata.operation_duplicate.length > 0 && testdata.model_descriptions.length > 0);
  for (const v of testdata.refusal_messages) {
    assert.equal(refusalMessage(v.reason, v.message), v.for_model_message, v.reason);
  }
  for (const v of testdata.operation_duplicate) {
    const state = State[v.state.replace(/^STATE_/, "") as keyof typeof State] as State;
    assert.equal(MESSAGE_OPERATION_DUPLICATE.replace("{state}", stateWords(state)), v.message, v.state);
  }
  for (const v of testdata.model_descriptions) {
    assert.equal(modelDescription(v.description, v.summary), v.model_description, v.description);
  }
});
const vectors = testdata.vectors;

test("the message for a refusal under a used key is every client's", () => {
  assert.ok(testdata.key_names_earlier_call.length > 0);
  for (const v of testdata.key_names_earlier_call) {
    const state = /^\d+$/.test(v.state) ? (Number(v.state) as State) : (State[v.state.replace(/^STATE_/, "") as keyof typeof State] as State);
    assert.equal(keyNamesEarlierCall(state), v.message, v.state);
  }
});

function op(id: string, state: State = State.UNSPECIFIED, extra: MessageInitShape<typeof OperationSchema> = {}): Operation {
  return create(OperationSchema, { id, state, ...extra });
}

for (const v of vectors) {
  test(`forModel vector ${v.name}`, () => {
    const o = v.operation_id === undefined ? undefined : op(v.operation_id);
    const edit = v.edit && Edit.of(v.edit.supersedes, v.edit.original_args, v.edit.args);
    let out: ToolOutcome;
    switch (v.status) {
      case "succeeded":
        out = new Succeeded(o!, v.result ?? {}, edit);
        break;
      case "failed":
        out = new Failed(v.reason!, v.message!, o, edit);
        break;
      case "outcome_unknown":
        out = new OutcomeUnknown(o!, false, edit);
        break;
      case "awaiting_approval":
        out = new AwaitingApproval(o!, edit);
        break;
      default:
        throw new Error(v.status);
    }
    assert.equal(out.forModel(), v.for_model);
    assert.equal(out.operationId, v.operation_id ?? "");
  });
}

test("an unknown outcome is never a failure", () => {
  const out: ToolOutcome = new OutcomeUnknown(op("op_1"));
  assert.ok(!(out instanceof Failed));
  assert.equal(out.kind, "outcome_unknown");
});

/** storedError is the google.rpc.Status the server keeps in Operation.error. */
function storedError(reason: string, message: string) {
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).string(reason).tag(2, WireType.LengthDelimited).string("opledger.v1");
  return { code: 9, message, details: [create(AnySchema, { typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: w.finish() })] };
}

/** fakeClient prepares into prepareState and executes into executeOp, counting calls; with
 * errors, prepare or execute rejects, and get answers getState. */
function fakeClient(
  prepareState: State,
  executeOp?: Operation,
  errors: { prepare?: OpledgerError; execute?: OpledgerError; getState?: State } = {},
) {
  const calls = { gets: 0, executes: [] as (number | undefined)[], prepares: [] as { execute?: boolean; waitMs?: number }[] };
  const client = {
    prepare: async (tool: string, _args: unknown, opts: { execute?: boolean; waitMs?: number }) => {
      calls.prepares.push({ execute: opts.execute, waitMs: opts.waitMs });
      if (errors.prepare) throw errors.prepare;
      return { operation: op("op_1", prepareState, { tool }), replayed: false };
    },
    get: async (id: string) => {
      calls.gets++;
      return { operation: op(id, errors.getState ?? prepareState), events: [] };
    },
    execute: async (_id: string, opts: { waitMs?: number } = {}) => {
      calls.executes.push(opts.waitMs);
      if (errors.execute) throw errors.execute;
      return { operation: executeOp, replayed: false };
    },
  };
  return { client: client as unknown as OpledgerClient, calls };
}

test("every final state maps to its outcome", async () => {
  const failed = fakeClient(State.READY, op("op_1", State.FAILED, { error: storedError("DOWNSTREAM_REJECTED", "card declined") }));
  const f = await new ToolRunner(failed.client, { executeWaitMs: 3000 }).run("pay_invoice", {}, "k");
  assert.ok(f instanceof Failed);
  assert.deepEqual([f.reason, f.message, f.operationId], ["DOWNSTREAM_REJECTED", "card declined", "op_1"]);
  assert.deepEqual(failed.calls.executes, [3000]);
  // The one-call path is asked for; this fake ignores it (as a server without it would), so the
  // runner executes the READY operation itself.
  assert.deepEqual(failed.calls.prepares, [{ execute: true, waitMs: 3000 }]);

  const unknown = await new ToolRunner(fakeClient(State.READY, op("op_1", State.OUTCOME_UNKNOWN)).client).run("pay_invoice", "{}", "k");
  assert.ok(unknown instanceof OutcomeUnknown && !unknown.pending);

  const pending = await new ToolRunner(fakeClient(State.EXECUTING, op("op_1", State.EXECUTING)).client).run("pay_invoice", undefined, "k");
  assert.ok(pending instanceof OutcomeUnknown && pending.pending);

  const oneCall = fakeClient(State.SUCCEEDED); // the one-call path answered with the outcome
  const done = await new ToolRunner(oneCall.client).run("pay_invoice", {}, "k");
  assert.ok(done instanceof Succeeded);
  assert.equal(oneCall.calls.executes.length, 0);
  assert.equal(done.forModel(), '{"operation_id":"op_1","result":{},"status":"succeeded"}');
});

test("an expired approval is awaiting approval, never a failure", async () => {
  // An approval that lapsed before the call ran puts the operation back before its approvers: the
  // same call, under the same key, waits for a new decision. Answering Failed would have the agent
  // make it again under a new key, a second operation for one intention.
  const expired = (withId: boolean) =>
    new OpledgerError(Code.FailedPrecondition, "the approval expired", "APPROVAL_EXPIRED", undefined, withId ? { operation_id: "op_1" } : {});
  for (const fake of [
    fakeClient(State.AWAITING_APPROVAL, undefined, { prepare: expired(true), getState: State.AWAITING_APPROVAL }),
    fakeClient(State.READY, undefined, { execute: expired(false), getState: State.AWAITING_APPROVAL }),
  ]) {
    const out = await new ToolRunner(fake.client).run("pay_invoice", {}, "k");
    assert.equal(out.kind, "awaiting_approval");
    assert.equal(out.operationId, "op_1");
    assert.equal(out.operation?.state, State.AWAITING_APPROVAL);
  }
});

test("a refusal under a used key names the earlier call, which may have taken effect", async () => {
  // A call refused because its key already names an earlier call (a reworded retry of a round, a
  // tools file whose version moved on) is not "nothing happened, use a new key".
  const want = MESSAGE_KEY_NAMES_EARLIER_CALL.replace("{state}", "outcome unknown");
  for (const [reason, code] of [
    ["IDEMPOTENCY_KEY_REUSED", Code.AlreadyExists],
    ["TOOL_VERSION_UNKNOWN", Code.InvalidArgument],
    ["ARGS_INVALID", Code.InvalidArgument],
  ] as const) {
    const refused = new OpledgerError(code, "this idempotency key was already used; use a new key for a new operation", reason, undefined, {
      operation_id: "op_1",
    });
    const fake = fakeClient(State.READY, undefined, { prepare: refused, getState: State.OUTCOME_UNKNOWN });
    const out = await new ToolRunner(fake.client).run("send_email", {}, "k");
    assert.ok(out instanceof Failed, reason);
    assert.deepEqual([out.reason, out.operationId, out.message], [reason, "op_1", want]);
    assert.ok(!out.forModel().includes("use a new key"));
  }
});

test("awaiting approval without a wait calls nothing else; with one it polls", async () => {
  const none = fakeClient(State.AWAITING_APPROVAL);
  assert.ok((await new ToolRunner(none.client).run("pay_invoice", {}, "k")) instanceof AwaitingApproval);
  assert.deepEqual([none.calls.gets, none.calls.executes.length], [0, 0]);

  const waited = fakeClient(State.AWAITING_APPROVAL);
  const hooked: string[] = [];
  const start = Date.now();
  const out = await new ToolRunner(waited.client, { approvalWaitMs: 700, onApprovalRequired: (o) => void hooked.push(o.id) }).run("pay_invoice", {}, "k");
  assert.ok(out instanceof AwaitingApproval);
  assert.deepEqual(hooked, ["op_1"]);
  assert.ok(Date.now() - start >= 690);
  assert.ok(waited.calls.gets >= 2 && waited.calls.executes.length === 0);
});

test("the model's arguments must be a JSON object", async () => {
  await assert.rejects(new ToolRunner(fakeClient(State.READY).client).run("pay_invoice", "[1]", "k"), TypeError);
});

const env = serverEnv();

describe("ToolRunner against a real server", { skip: env ? false : "OPLEDGER_ADDR etc. not set: run clients/test.sh" }, () => {
  const agent = new OpledgerClient({ target: env?.addr ?? "", apiKey: env?.agentKey ?? "-", plaintext: true });
  const approver = agent.withApiKey(env?.approverKey ?? "-");
  after(() => agent.close());

  async function count(path: string, field: string, value: string): Promise<number> {
    const body = (await (await fetch(env!.fakepayUrl.replace(/\/$/, "") + path)).json()) as { data: Record<string, unknown>[] };
    return body.data.filter((c) => c[field] === value).length;
  }
  async function faults(body?: object): Promise<void> {
    const resp = await fetch(env!.fakepayUrl.replace(/\/$/, "") + "/admin/faults", {
      method: body ? "PUT" : "DELETE",
      body: body ? JSON.stringify(body) : undefined,
    });
    assert.equal(resp.status, 200);
  }
  function payArgs() {
    const invoice = "INV-TSR-" + randomUUID().slice(0, 12);
    return { invoice, args: { invoice_id: invoice, amount_minor: 4900, currency: "EUR" } };
  }
  const keyFor = (conversation: string, tool = "pay_invoice") => deriveKey({ conversation, round: 1, toolCall: "call_1", tool });

  test("model tools are the current tools", async () => {
    const tools = new Map((await new ToolRunner(agent).modelTools()).map((t) => [t.name, t]));
    const pay = tools.get("pay_invoice")!;
    assert.deepEqual([pay.version, pay.approvalRequired, pay.effect], ["1", true, "side_effect"]);
    assert.ok(pay.description && pay.argsSchema["type"] === "object");
    assert.ok(tools.has("send_email"));
  });

  test("resumes after approval: one charge, the same answer again", async () => {
    const runner = new ToolRunner(agent);
    const { invoice, args } = payArgs();
    const key = keyFor(invoice);
    const first = await runner.run("pay_invoice", JSON.stringify(args), key);
    assert.ok(first instanceof AwaitingApproval);
    assert.equal(first.forModel(), `{"message":"${MESSAGE_AWAITING_APPROVAL}","operation_id":"${first.operationId}","status":"awaiting_approval"}`);
    await approver.approve(first.operationId, operationFingerprint(first.operation), "approve", "ok");
    const done = await runner.run("pay_invoice", args, key);
    assert.ok(done instanceof Succeeded, done.forModel());
    assert.equal(done.result["invoice_id"], invoice);
    assert.equal(done.result["id"], done.operation.externalRef);
    assert.equal((await runner.run("pay_invoice", args, key)).forModel(), done.forModel());
    assert.equal(await count("/charges", "invoice_id", invoice), 1);
  });

  test("check_operation runs an approved call once", async () => {
    // The model is told to call check_operation after awaiting_approval: a new call of the tool in a
    // later round would carry another key and be a second request.
    const runner = new ToolRunner(agent);
    const tools = await runner.modelTools();
    assert.equal(tools[tools.length - 1]!.name, CHECK_OPERATION_TOOL);
    const { invoice, args } = payArgs();
    const first = await runner.run("pay_invoice", args, keyFor(invoice));
    assert.ok(first instanceof AwaitingApproval);
    assert.ok(first.forModel().includes("check_operation"));
    await approver.approve(first.operationId, operationFingerprint(first.operation), "approve", "ok");
    for (let i = 0; i < 2; i++) {
      const done = await runner.run(CHECK_OPERATION_TOOL, JSON.stringify({ operation_id: first.operationId }), "");
      assert.ok(done instanceof Succeeded, done.forModel());
      assert.equal(done.operationId, first.operationId);
    }
    assert.equal(await count("/charges", "invoice_id", invoice), 1);
    const missing = await runner.check("op_00000000000000000000000000");
    assert.ok(missing instanceof Failed);
    assert.equal(missing.message, MESSAGE_CHECK_UNKNOWN_OPERATION);
  });

  test("waits for an in-process approval", async () => {
    const { invoice, args } = payArgs();
    const runner = new ToolRunner(agent, {
      approvalWaitMs: 20_000,
      onApprovalRequired: (o) => void setTimeout(() => void approver.approve(o.id, o.fingerprint, "approve", "ok"), 300),
    });
    const out = await runner.run("pay_invoice", args, keyFor(invoice));
    assert.ok(out instanceof Succeeded, out.forModel());
    assert.equal(await count("/charges", "invoice_id", invoice), 1);
  });

  test("refusals are Failed", async () => {
    const runner = new ToolRunner(agent, {
      approvalWaitMs: 20_000,
      onApprovalRequired: async (o) => void (await approver.approve(o.id, o.fingerprint, "deny", "not this one")),
    });
    const { invoice, args } = payArgs();
    const bad = await runner.run("pay_invoice", { ...args, amount_minor: -1 }, keyFor(invoice + "-bad"));
    assert.ok(bad instanceof Failed && bad.reason === "ARGS_INVALID" && bad.operation === undefined);
    const denied = await runner.run("pay_invoice", args, keyFor(invoice));
    assert.ok(denied instanceof Failed && denied.reason === "OPERATION_REJECTED" && denied.operationId);
  });

  test("a tool without approval runs in one run", async () => {
    const to = `ts-${randomUUID().slice(0, 10)}@example.com`;
    const args = { to, subject: "receipt", body: "paid" };
    const runner = new ToolRunner(agent);
    const out = await runner.run("send_email", args, keyFor(to, "send_email"));
    assert.ok(out instanceof Succeeded, out.forModel());
    assert.equal(out.result["id"], out.operation.externalRef);
    assert.equal((await runner.run("send_email", args, keyFor(to, "send_email"))).forModel(), out.forModel());
    assert.equal(await count("/emails", "to", to), 1);
  });

  test("an unknown outcome is its own answer, and is never sent twice", async () => {
    await faults({ fail_after_commit: { next: 1 } });
    try {
      const to = `ts-${randomUUID().slice(0, 10)}@example.com`;
      const args = { to, subject: "receipt", body: "paid" };
      const runner = new ToolRunner(agent);
      const out = await runner.run("send_email", args, keyFor(to, "send_email"));
      assert.ok(out instanceof OutcomeUnknown, out.forModel());
      assert.equal(JSON.parse(out.forModel()).status, "outcome_unknown");
      const again = await runner.run("send_email", args, keyFor(to, "send_email"));
      assert.ok(again instanceof OutcomeUnknown && again.operationId === out.operationId);
      assert.equal(await count("/emails", "to", to), 1);
    } finally {
      await faults();
    }
  });
});

test("check_operation answers every state", async () => {
  // A rejected or cancelled operation is a refusal (never an exception); an executing one whose
  // Execute is refused for another reason is pending, never "failed" (it may have taken effect).
  const refusedWith = (reason: string) => new OpledgerError(Code.FailedPrecondition, "refused", reason as never, undefined, {});
  for (const [state, reason, kind] of [
    [State.REJECTED, "OPERATION_REJECTED", "failed"],
    [State.CANCELLED, "OPERATION_CANCELLED", "failed"],
    [State.EXECUTING, "TOOL_VERSION_UNKNOWN", "outcome_unknown"],
  ] as const) {
    const fake = fakeClient(State.READY, undefined, { getState: state, execute: refusedWith(reason) });
    const out = await new ToolRunner(fake.client).run(CHECK_OPERATION_TOOL, '{"operation_id":"op_1"}', "");
    assert.equal(out.kind, kind, out.forModel());
  }
});

// A number a double cannot carry as written is refused before anything is sent, as in every
// opledger client: clients/testdata/inexact_numbers.json.
const inexactVectors = (
  JSON.parse(readFileSync(resolve(REPO, "clients", "testdata", "inexact_numbers.json"), "utf8")) as {
    vectors: { args: string; refused: string | null }[];
  }
).vectors;

test("a number a double cannot carry is refused before anything is sent", async () => {
  assert.ok(inexactVectors.length > 0);
  for (const v of inexactVectors) {
    const bad = inexactNumber(v.args);
    assert.equal(bad?.literal, v.refused ?? undefined, v.args);
    const { client, calls } = fakeClient(State.SUCCEEDED, op("op_1", State.SUCCEEDED));
    const run = new ToolRunner(client).run("pay_invoice", v.args, "k");
    if (v.refused === null) {
      await run;
      assert.equal(calls.prepares.length, 1, v.args);
      continue;
    }
    await assert.rejects(run, (err: unknown) => err instanceof TypeError && err.message.includes(v.refused as string), v.args);
    assert.equal(calls.prepares.length, 0, v.args);
  }
});
