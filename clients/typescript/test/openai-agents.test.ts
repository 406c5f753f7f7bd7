// @opledger/client/openai-agents against the server of clients/test.sh, with the Agents SDK's own
// ScriptedModel (@openai/agents/testing; no network): the run is interrupted for approval, its
// RunState persisted as a string, a person approves in the ledger (the approver's key), the restored
// state resumed executes the call, the same saved state resumed again and a retried run replay it,
// and the fake processor holds one charge; a denial reaches the model as the SDK's rejection.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { Agent, RunState, run, setTracingDisabled } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, type RecordedModelCall } from "@openai/agents/testing";
import { OpledgerClient, State, operationFingerprint, type Operation } from "../src/index";
import { agentsTools, decide } from "../src/openai-agents";
import { serverEnv } from "./helpers";

setTracingDisabled(true); // no trace export: the tests use no network
const env = serverEnv();
if (!env && process.env.OPLEDGER_REQUIRE_SERVER === "1") {
  throw new Error("OPLEDGER_ADDR etc. are not set and OPLEDGER_REQUIRE_SERVER=1");
}

/** scripted: a model that calls `tool` with `args` (call id call_1), then repeats the tool output it was
 * given (seen, newest last). */
function scripted(tool: string, args: Record<string, unknown>): { model: ScriptedModel; seen: string[] } {
  const seen: string[] = [];
  const respond = modelResponder((call: RecordedModelCall) => {
    const items = Array.isArray(call.request.input) ? call.request.input : [];
    const outs = items.filter((i: any) => i.type === "function_call_result");
    const last: any = outs[outs.length - 1];
    const text = typeof last?.output === "string" ? last.output : (last?.output?.text ?? JSON.stringify(last?.output ?? null));
    seen.push(text);
    return [assistantMessage("the tool said: " + text)];
  });
  const model = new ScriptedModel([[functionCall(tool, args, { callId: "call_1" })], respond, respond, respond, respond, respond]);
  return { model, seen };
}

describe("the Agents SDK (JS) adapter against a real server", { skip: env ? false : "OPLEDGER_ADDR etc. not set: run clients/test.sh" }, () => {
  const agent = new OpledgerClient({ target: env?.addr ?? "127.0.0.1:1", apiKey: env?.agentKey ?? "x", plaintext: true });
  const approver = agent.withApiKey(env?.approverKey ?? "x");
  after(() => agent.close());

  async function charges(invoice: string): Promise<number> {
    const resp = await fetch(env!.fakepayUrl.replace(/\/$/, "") + "/charges");
    const body = (await resp.json()) as { data: { invoice_id?: string }[] };
    return body.data.filter((c) => c.invoice_id === invoice).length;
  }

  async function awaiting(invoice: string): Promise<Operation> {
    const page = await approver.listOperations({ states: [State.AWAITING_APPROVAL], tool: "pay_invoice", pageSize: 200 });
    const ops = page.operations.filter((o) => o.args?.["invoice_id"] === invoice);
    assert.equal(ops.length, 1);
    return ops[0]!;
  }

  test("interrupted, a person approves, resumed twice and retried: one charge", async () => {
    const invoice = "INV-oaijs-" + randomUUID().slice(0, 8);
    const args = { invoice_id: invoice, amount_minor: 4900, currency: "EUR" };
    const { model, seen } = scripted("pay_invoice", args);
    const bot = new Agent({ name: "payer", model, tools: await agentsTools(agent) });
    const context = { conversationId: "conv-" + randomUUID().slice(0, 8) };

    const first = await run(bot, "Pay the invoice.", { context });
    assert.deepEqual(first.interruptions.map((i) => i.toolName), ["pay_invoice"]);
    assert.equal(await charges(invoice), 0, "nothing is charged before a person decides");
    const saved = first.state.toString();

    const early = await RunState.fromString(bot, saved);
    assert.equal((await decide(agent, early)).length, 1, "undecided before the person decides");

    const op = await awaiting(invoice);
    await approver.approve(op.id, operationFingerprint(op), "approve", "customer confirmed");
    for (let i = 0; i < 2; i++) {
      // The resume, then the same resume again from the same saved state.
      const state = await RunState.fromString(bot, saved);
      assert.deepEqual(await decide(agent, state), []);
      const done = await run(bot, state);
      const answer = JSON.parse(seen[seen.length - 1]!);
      assert.equal(answer.status, "succeeded", seen[seen.length - 1]);
      assert.equal(answer.operation_id, op.id);
      assert.match(String(done.finalOutput), /^the tool said: /);
      assert.equal(await charges(invoice), 1);
    }

    // A retried run (the same model answer, the same context): not interrupted, replayed.
    const again = scripted("pay_invoice", args);
    const retried = await run(new Agent({ name: "payer", model: again.model, tools: await agentsTools(agent) }), "Pay the invoice.", { context });
    assert.equal(retried.interruptions.length, 0);
    assert.equal(JSON.parse(again.seen[again.seen.length - 1]!).operation_id, op.id);
    assert.equal(await charges(invoice), 1, "one approved call, one charge");
  });

  test("a denial reaches the model as the SDK's rejection", async () => {
    const invoice = "INV-oaijs-" + randomUUID().slice(0, 8);
    const { model, seen } = scripted("pay_invoice", { invoice_id: invoice, amount_minor: 4900, currency: "EUR" });
    const bot = new Agent({ name: "payer", model, tools: await agentsTools(agent) });
    const first = await run(bot, "Pay the invoice.", { context: { conversationId: "conv-" + randomUUID().slice(0, 8) } });
    assert.equal(first.interruptions.length, 1);
    const saved = first.state.toString();
    const op = await awaiting(invoice);
    await approver.approve(op.id, op.fingerprint, "deny", "duplicate invoice");

    const state = await RunState.fromString(bot, saved);
    assert.deepEqual(await decide(agent, state), []);
    await run(bot, state);
    assert.match(seen[seen.length - 1]!, /An approver denied pay_invoice .*duplicate invoice.*Nothing happened/);

    // Approved in the SDK alone, against the ledger's denial: the ledger's decision stands.
    const forced = await RunState.fromString(bot, saved);
    for (const item of forced.getInterruptions()) forced.approve(item);
    await run(bot, forced);
    const told = JSON.parse(seen[seen.length - 1]!);
    assert.equal(told.status, "failed");
    assert.equal(told.reason, "OPERATION_REJECTED");
    assert.equal(await charges(invoice), 0);
  });

  test("a run without a conversationId fails before anything is prepared", async () => {
    const to = "oaijs-" + randomUUID().slice(0, 8) + "@example.com";
    const { model } = scripted("send_email", { to, subject: "s", body: "b" });
    const tools = await agentsTools(agent);
    await assert.rejects(run(new Agent({ name: "mailer", model, tools }), "Mail them."), /conversationId/);
  });
});
