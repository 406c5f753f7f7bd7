import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { canonicalize, computeFingerprint, operationFingerprint, OperationSchema, preimage } from "../src/index";
import { loadVectors } from "./helpers";

describe("fingerprint vectors", () => {
  const vectors = loadVectors();
  test("there are vectors", () => assert.ok(vectors.length >= 19));
  for (const v of vectors) {
    test(v.name, () => {
      const input = { tool: v.tool, args: v.args, tenant: v.tenant, toolVersion: v.tool_version, method: v.method };
      assert.equal(Buffer.from(preimage(input), "utf8").toString("hex"), Buffer.from(v.canonical, "utf8").toString("hex"));
      assert.equal(computeFingerprint(input), v.fingerprint);
    });
  }
});

describe("canonicalize", () => {
  const cases: [number, string][] = [
    [0, "0"],
    [-0, "0"],
    [4900, "4900"],
    [4.5, "4.5"],
    [1e21, "1e+21"],
    [1e20, "100000000000000000000"],
    [1e-6, "0.000001"],
    [1e-7, "1e-7"],
    [5e-324, "5e-324"],
    [9007199254740993, "9007199254740992"],
  ];
  for (const [n, text] of cases) {
    test(`number ${text}`, () => assert.equal(canonicalize(n), text));
  }
  test("non-finite numbers are refused", () => {
    for (const bad of [NaN, Infinity, -Infinity]) {
      assert.throws(() => canonicalize({ x: bad }), RangeError);
    }
  });
  test("keys sort by UTF-16 code units", () => {
    assert.equal(canonicalize({ "\u{1F600}": 1, "\uFB33": 2, a: 3 }), '{"a":3,"\u{1F600}":1,"\uFB33":2}');
  });
  test("only JCS escapes", () => {
    assert.equal(canonicalize("\u2028/<>\u007f\u001f\n"), '"\u2028/<>\u007f\\u001f\\n"');
  });
});

test("operationFingerprint recomputes a message's fingerprint", () => {
  const v = loadVectors()[0]!;
  const op = create(OperationSchema, { tool: v.tool, toolVersion: v.tool_version, tenant: v.tenant, args: v.args ?? {} });
  assert.equal(operationFingerprint(op), v.fingerprint);
});

test("empty tool version is refused", () => {
  assert.throws(() => computeFingerprint({ tool: "pay_invoice", args: {}, tenant: "demo", toolVersion: "" }), RangeError);
});
