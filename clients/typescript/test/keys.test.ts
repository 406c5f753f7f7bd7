import assert from "node:assert/strict";
import { test } from "node:test";
import { deriveIdempotencyKey } from "../src/index";

const base = { workflowId: "conv-42", modelRound: 3, toolCallId: "call_123", toolName: "pay_invoice", toolVersion: "1" };

test("stable, bounded, printable ASCII", () => {
  const a = deriveIdempotencyKey(base);
  assert.equal(a, deriveIdempotencyKey({ ...base }));
  assert.match(a, /^opk1-[A-Za-z0-9_-]{43}$/);
  assert.equal(a.length, 48);
});

test("the same key as the Python client", () => {
  // clients/python/tests/test_keys.py asserts the same value.
  assert.equal(deriveIdempotencyKey(base), "opk1-5uNHHgDdpWE12vxWLFwLTXrj7BApOgGgedYY0-UHRIg");
});

test("a round as number or string is the same", () => {
  assert.equal(deriveIdempotencyKey({ ...base, modelRound: 3 }), deriveIdempotencyKey({ ...base, modelRound: "3" }));
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
  const k = deriveIdempotencyKey({ workflowId: "ü".repeat(10_000), modelRound: 1, toolCallId: "😀".repeat(500), toolName: "t" });
  assert.equal(k.length, 48);
  assert.match(k, /^[\x21-\x7e]+$/);
});

test("empty workflow or tool is refused", () => {
  assert.throws(() => deriveIdempotencyKey({ ...base, workflowId: "" }), RangeError);
  assert.throws(() => deriveIdempotencyKey({ ...base, toolName: "" }), RangeError);
  assert.throws(() => deriveIdempotencyKey({ ...base, modelRound: 1.5 }), TypeError);
});
