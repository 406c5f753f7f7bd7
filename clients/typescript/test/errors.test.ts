import assert from "node:assert/strict";
import { test } from "node:test";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { ConnectError } from "@connectrpc/connect";
import { Code, ErrorReason, OpledgerError, REASONS, isOpledgerError, toOpledgerError } from "../src/index";

const NOT_RPC_ERRORS = new Set(["UNSPECIFIED", "DOWNSTREAM_REJECTED", "DOWNSTREAM_OUTCOME_UNKNOWN"]);

test("REASONS lists every RPC ErrorReason of the proto", () => {
  const fromProto = Object.keys(ErrorReason).filter((k) => Number.isNaN(Number(k)) && !NOT_RPC_ERRORS.has(k));
  assert.deepEqual([...REASONS].sort(), fromProto.sort());
});

function errorInfo(reason: string, domain: string, metadata: Record<string, string> = {}): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).string(reason);
  w.tag(2, WireType.LengthDelimited).string(domain);
  for (const [k, v] of Object.entries(metadata)) {
    w.tag(3, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string(k).tag(2, WireType.LengthDelimited).string(v).join();
  }
  return w.finish();
}

function retryInfo(seconds: number, nanos: number): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).fork().tag(1, WireType.Varint).int64(seconds).tag(2, WireType.Varint).int32(nanos).join();
  return w.finish();
}

test("ErrorInfo and RetryInfo are decoded", () => {
  const ce = new ConnectError("in progress", Code.Aborted);
  ce.details.push(
    { type: "google.rpc.ErrorInfo", value: errorInfo("OPERATION_IN_PROGRESS", "opledger.v1", { operation_id: "op_9" }) },
    { type: "google.rpc.RetryInfo", value: retryInfo(1, 500_000_000) },
  );
  const err = toOpledgerError(ce);
  assert.ok(err instanceof OpledgerError);
  assert.equal(err.code, Code.Aborted);
  assert.equal(err.reason, "OPERATION_IN_PROGRESS");
  assert.equal(err.retryDelayMs, 1500);
  assert.equal(err.operationId, "op_9");
  assert.equal(err.rawMessage, "in progress");
  assert.ok(err.retryable);
  assert.ok(isOpledgerError(err, "OPERATION_IN_PROGRESS"));
  assert.ok(!isOpledgerError(err, "INTERNAL"));
});

test("a foreign domain is not trusted", () => {
  const ce = new ConnectError("nope", Code.NotFound);
  ce.details.push({ type: "google.rpc.ErrorInfo", value: errorInfo("OPERATION_NOT_FOUND", "example.com") });
  const err = toOpledgerError(ce);
  assert.equal(err.reason, undefined);
  assert.ok(!err.retryable);
});

test("ABORTED without RetryInfo and other codes are final", () => {
  assert.ok(!toOpledgerError(new ConnectError("x", Code.Aborted)).retryable);
  assert.ok(!toOpledgerError(new ConnectError("x", Code.InvalidArgument)).retryable);
  assert.ok(toOpledgerError(new ConnectError("x", Code.Unavailable)).retryable);
});
