// agent_loop is a simulated agent runtime (no real model) that pays one invoice through opledger
// with ToolRunner.
//
// The model's tool list comes from the ledger (ListTools); the model proposes the same payment
// twice (its answer for round 1, regenerated after a timeout, which names the call with a new
// provider id); the runner prepares it under a key derived from the runtime's own state
// (conversation, round, tool; not the provider's tool-call id), so both proposals are one
// operation; a person approves exactly the fingerprint of the arguments shown (the approval hook);
// the runner executes it and hands the model the same answer both times; the processor holds one
// charge.
//
// Run it against `clients/run-server.sh ENVFILE` (or `make dev`'s .opledger-dev/env); it reads
// OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL from that file or from the environment:
//
//   cd clients/typescript && npm run build && node dist/examples/agent_loop.js ENVFILE

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { computeFingerprint, deriveKey, OpledgerClient, ToolRunner, type ModelTool, type Operation } from "../src/index";

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

/** fakeModel stands in for an LLM: given the tool list, it asks to pay the invoice, with the
 * arguments as JSON text, as a model writes them. Like a real model, each answer names its calls
 * with new provider ids: call_pay_1 in the first answer, call_pay_1b in the regenerated one. */
function fakeModel(tools: ModelTool[], invoiceId: string, attempt: number) {
  if (!tools.some((t) => t.name === "pay_invoice")) throw new Error("no pay_invoice tool");
  const args = { invoice_id: invoiceId, amount_minor: 4900, currency: "EUR" };
  const id = attempt === 1 ? "call_pay_1" : "call_pay_1b";
  return [{ id, name: "pay_invoice", arguments: JSON.stringify(args) }];
}

async function main(): Promise<number> {
  if (process.argv[2]) loadEnv(process.argv[2]);
  requireEnv("OPLEDGER_ADDR", "AGENT_KEY", "APPROVER_KEY", "FAKEPAY_URL");
  const invoiceId = "INV-" + randomUUID().slice(0, 8).toUpperCase();
  const conversation = "conv-" + randomUUID().slice(0, 8); // the runtime's own durable state
  const round = 1;

  // TLS is the default; `opledger dev` listens on loopback without it.
  const agent = new OpledgerClient({ target: process.env.OPLEDGER_ADDR!, apiKey: process.env.AGENT_KEY!, plaintext: true });
  const approver = agent.withApiKey(process.env.APPROVER_KEY!); // same connection, another principal

  // The approval screen: shows the arguments, checks that the fingerprint is theirs, approves that.
  async function personApproves(op: Operation): Promise<void> {
    const shown = op.args ?? {};
    console.log(`approval needed: ${op.id} ${op.tool} ${JSON.stringify(shown)}`);
    const fp = computeFingerprint({ tool: op.tool, args: shown, tenant: op.tenant, toolVersion: op.toolVersion });
    if (fp !== op.fingerprint) throw new Error("the operation is not what the screen shows");
    await approver.approve(op.id, fp, "approve", "customer confirmed");
  }

  try {
    const answers: string[] = [];
    // --- the agent loop: the lines that wrap the ledger's tools ---
    const runner = new ToolRunner(agent, { approvalWaitMs: 30_000, onApprovalRequired: personApproves });
    const tools = await runner.modelTools(); // name, description, JSON Schema: what the model may call
    for (const attempt of [1, 2]) { // round 1's answer, regenerated after a timeout
      for (const call of fakeModel(tools, invoiceId, attempt)) {
        // toolCall "", not call.id: this loop does not store the model's answer before running its
        // calls, and the regenerated answer names the same payment call_pay_1b, so a key with the
        // id would pay twice. A runtime that pins each answer first may include call.id.
        const key = deriveKey({ conversation, round, toolCall: "", tool: call.name });
        const outcome = await runner.run(call.name, call.arguments, key);
        answers.push(outcome.forModel()); // the tool result the model reads
      }
    }
    // --- end of the agent loop ---
    answers.forEach((a, i) => console.log(`answer ${i + 1}, tool result for the model: ${a}`));
    const n = await chargesFor(invoiceId);
    console.log(`charges at the processor for ${invoiceId}: ${n}`);
    const same = answers.length === 2 && answers[0] === answers[1] && JSON.parse(answers[0]!).status === "succeeded";
    return n === 1 && same ? 0 : 1;
  } finally {
    agent.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
