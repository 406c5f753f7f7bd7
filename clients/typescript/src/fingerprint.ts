// fingerprint computes opledger's v1 operation fingerprint, exactly as the server does:
// "v1:" + hex(SHA-256(JCS(preimage))) with the preimage
// {"args": …, "method": …, "tenant": …, "tool": …, "tool_version": …, "v": 1} and JCS the RFC 8785
// JSON canonicalization (docs/fingerprint.md). An approval screen recomputes it from the
// arguments it shows, so an approval can only ever apply to exactly those arguments.

import { createHash } from "node:crypto";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { Operation } from "./gen/opledger/v1/ledger_pb";

/** PREPARE_METHOD is the gRPC method that a v1 fingerprint covers. */
export const PREPARE_METHOD = "/opledger.v1.LedgerService/Prepare";

/** FINGERPRINT_PREFIX names the canonical form; a client must not recompute other prefixes. */
export const FINGERPRINT_PREFIX = "v1:";

/** canonicalize returns the RFC 8785 (JCS) text of a JSON value. Numbers are JavaScript
 * doubles, written as Number.prototype.toString writes them (what JCS prescribes); -0 is "0";
 * NaN and infinities throw. Strings are escaped by JSON.stringify, which escapes exactly what JCS
 * escapes. Object members are sorted by UTF-16 code units, which is what Array.prototype.sort
 * compares. */
export function canonicalize(value: JsonValue): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new RangeError("NaN and infinities are not JSON numbers");
    }
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return "[" + value.map(canonicalize).join(",") + "]";
  }
  if (typeof value === "object") {
    const obj = value as JsonObject;
    const keys = Object.keys(obj).sort();
    const parts: string[] = [];
    for (const k of keys) {
      const v = obj[k];
      if (v === undefined) {
        continue; // as JSON.stringify: an absent member
      }
      parts.push(JSON.stringify(k) + ":" + canonicalize(v));
    }
    return "{" + parts.join(",") + "}";
  }
  throw new TypeError(`not a JSON value: ${typeof value}`);
}

/** FingerprintInput names what a v1 fingerprint covers. toolVersion must be the resolved
 * version (Operation.toolVersion), not an empty request field. */
export interface FingerprintInput {
  tool: string;
  args: JsonObject | null | undefined;
  tenant: string;
  toolVersion: string;
  /** method defaults to PREPARE_METHOD. */
  method?: string;
}

/** preimage returns the canonical text that the v1 fingerprint hashes. */
export function preimage(input: FingerprintInput): string {
  const method = input.method ?? PREPARE_METHOD;
  for (const [name, v] of [
    ["method", method],
    ["tenant", input.tenant],
    ["tool", input.tool],
    ["toolVersion", input.toolVersion],
  ] as const) {
    if (!v) {
      throw new RangeError(`${name} must not be empty`);
    }
  }
  return canonicalize({
    args: input.args ?? {},
    method,
    tenant: input.tenant,
    tool: input.tool,
    tool_version: input.toolVersion,
    v: 1,
  });
}

/** computeFingerprint returns the v1 fingerprint ("v1:" + 64 hex digits). */
export function computeFingerprint(input: FingerprintInput): string {
  return FINGERPRINT_PREFIX + createHash("sha256").update(preimage(input), "utf8").digest("hex");
}

/** operationFingerprint recomputes the v1 fingerprint of an Operation from its tenant, tool,
 * toolVersion and args: what an approval screen shows is what it approves. */
export function operationFingerprint(op: Pick<Operation, "tool" | "toolVersion" | "tenant" | "args">): string {
  return computeFingerprint({ tool: op.tool, args: op.args, tenant: op.tenant, toolVersion: op.toolVersion });
}
