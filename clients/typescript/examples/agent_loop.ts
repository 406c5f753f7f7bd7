// agent_loop is a simulated agent runtime (no real model) that pays one invoice through opledger.
//
// It shows the three things that keep a retried or repeated tool call from paying twice:
//  1. the idempotency key is derived from the runtime's own workflow state, so the model
//     proposing the same payment twice maps to one operation (Prepare answers replayed = true);
//  2. a person approves exactly the fingerprint of the arguments shown to them;
//  3. when the Execute answer is lost, the runtime asks again and gets the stored outcome
//     (replayed = true): the processor still holds one charge.
//
// Run it against `clients/run-server.sh ENVFILE` (or `make dev`'s .opledger-dev/env); it reads
// OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL from that file or from the environment:
//
//   cd clients/typescript && npm run build && node dist/examples/agent_loop.js ENVFILE

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { computeFingerprint, deriveIdempotencyKey, OpledgerClient, State } from "../src/index";

/** loadEnv reads the `export K=V` lines of an env file into process.env. */
function loadEnv(path: string): void {
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const m = /^export ([A-Z_]+)=(.*)$/.exec(line.trim());
    if (m) process.env[m[1]!] = m[2]!;
  }
}

/** requireEnv stops with a clear message when a variable is missing: with a guessed default the
 * example would count charges at the wrong processor. */
function requireEnv(...names: string[]): void {
  const missing = names.filter((n) => !process.env[n]);
  if (missing.length > 0) {
    console.error(
      `agent_loop: ${missing.join(", ")} not set: source the env file of \`opledger dev\` ` +
        "(. ./.opledger-dev/env) or of clients/run-server.sh, or pass that file as the first argument",
    );
    process.exit(2);
  }
}

async function chargesFor(invoiceId: string): Promise<number> {
  const url = process.env.FAKEPAY_URL!.replace(/\/$/, "") + "/charges";
  const body = (await (await fetch(url)).json()) as { data: { invoice_id?: string }[] };
  return body.data.filter((c) => c.invoice_id === invoiceId).length;
}

/** fakeModel stands in for an LLM: every round it proposes the same payment, each time with a
 * new provider call id, as a regenerated response would. */
function fakeModel(invoiceId: string) {
  return {
    id: "call_" + randomUUID().slice(0, 8),
    name: "pay_invoice",
    arguments: { invoice_id: invoiceId, amount_minor: 4900, currency: "EUR" },
  };
}

async function main(): Promise<number> {
  if (process.argv[2]) loadEnv(process.argv[2]);
  requireEnv("OPLEDGER_ADDR", "AGENT_KEY", "APPROVER_KEY", "FAKEPAY_URL");
  const addr = process.env.OPLEDGER_ADDR!;
  const invoiceId = "INV-" + randomUUID().slice(0, 8).toUpperCase();
  // The runtime's trusted workflow state: it owns the identity of the intended action.
  const workflow = { conversationId: "conv-" + randomUUID().slice(0, 8), step: "pay-" + invoiceId };

  const agent = new OpledgerClient({ target: addr, apiKey: process.env.AGENT_KEY! });
  const approver = new OpledgerClient({ target: addr, apiKey: process.env.APPROVER_KEY! });
  try {
    let op;
    for (const round of [1, 2]) {
      // The model asks twice (a retried model round).
      const call = fakeModel(invoiceId);
      // The key comes from the runtime's state, not from the provider's call id, which differs
      // between the two rounds.
      const key = deriveIdempotencyKey({
        workflowId: workflow.conversationId,
        modelRound: 1,
        toolCallId: workflow.step,
        toolName: call.name,
        toolVersion: "1",
      });
      const prepared = await agent.prepare(call.name, call.arguments, key);
      op = prepared.operation!;
      console.log(`round ${round}: Prepare -> ${op.id} ${State[op.state]} replayed=${prepared.replayed}`);
    }
    op = op!;

    // The approval screen shows the arguments and recomputes the fingerprint from them.
    const fp = computeFingerprint({ tool: op.tool, args: op.args, tenant: op.tenant, toolVersion: op.toolVersion });
    if (fp !== op.fingerprint) throw new Error("the operation is not what the screen shows");
    const approved = await approver.approve(op.id, fp, "approve", "customer confirmed");
    console.log(`approved: ${State[approved.operation!.state]}`);

    await agent.execute(op.id); // ...and the answer is lost on the way back
    console.log("Execute answer lost on the way back; asking again");

    const replay = await agent.execute(op.id);
    const o = replay.operation!;
    console.log(`Execute -> ${State[o.state]} externalRef=${o.externalRef} replayed=${replay.replayed}`);
    const r = o.result ?? {};
    console.log("result: " + JSON.stringify({ id: r["id"], status: r["status"], amount_minor: r["amount_minor"], currency: r["currency"] }));

    const n = await chargesFor(invoiceId);
    console.log(`charges at the processor for ${invoiceId}: ${n}`);
    return n === 1 && replay.replayed ? 0 : 1;
  } finally {
    agent.close();
    approver.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
