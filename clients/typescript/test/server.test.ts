// End to end against a real opledger (clients/run-server.sh): the demo tenant's pay_invoice.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import {
  Code,
  computeFingerprint,
  Decision,
  deriveKey,
  Effect,
  EventType,
  isOpledgerError,
  OpledgerClient,
  operationFingerprint,
  State,
  type Operation,
  type Reason,
} from "../src/index";
import { serverEnv } from "./helpers";

const env = serverEnv();
if (!env && process.env.OPLEDGER_REQUIRE_SERVER === "1") {
  throw new Error("OPLEDGER_ADDR etc. are not set and OPLEDGER_REQUIRE_SERVER=1");
}

function newInvoice() {
  const invoice = "INV-TS-" + randomUUID().slice(0, 12);
  const args = { invoice_id: invoice, amount_minor: 4900, currency: "EUR" };
  const key = deriveKey({ conversation: "test-" + invoice, round: 1, toolCall: "call_1", tool: "pay_invoice" });
  return { invoice, args, key };
}

async function rejectsWith(p: Promise<unknown>, reason: Reason, code?: Code): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(isOpledgerError(err), `not an OpledgerError: ${String(err)}`);
    assert.equal(err.reason, reason);
    if (code !== undefined) assert.equal(err.code, code);
    return true;
  });
}

describe("against a real server", { skip: env ? false : "OPLEDGER_ADDR etc. not set: run clients/test.sh" }, () => {
  const agent = new OpledgerClient({ target: env?.addr ?? "", apiKey: env?.agentKey ?? "-", plaintext: true });
  const approver = agent.withApiKey(env?.approverKey ?? "-");
  const other = agent.withApiKey(env?.otherAgentKey ?? "-");
  after(() => {
    agent.close();
    approver.close();
    other.close();
  });

  async function charges(invoice: string): Promise<number> {
    const resp = await fetch(env!.fakepayUrl.replace(/\/$/, "") + "/charges");
    const body = (await resp.json()) as { data: { invoice_id?: string }[] };
    return body.data.filter((c) => c.invoice_id === invoice).length;
  }

  test("prepare twice is the same operation", async () => {
    const { args, key } = newInvoice();
    const first = await agent.prepare("pay_invoice", args, { idempotencyKey: key });
    const second = await agent.prepare("pay_invoice", args, { idempotencyKey: key });
    assert.equal(first.replayed, false);
    assert.equal(second.replayed, true);
    assert.equal(second.operation?.id, first.operation?.id);
    const op = first.operation!;
    assert.equal(op.state, State.AWAITING_APPROVAL);
    assert.equal(op.toolVersion, "1");
    assert.equal(operationFingerprint(op), op.fingerprint);
    assert.equal(computeFingerprint({ tool: "pay_invoice", args, tenant: op.tenant, toolVersion: "1" }), op.fingerprint);
  });

  test("the same key with other args is refused", async () => {
    const { args, key } = newInvoice();
    const op = (await agent.prepare("pay_invoice", args, { idempotencyKey: key })).operation!;
    await assert.rejects(agent.prepare("pay_invoice", { ...args, amount_minor: 49000 }, { idempotencyKey: key }), (err: unknown) => {
      assert.ok(isOpledgerError(err, "IDEMPOTENCY_KEY_REUSED"));
      assert.equal(err.code, Code.AlreadyExists);
      assert.equal(err.retryable, false);
      return true;
    });
    const got = (await agent.get(op.id)).operation!;
    assert.equal(got.args?.["amount_minor"], 4900);
    assert.equal(got.fingerprint, op.fingerprint);
  });

  test("approve and execute make one charge; execute again replays", async () => {
    const { invoice, args, key } = newInvoice();
    const op = (await agent.prepare("pay_invoice", args, { idempotencyKey: key })).operation!;

    await rejectsWith(agent.execute(op.id), "APPROVAL_REQUIRED", Code.FailedPrecondition);
    const wrong = computeFingerprint({ tool: "pay_invoice", args: { ...args, amount_minor: 49000 }, tenant: op.tenant, toolVersion: op.toolVersion });
    await rejectsWith(approver.approve(op.id, wrong, "approve", "customer confirmed"), "APPROVAL_FINGERPRINT_MISMATCH");
    await rejectsWith(agent.approve(op.id, op.fingerprint, "approve"), "ROLE_REQUIRED", Code.PermissionDenied);

    const shown: Operation = (await approver.get(op.id)).operation!;
    const approved = await approver.approve(op.id, operationFingerprint(shown), "approve", "customer confirmed");
    assert.equal(approved.operation?.state, State.READY);
    assert.equal(approved.operation?.approval?.decision, Decision.APPROVE);
    assert.equal((await approver.approve(op.id, op.fingerprint, Decision.APPROVE, "again")).replayed, true);

    assert.equal(await charges(invoice), 0);
    const done = await agent.execute(op.id);
    assert.equal(done.operation?.state, State.SUCCEEDED);
    assert.equal(done.replayed, false);
    assert.ok(done.operation?.externalRef);
    assert.equal(await charges(invoice), 1);

    const again = await agent.execute(op.id, { waitMs: 1500 });
    assert.equal(again.replayed, true);
    assert.equal(again.operation?.state, State.SUCCEEDED);
    assert.equal(again.operation?.externalRef, done.operation?.externalRef);
    assert.equal(await charges(invoice), 1);

    const replay = await agent.prepare("pay_invoice", args, { idempotencyKey: key });
    assert.equal(replay.replayed, true);
    assert.equal(replay.operation?.state, State.SUCCEEDED);

    const got = await agent.get(op.id, { includeEvents: true });
    const types = got.events.map((e) => e.type);
    assert.equal(types[0], EventType.PREPARED);
    assert.ok(types.includes(EventType.CLAIMED));
    assert.equal(types[types.length - 1], EventType.SUCCEEDED);

    assert.equal((await agent.reconcile(op.id)).operation?.state, State.SUCCEEDED);
  });

  test("deny rejects", async () => {
    const { args, key } = newInvoice();
    const op = (await agent.prepare("pay_invoice", args, { idempotencyKey: key })).operation!;
    const denied = await approver.approve(op.id, op.fingerprint, "deny", "not this one");
    assert.equal(denied.operation?.state, State.REJECTED);
    await rejectsWith(approver.approve(op.id, op.fingerprint, "approve"), "APPROVAL_CONFLICT");
    await rejectsWith(agent.execute(op.id), "OPERATION_REJECTED");
  });

  test("another tenant sees nothing", async () => {
    const { args, key } = newInvoice();
    const op = (await agent.prepare("pay_invoice", args, { idempotencyKey: key })).operation!;
    await rejectsWith(other.get(op.id), "OPERATION_NOT_FOUND", Code.NotFound);
    await rejectsWith(other.execute(op.id), "OPERATION_NOT_FOUND", Code.NotFound);
    await rejectsWith(other.reconcile(op.id), "OPERATION_NOT_FOUND", Code.NotFound);
    const theirs = await other.prepare("pay_invoice", args, { idempotencyKey: key });
    assert.equal(theirs.replayed, false);
    assert.notEqual(theirs.operation?.id, op.id);
    assert.notEqual(theirs.operation?.fingerprint, op.fingerprint);
  });

  test("auth and validation errors are typed", async () => {
    const bad = new OpledgerClient({ target: env?.addr ?? "", apiKey: "opl_not-a-real-key", plaintext: true });
    try {
      await rejectsWith(bad.get("op_01J00000000000000000000000"), "API_KEY_INVALID", Code.Unauthenticated);
    } finally {
      bad.close();
    }
    await rejectsWith(approver.prepare("pay_invoice", {}, { idempotencyKey: "k-role" }), "ROLE_REQUIRED");
    await rejectsWith(agent.prepare("no_such_tool", {}, { idempotencyKey: "k-tool" }), "TOOL_UNKNOWN");
    await rejectsWith(agent.prepare("pay_invoice", { invoice_id: "INV-1", amount_minor: -1, currency: "EUR" }, { idempotencyKey: "k-args" }), "ARGS_INVALID");
    await rejectsWith(agent.prepare("pay_invoice", {}, { idempotencyKey: "k".repeat(256) }), "IDEMPOTENCY_KEY_INVALID");
  });

  test("list tools and operations; cancel takes one off the pending list", async () => {
    const tools = (await approver.listTools()).tools;
    const pay = tools.find((t) => t.name === "pay_invoice")!;
    assert.equal(pay.approvalRequired, true);
    assert.equal(pay.current, true);
    assert.equal(pay.effect, Effect.SIDE_EFFECT);
    assert.ok("amount_minor" in (pay.argsSchema?.["properties"] as Record<string, unknown>));

    const ids: string[] = []; // oldest first
    for (let i = 0; i < 3; i++) {
      const { args, key } = newInvoice();
      ids.push((await agent.prepare("pay_invoice", args, { idempotencyKey: key })).operation!.id);
    }
    const pending = { states: [State.AWAITING_APPROVAL], tool: "pay_invoice", pageSize: 2 };
    const page1 = await approver.listOperations(pending);
    assert.deepEqual(page1.operations.map((op) => op.id), [ids[2], ids[1]]);
    assert.ok(page1.nextPageToken);
    const page2 = await approver.listOperations({ ...pending, pageToken: page1.nextPageToken });
    assert.equal(page2.operations[0]?.id, ids[0]);

    // The token is bound to its filters; another tenant never sees these operations.
    await rejectsWith(approver.listOperations({ pageToken: page1.nextPageToken }), "FIELD_INVALID", Code.InvalidArgument);
    const theirs = await other.listOperations({ pageSize: 200 });
    assert.ok(!theirs.operations.some((op) => ids.includes(op.id)));

    const cancelled = await agent.cancel(ids[1]!, "not needed");
    assert.equal(cancelled.operation?.state, State.CANCELLED);
    assert.equal((await agent.cancel(ids[1]!, "not needed")).replayed, true);
    const left = await approver.listOperations(pending);
    assert.deepEqual(left.operations.map((op) => op.id), [ids[2], ids[0]]);
  });
});
