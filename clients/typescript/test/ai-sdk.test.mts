// @opledger/client/ai-sdk against the server of clients/test.sh, with the AI SDK's own mock model
// (ai/test's MockLanguageModelV4; no network): the call comes back as a tool-approval-request with
// nothing charged, a person approves in the ledger (the approver's key), the next generateText with
// the ledger's approval responses runs it, the same continuation again and a retried conversation
// replay it, and the fake processor holds one charge; a denial reaches the model as the SDK's
// execution-denied result.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { generateText, stepCountIs, type ModelMessage } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { OpledgerClient, State, operationFingerprint, type Operation } from "../src/index.js";
import { opledgerTools } from "../src/ai-sdk.mjs";
import { serverEnv } from "./helpers.js";

const env = serverEnv();
if (!env && process.env.OPLEDGER_REQUIRE_SERVER === "1") {
  throw new Error("OPLEDGER_ADDR etc. are not set and OPLEDGER_REQUIRE_SERVER=1");
}

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** scripted is a mock model that calls `tool` with `args` (tool call id call_1) while it was given no
 * tool result, and then answers "done"; seen holds the tool results it was given, as JSON. */
function scripted(tool: string, args: object): { model: MockLanguageModelV4; seen: string[] } {
  const seen: string[] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const results = prompt.filter((m) => m.role === "tool").flatMap((m) => m.content);
      if (results.length === 0) {
        return {
          content: [{ type: "tool-call", toolCallId: "call_1", toolName: tool, input: JSON.stringify(args) }],
          finishReason: { raw: undefined, unified: "tool-calls" },
          usage,
          warnings: [],
        };
      }
      seen.push(JSON.stringify(results[results.length - 1]));
      return { content: [{ type: "text", text: "done" }], finishReason: { raw: undefined, unified: "stop" }, usage, warnings: [] };
    },
  });
  return { model, seen };
}

describe("the AI SDK adapter against a real server", { skip: env ? false : "OPLEDGER_ADDR etc. not set: run clients/test.sh" }, () => {
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
    assert.equal(ops.length, 1, "one operation awaits approval for " + invoice);
    return ops[0]!;
  }

  /** toolResult is what the model was last given for its call. */
  function toolResult(seen: string[]): { type: string; output: { type: string; value?: string; reason?: string } } {
    return JSON.parse(seen[seen.length - 1]!);
  }

  test("approval request, a person approves, continued twice and retried: one charge", async () => {
    const invoice = "INV-ai-" + randomUUID().slice(0, 8);
    const args = { invoice_id: invoice, amount_minor: 4900, currency: "EUR" };
    const { model, seen } = scripted("pay_invoice", args);
    const conversation = "conv-" + randomUUID().slice(0, 8);
    const ledger = await opledgerTools(agent, { conversation });
    const call = (messages: ModelMessage[]) =>
      generateText({ model, tools: ledger.tools, toolApproval: ledger.toolApproval, messages, stopWhen: stepCountIs(5) });

    const messages: ModelMessage[] = [{ role: "user", content: "Pay the invoice." }];
    const first = await call(messages);
    const requests = first.content.filter((p) => p.type === "tool-approval-request");
    assert.equal(requests.length, 1);
    assert.equal(await charges(invoice), 0, "nothing is charged before a person decides");
    messages.push(...first.responseMessages);

    assert.deepEqual(await ledger.approvalResponses(first.content), [], "undecided: nothing to answer yet");

    const op = await awaiting(invoice);
    await approver.approve(op.id, operationFingerprint(op), "approve", "customer confirmed");
    const responses = await ledger.approvalResponses(first.content);
    assert.deepEqual(responses.map((r) => r.approved), [true]);

    for (let i = 0; i < 2; i++) {
      // The continuation, then the same continuation again (a retried request handler).
      const done = await call([...messages, { role: "tool", content: responses }]);
      assert.equal(done.text, "done");
      const told = toolResult(seen);
      assert.equal(told.output.type, "text");
      const answer = JSON.parse(told.output.value!);
      assert.equal(answer.status, "succeeded", told.output.value);
      assert.equal(answer.operation_id, op.id);
      assert.equal(await charges(invoice), 1);
    }

    // The conversation retried from the user's message (the same model answer, a new tool set): the
    // ledger holds the call approved, so it is not asked again, and it replays.
    const again = await opledgerTools(agent, { conversation });
    const retried = await generateText({ model, tools: again.tools, toolApproval: again.toolApproval, messages: messages.slice(0, 1), stopWhen: stepCountIs(5) });
    assert.equal(retried.content.filter((p) => p.type === "tool-approval-request").length, 0);
    assert.equal(JSON.parse(toolResult(seen).output.value!).operation_id, op.id);
    assert.equal(await charges(invoice), 1, "one approved call, one charge");
  });

  test("a denial reaches the model as execution-denied with the approver's reason", async () => {
    const invoice = "INV-ai-" + randomUUID().slice(0, 8);
    const { model, seen } = scripted("pay_invoice", { invoice_id: invoice, amount_minor: 4900, currency: "EUR" });
    const ledger = await opledgerTools(agent, { conversation: "conv-" + randomUUID().slice(0, 8) });
    const messages: ModelMessage[] = [{ role: "user", content: "Pay the invoice." }];
    const first = await generateText({ model, tools: ledger.tools, toolApproval: ledger.toolApproval, messages, stopWhen: stepCountIs(5) });
    messages.push(...first.responseMessages);
    const op = await awaiting(invoice);
    await approver.approve(op.id, op.fingerprint, "deny", "duplicate invoice");

    const responses = await ledger.approvalResponses(first.content);
    assert.deepEqual(responses.map((r) => r.approved), [false]);
    await generateText({ model, tools: ledger.tools, toolApproval: ledger.toolApproval, messages: [...messages, { role: "tool", content: responses }], stopWhen: stepCountIs(5) });
    const told = toolResult(seen);
    assert.equal(told.output.type, "execution-denied");
    assert.match(told.output.reason!, /An approver denied pay_invoice .*duplicate invoice.*Nothing happened/);

    // Approved in the SDK alone, against the ledger's denial: the ledger's decision stands.
    const forced = [{ type: "tool-approval-response" as const, approvalId: responses[0]!.approvalId, approved: true }];
    await generateText({ model, tools: ledger.tools, toolApproval: ledger.toolApproval, messages: [...messages, { role: "tool", content: forced }], stopWhen: stepCountIs(5) });
    assert.match(JSON.stringify(toolResult(seen)), /OPERATION_REJECTED|An approver denied/);
    assert.equal(await charges(invoice), 0);
  });

  test("a tool without approval runs in the call", async () => {
    const to = "ai-" + randomUUID().slice(0, 8) + "@example.com";
    const { model, seen } = scripted("send_email", { to, subject: "s", body: "b" });
    const ledger = await opledgerTools(agent, { conversation: "conv-" + randomUUID().slice(0, 8) });
    await generateText({ model, tools: ledger.tools, toolApproval: ledger.toolApproval, prompt: "Mail them.", stopWhen: stepCountIs(5) });
    assert.equal(JSON.parse(toolResult(seen).output.value!).status, "succeeded");
  });
});
