import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";
import { deriveIdempotencyKey, keyPreimage, type KeyParts } from "../src/index";
import { REPO } from "./helpers";

const base = { workflowId: "conv-42", modelRound: 3, toolCallId: "call_123", toolName: "pay_invoice", toolVersion: "1" };

/** KeyVector is one entry of clients/go/fingerprint/testdata/key_vectors.json. */
interface KeyVector {
  name: string;
  conversation: string;
  round: number;
  tool_call: string;
  tool: string;
  tool_version: string;
  canonical: string;
  key: string;
}

// The normative vectors of docs/fingerprint.md, "Idempotency key derivation"; the Go, Java and
// Python clients check the same file, so all four derive the same keys. REPO is resolved from
// this file's location at run time (dist/test), not from the working directory.
const keyDoc = JSON.parse(readFileSync(resolve(REPO, "clients", "go", "fingerprint", "testdata", "key_vectors.json"), "utf8")) as {
  version: string;
  vectors: KeyVector[];
};

test("key vectors file", () => {
  assert.equal(keyDoc.version, "opk1");
  assert.ok(keyDoc.vectors.length >= 3);
});

for (const vec of keyDoc.vectors) {
  test(`key vector ${vec.name}`, () => {
    const parts: KeyParts = {
      workflowId: vec.conversation,
      modelRound: vec.round,
      toolCallId: vec.tool_call,
      toolName: vec.tool,
      toolVersion: vec.tool_version,
    };
    assert.deepEqual(Buffer.from(keyPreimage(parts), "utf8"), Buffer.from(vec.canonical, "utf8"));
    assert.equal(deriveIdempotencyKey(parts), vec.key);
  });
}

test("an absent toolVersion is the empty string", () => {
  const { toolVersion: _omitted, ...rest } = base;
  assert.equal(deriveIdempotencyKey(rest), deriveIdempotencyKey({ ...rest, toolVersion: "" }));
});

test("stable, bounded, printable ASCII", () => {
  const a = deriveIdempotencyKey(base);
  assert.equal(a, deriveIdempotencyKey({ ...base }));
  assert.match(a, /^opk1-[A-Za-z0-9_-]{43}$/);
  assert.equal(a.length, 48);
});

test("every part matters, and parts are delimited", () => {
  const keys = new Set([
    deriveIdempotencyKey(base),
    deriveIdempotencyKey({ ...base, workflowId: "conv-43" }),
    deriveIdempotencyKey({ ...base, modelRound: 4 }),
    deriveIdempotencyKey({ ...base, toolCallId: "call_124" }),
    deriveIdempotencyKey({ ...base, toolName: "send_email" }),
    deriveIdempotencyKey({ ...base, toolVersion: "2" }),
  ]);
  assert.equal(keys.size, 6);
  assert.notEqual(
    deriveIdempotencyKey({ workflowId: "a:b", modelRound: 1, toolCallId: "c", toolName: "t" }),
    deriveIdempotencyKey({ workflowId: "a", modelRound: 1, toolCallId: "b:c", toolName: "t" }),
  );
});

test("long and non-ASCII parts stay bounded", () => {
  const k = deriveIdempotencyKey({
    workflowId: "ü".repeat(10_000),
    modelRound: Number.MAX_SAFE_INTEGER,
    toolCallId: "😀".repeat(500),
    toolName: "t",
  });
  assert.equal(k.length, 48);
  assert.match(k, /^[\x21-\x7e]+$/);
});

test("a round that is not a safe integer number is a TypeError", () => {
  for (const modelRound of ["3", true, null, undefined, 1.5, NaN, Infinity, 2 ** 53, -(2 ** 53), 3n]) {
    assert.throws(
      () => deriveIdempotencyKey({ ...base, modelRound: modelRound as unknown as number }),
      TypeError,
      String(modelRound),
    );
  }
});

test("empty workflow or tool, a negative round or a lone surrogate is refused", () => {
  assert.throws(() => deriveIdempotencyKey({ ...base, workflowId: "" }), RangeError);
  assert.throws(() => deriveIdempotencyKey({ ...base, toolName: "" }), RangeError);
  assert.throws(() => deriveIdempotencyKey({ ...base, modelRound: -1 }), RangeError);
  assert.throws(() => deriveIdempotencyKey({ ...base, toolCallId: "x\ud800" }), RangeError);
});
