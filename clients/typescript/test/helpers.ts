// helpers shared by the test files: the repository's paths and the server from run-server.sh.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { State, type OpledgerClient, type Operation } from "../src/index";

/** REPO is the repository root (tests run from dist/test). */
export const REPO = resolve(__dirname, "..", "..", "..", "..");

/** Vector is one entry of clients/go/fingerprint/testdata/vectors.json. */
export interface Vector {
  name: string;
  method: string;
  tenant: string;
  tool: string;
  tool_version: string;
  args: Record<string, never> | null;
  canonical: string;
  fingerprint: string;
}

/** loadVectors parses the vectors with JSON.parse, so numbers are doubles as on the wire. */
export function loadVectors(): Vector[] {
  const path = process.env.OPLEDGER_VECTORS ?? resolve(REPO, "clients", "go", "fingerprint", "testdata", "vectors.json");
  const doc = JSON.parse(readFileSync(path, "utf8")) as { version: string; vectors: Vector[] };
  if (doc.version !== "v1") {
    throw new Error(`unexpected vectors version ${doc.version}`);
  }
  return doc.vectors;
}

/** serverEnv returns the variables run-server.sh exports, or undefined when they are not set. */
export function serverEnv():
  | { addr: string; agentKey: string; approverKey: string; otherAgentKey: string; fakepayUrl: string }
  | undefined {
  const e = process.env;
  if (!e.OPLEDGER_ADDR || !e.AGENT_KEY || !e.APPROVER_KEY || !e.OTHER_AGENT_KEY || !e.FAKEPAY_URL) {
    return undefined;
  }
  return {
    addr: e.OPLEDGER_ADDR,
    agentKey: e.AGENT_KEY,
    approverKey: e.APPROVER_KEY,
    otherAgentKey: e.OTHER_AGENT_KEY,
    fakepayUrl: e.FAKEPAY_URL,
  };
}

/** amounts lists the fake processor's charges of one invoice by amount. */
export async function amounts(fakepayUrl: string, invoice: string): Promise<number[]> {
  const body = (await (await fetch(fakepayUrl.replace(/\/$/, "") + "/charges")).json()) as {
    data: { invoice_id: string; amount_minor: number }[];
  };
  return body.data.filter((c) => c.invoice_id === invoice).map((c) => c.amount_minor);
}

/** awaitingCall is the one operation of tool awaiting approval for invoice (the call as made). */
export async function awaitingCall(approver: OpledgerClient, tool: string, invoice: string): Promise<Operation> {
  const page = await approver.listOperations({ states: [State.AWAITING_APPROVAL], tool, pageSize: 200 });
  const ops = page.operations.filter((o) => o.args?.["invoice_id"] === invoice);
  assert.equal(ops.length, 1, `one ${tool} awaits approval for ${invoice}`);
  return ops[0]!;
}

/** approveWithEdit approves op with amount_minor changed, as a person at the console would (the
 * refund tool of clients/testdata/policy_tools.yaml lets an approver edit amount_minor), and
 * returns the edited operation; op is REJECTED, superseded by it. */
export async function approveWithEdit(approver: OpledgerClient, op: Operation, amountMinor: number): Promise<Operation> {
  const resp = await approver.approveEdited(op.id, op.fingerprint, { ...op.args, amount_minor: amountMinor }, "less is enough");
  assert.equal(resp.operation!.state, State.REJECTED);
  assert.equal(resp.operation!.supersededBy, resp.edited!.id);
  return resp.edited!;
}
