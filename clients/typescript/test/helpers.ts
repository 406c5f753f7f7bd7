// helpers shared by the test files: the repository's paths and the server from run-server.sh.

import { readFileSync } from "node:fs";
import { resolve } from "node:path";

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
