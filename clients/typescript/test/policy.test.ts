// The policy flows against the real server (clients/run-server.sh), on the refund tool it adds
// (clients/testdata/policy_tools.yaml): EUR only, every call approved, two approvers above
// 1,000.00, amount_minor editable by an approver.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { AwaitingApproval, Failed, OpledgerClient, Succeeded, ToolRunner, deriveKey, isOpledgerError, type Operation } from "../src/index";
import { amounts as charged, approveWithEdit, serverEnv } from "./helpers";

const env = serverEnv();

describe("policies against a real server", { skip: env ? false : "OPLEDGER_ADDR etc. not set: run clients/test.sh" }, () => {
  const agent = new OpledgerClient({ target: env?.addr ?? "", apiKey: env?.agentKey ?? "-", plaintext: true });
  const approver = agent.withApiKey(env?.approverKey ?? "-");
  after(() => agent.close());

  const amounts = (invoice: string) => charged(env!.fakepayUrl, invoice);
  function refund(currency = "EUR") {
    const invoice = "INV-TSP-" + randomUUID().slice(0, 12);
    const key = deriveKey({ conversation: "test-" + invoice, round: 1, toolCall: "call_1", tool: "refund" });
    return { invoice, key, args: { invoice_id: invoice, amount_minor: 4900, currency } };
  }
  /** editingApprover approves the call as made with amount_minor changed, as a person at a prompt
   * would, and leaves an edited operation alone. */
  const editingApprover = (amount: number) => async (o: Operation) => {
    if (!o.supersedes) await approveWithEdit(approver, o, amount);
  };

  test("the runner follows an approver's edit and tells the model what ran", async () => {
    const { invoice, key, args } = refund();
    const runner = new ToolRunner(agent, { approvalWaitMs: 30_000, onApprovalRequired: editingApprover(4000) });
    const out = await runner.run("refund", args, key);
    assert.ok(out instanceof Succeeded, out.forModel());
    assert.ok(out.edit);
    assert.notEqual(out.edit.supersedes, out.operationId);
    assert.equal(out.operation.supersedes, out.edit.supersedes);
    assert.equal(out.edit.args["amount_minor"], 4000);
    assert.deepEqual(out.edit.changes, [{ field: "amount_minor", from: 4900, to: 4000, added: false, removed: false }]);
    assert.deepEqual(await amounts(invoice), [4000], "the edited amount ran, once");
    const text = JSON.parse(out.forModel()) as { operation_id: string; edited: { args: { amount_minor: number }; message: string } };
    assert.equal(text.operation_id, out.operationId);
    assert.equal(text.edited.args.amount_minor, 4000);
    assert.ok(text.edited.message.startsWith("An approver changed amount_minor from 4900 to 4000; this ran: {"), text.edited.message);

    // The same call again (the ledger replays the original, whose Execute answers
    // OPERATION_SUPERSEDED), and a check of the original's id: the same answer, no second charge.
    assert.equal((await runner.run("refund", args, key)).forModel(), out.forModel());
    assert.equal((await runner.check(out.edit.supersedes)).forModel(), out.forModel());
    assert.deepEqual(await amounts(invoice), [4000]);
    await assert.rejects(agent.execute(out.edit.supersedes), (err) => {
      assert.ok(isOpledgerError(err, "OPERATION_SUPERSEDED"));
      assert.equal(err.metadata["superseded_by"], out.operationId);
      return true;
    });
  });

  test("an edit into a quorum awaits the second approver", async () => {
    const { invoice, key, args } = refund();
    const runner = new ToolRunner(agent, { approvalWaitMs: 1000, onApprovalRequired: editingApprover(150000) });
    const out = await runner.run("refund", args, key);
    assert.ok(out instanceof AwaitingApproval, out.forModel());
    assert.ok(out.edit && out.operation.supersedes === out.edit.supersedes);
    assert.equal(out.operation.approval!.approvalsNeeded, 2);
    assert.equal(out.operation.approval!.approvals.length, 1, "the editor's approval counts");
    assert.ok(out.forModel().includes("An approver changed amount_minor from 4900 to 150000; this awaits approval: {"));
    assert.deepEqual(await amounts(invoice), []);
  });

  test("POLICY_DENIED says that the same call is refused again", async () => {
    const { invoice, key, args } = refund("USD");
    const runner = new ToolRunner(agent);
    for (let i = 0; i < 2; i++) {
      const out = await runner.run("refund", args, key);
      assert.ok(out instanceof Failed, out.forModel());
      assert.equal(out.reason, "POLICY_DENIED");
      assert.equal(out.operation, undefined, "nothing was recorded");
      assert.ok(out.message.includes("refunds are paid in EUR only"), out.message);
      assert.ok(out.message.includes("will be refused again"), out.message);
    }
    const tool = (await runner.modelTools()).find((t) => t.name === "refund")!;
    assert.ok(tool.description.includes("\n\nPolicy: refused when"), tool.description);
    assert.ok(tool.description.includes("an approver may edit amount_minor"));
    assert.deepEqual(await amounts(invoice), []);
  });
});
