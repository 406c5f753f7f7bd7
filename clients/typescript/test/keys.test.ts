import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { test } from "node:test";
import { deriveKey, keyPreimage, type KeyParts } from "../src/index";
import { REPO } from "./helpers";

const base = { conversation: "conv-42", round: 3, toolCall: "call_123", tool: "pay_invoice", toolVersion: "1" };

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
      conversation: vec.conversation,
      round: vec.round,
      toolCall: vec.tool_call,
      tool: vec.tool,
      toolVersion: vec.tool_version,
    };
    assert.deepEqual(Buffer.from(keyPreimage(parts), "utf8"), Buffer.from(vec.canonical, "utf8"));
    assert.equal(deriveKey(parts), vec.key);
  });
}

test("an absent toolVersion or toolCall is the empty string", () => {
  const { toolVersion: _omitted, ...rest } = base;
  assert.equal(deriveKey(rest), deriveKey({ ...rest, toolVersion: "" }));
  const { toolCall: _none, ...noCall } = base;
  assert.equal(deriveKey(noCall), deriveKey({ ...noCall, toolCall: "" }));
});

test("stable, bounded, printable ASCII", () => {
  const a = deriveKey(base);
  assert.equal(a, deriveKey({ ...base }));
  assert.match(a, /^opk1-[A-Za-z0-9_-]{43}$/);
  assert.equal(a.length, 48);
});

test("every part matters, and parts are delimited", () => {
  const keys = new Set([
    deriveKey(base),
    deriveKey({ ...base, conversation: "conv-43" }),
    deriveKey({ ...base, round: 4 }),
    deriveKey({ ...base, toolCall: "call_124" }),
    deriveKey({ ...base, tool: "send_email" }),
    deriveKey({ ...base, toolVersion: "2" }),
  ]);
  assert.equal(keys.size, 6);
  assert.notEqual(
    deriveKey({ conversation: "a:b", round: 1, toolCall: "c", tool: "t" }),
    deriveKey({ conversation: "a", round: 1, toolCall: "b:c", tool: "t" }),
  );
});

test("long and non-ASCII parts stay bounded", () => {
  const k = deriveKey({
    conversation: "ü".repeat(10_000),
    round: Number.MAX_SAFE_INTEGER,
    toolCall: "😀".repeat(500),
    tool: "t",
  });
  assert.equal(k.length, 48);
  assert.match(k, /^[\x21-\x7e]+$/);
});

test("a round that is not a safe integer number is a TypeError", () => {
  for (const round of ["3", true, null, undefined, 1.5, NaN, Infinity, 2 ** 53, -(2 ** 53), 3n]) {
    assert.throws(
      () => deriveKey({ ...base, round: round as unknown as number }),
      TypeError,
      String(round),
    );
  }
});

test("empty conversation or tool, a negative round or a lone surrogate is refused", () => {
  assert.throws(() => deriveKey({ ...base, conversation: "" }), RangeError);
  assert.throws(() => deriveKey({ ...base, tool: "" }), RangeError);
  assert.throws(() => deriveKey({ ...base, round: -1 }), RangeError);
  assert.throws(() => deriveKey({ ...base, toolCall: "x\ud800" }), RangeError);
});
