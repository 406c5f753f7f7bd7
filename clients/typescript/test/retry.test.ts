// The retry owner, against a local stub gRPC server (raw HTTP/2) that answers from a script.

import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  backoffMs,
  Code,
  ExecuteResponseSchema,
  isOpledgerError,
  OpledgerClient,
  PrepareResponseSchema,
  retryPolicy,
  sleep,
  State,
  type RetryPolicy,
} from "../src/index";
import { StatusSchema } from "../src/gen/google/rpc/status_pb";

interface Step {
  code: Code;
  reason?: string;
  retryDelayMs?: number;
}

function statusDetails(step: Step): string {
  const details = [];
  if (step.reason) {
    const w = new BinaryWriter();
    w.tag(1, WireType.LengthDelimited).string(step.reason).tag(2, WireType.LengthDelimited).string("opledger.v1");
    details.push(create(AnySchema, { typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: w.finish() }));
  }
  if (step.retryDelayMs !== undefined) {
    const ms = step.retryDelayMs;
    const w = new BinaryWriter();
    w.tag(1, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.Varint)
      .int64(Math.floor(ms / 1000))
      .tag(2, WireType.Varint)
      .int32((ms % 1000) * 1e6)
      .join();
    details.push(create(AnySchema, { typeUrl: "type.googleapis.com/google.rpc.RetryInfo", value: w.finish() }));
  }
  const st = create(StatusSchema, { code: step.code, message: "scripted", details });
  return Buffer.from(toBinary(StatusSchema, st)).toString("base64");
}

function frame(bytes: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([head, Buffer.from(bytes)]);
}

/** stubServer answers each call with the next scripted error, or success once the script is
 * used up, and records every call's path and headers. */
async function stubServer(script: Step[]) {
  const calls: { path: string; key?: string; auth?: string }[] = [];
  const server = http2.createServer();
  server.on("stream", (stream, headers) => {
    const path = String(headers[":path"]);
    calls.push({ path, key: headers["idempotency-key"] as string | undefined, auth: headers["authorization"] as string | undefined });
    stream.on("data", () => {});
    stream.on("end", () => {
      const step = script.shift();
      stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      stream.on("wantTrailers", () => {
        if (step) {
          stream.sendTrailers({ "grpc-status": String(step.code), "grpc-message": "scripted", "grpc-status-details-bin": statusDetails(step) });
        } else {
          stream.sendTrailers({ "grpc-status": "0" });
        }
      });
      if (!step) {
        const body = path.endsWith("/Prepare")
          ? toBinary(PrepareResponseSchema, create(PrepareResponseSchema, { operation: { id: "op_1", tool: "pay_invoice" } }))
          : toBinary(ExecuteResponseSchema, create(ExecuteResponseSchema, { operation: { id: "op_1", state: State.SUCCEEDED } }));
        stream.write(frame(body));
      }
      stream.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return { calls, target: `127.0.0.1:${port}`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

function recordingPolicy(extra: Partial<RetryPolicy> = {}) {
  const sleeps: number[] = [];
  const policy: Partial<RetryPolicy> = { sleep: async (ms) => void sleeps.push(ms), ...extra };
  return { sleeps, policy };
}

describe("retries against a stub server", () => {
  const closers: (() => unknown)[] = [];
  after(async () => {
    for (const c of closers) await c();
  });
  async function setup(script: Step[], extra: Partial<RetryPolicy> = {}) {
    const s = await stubServer(script);
    const { sleeps, policy } = recordingPolicy(extra);
    const client = new OpledgerClient({ target: s.target, apiKey: "test-key", plaintext: true, retry: policy });
    closers.push(() => client.close(), s.close);
    return { ...s, sleeps, client };
  }

  test("UNAVAILABLE is retried with the same idempotency key", async () => {
    const s = await setup([{ code: Code.Unavailable, reason: "LEDGER_UNAVAILABLE", retryDelayMs: 50 }, { code: Code.Unavailable }]);
    const resp = await s.client.prepare("pay_invoice", { amount_minor: 4900 }, { idempotencyKey: "key-1" });
    assert.equal(resp.operation?.id, "op_1");
    assert.equal(s.calls.length, 3);
    assert.deepEqual(
      s.calls.map((c) => c.key),
      ["key-1", "key-1", "key-1"],
    );
    assert.ok(s.calls.every((c) => c.auth === "Bearer test-key" && c.path === "/opledger.v1.LedgerService/Prepare"));
    assert.equal(s.sleeps.length, 2);
    assert.ok(s.sleeps[0]! >= 50, "RetryInfo is a floor");
    assert.ok(s.sleeps[1]! >= 0 && s.sleeps[1]! <= 200);
  });

  test("INVALID_ARGUMENT is never retried", async () => {
    const s = await setup([{ code: Code.InvalidArgument, reason: "FIELD_INVALID" }]);
    await assert.rejects(s.client.prepare("pay_invoice", {}, { idempotencyKey: "key-2" }), (err: unknown) => {
      assert.ok(isOpledgerError(err, "FIELD_INVALID"));
      assert.equal(err.code, Code.InvalidArgument);
      return true;
    });
    assert.equal(s.calls.length, 1);
    assert.deepEqual(s.sleeps, []);
  });

  test("ABORTED without RetryInfo is final", async () => {
    const s = await setup([{ code: Code.Aborted, reason: "OPERATION_IN_PROGRESS" }]);
    await assert.rejects(s.client.execute("op_1"), (err: unknown) => isOpledgerError(err, "OPERATION_IN_PROGRESS"));
    assert.equal(s.calls.length, 1);
  });

  test("ABORTED with RetryInfo waits at least the delay", async () => {
    const s = await setup([{ code: Code.Aborted, reason: "OPERATION_IN_PROGRESS", retryDelayMs: 1500 }]);
    const resp = await s.client.execute("op_1");
    assert.equal(resp.operation?.state, State.SUCCEEDED);
    assert.equal(s.calls.length, 2);
    assert.ok(s.sleeps[0]! >= 1500);
  });

  test("attempts are bounded", async () => {
    const s = await setup(Array.from({ length: 10 }, () => ({ code: Code.Unavailable, reason: "DOWNSTREAM_UNAVAILABLE", retryDelayMs: 10 })));
    await assert.rejects(s.client.execute("op_1"), (err: unknown) => {
      assert.ok(isOpledgerError(err, "DOWNSTREAM_UNAVAILABLE"));
      assert.equal(err.retryDelayMs, 10);
      return true;
    });
    assert.equal(s.calls.length, 4);
    assert.equal(s.sleeps.length, 3);
  });

  test("an abort during the backoff rejects with an OpledgerError (Canceled), the reason as cause", async () => {
    for (const reason of [undefined, new Error("the user gave up")]) {
      // The server asks for a 10 s pause before the retry; the caller gives up during it.
      const s = await setup([{ code: Code.Unavailable, reason: "LEDGER_UNAVAILABLE", retryDelayMs: 10_000 }], { sleep });
      const ac = new AbortController();
      const started = Date.now();
      const call = s.client.prepare("pay_invoice", {}, { idempotencyKey: "key-abort", signal: ac.signal });
      while (s.calls.length === 0) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 50)); // the first attempt's answer is in: the client sleeps
      ac.abort(reason);
      await assert.rejects(call, (err: unknown) => {
        assert.ok(isOpledgerError(err), `not an OpledgerError: ${String(err)}`);
        assert.equal(err.code, Code.Canceled); // as an abort during an attempt (Connect) gives
        assert.equal(err.reason, undefined);
        assert.equal(err.cause, ac.signal.reason);
        return true;
      });
      assert.ok(Date.now() - started < 5000, "the abort ends the backoff at once");
      assert.equal(s.calls.length, 1, "no retry after the abort");
    }
  });

  test("maxAttempts 1 disables retries", async () => {
    const s = await setup([{ code: Code.Unavailable, reason: "LEDGER_UNAVAILABLE" }], { maxAttempts: 1 });
    await assert.rejects(s.client.prepare("t", {}, { idempotencyKey: "k" }), (err: unknown) => isOpledgerError(err, "LEDGER_UNAVAILABLE"));
    assert.equal(s.calls.length, 1);
  });
});

test("TLS is the default: a plaintext server never sees the call", async () => {
  const s = await stubServer([]);
  const client = new OpledgerClient({ target: s.target, apiKey: "k", retry: { maxAttempts: 1 }, timeoutMs: 5000 });
  try {
    await assert.rejects(client.get("op_1"), (err: unknown) => {
      // The TLS handshake fails (Connect reports a failed handshake as INTERNAL, a refused one
      // as UNAVAILABLE): nothing was sent in plaintext.
      assert.ok(isOpledgerError(err));
      assert.ok([Code.Unavailable, Code.Internal].includes(err.code), String(err.code));
      return true;
    });
    assert.equal(s.calls.length, 0);
  } finally {
    client.close();
    await s.close();
  }
  assert.throws(() => new OpledgerClient({ target: "http://127.0.0.1:1", apiKey: "k" }), RangeError);
  assert.throws(() => new OpledgerClient({ target: "https://127.0.0.1:1", apiKey: "k", plaintext: true }), RangeError);
  assert.throws(() => new OpledgerClient({ target: "127.0.0.1:1", apiKey: "k", plaintext: true, tls: { servername: "x" } }), RangeError);
});

test("withApiKey shares the connection and sends its own key", async () => {
  const s = await stubServer([]);
  const agent = new OpledgerClient({ target: s.target, apiKey: "agent-key", plaintext: true });
  try {
    const approver = agent.withApiKey("approver-key");
    await approver.prepare("t", {}, { idempotencyKey: "k1" });
    approver.close(); // leaves the shared connection open
    await agent.prepare("t", {}, { idempotencyKey: "k2" });
    assert.deepEqual(
      s.calls.map((c) => [c.auth, c.key]),
      [
        ["Bearer approver-key", "k1"],
        ["Bearer agent-key", "k2"],
      ],
    );
    assert.throws(() => agent.withApiKey(""), RangeError);
  } finally {
    agent.close();
    await s.close();
  }
});

test("connection refused is UNAVAILABLE and retried", async () => {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const { sleeps, policy } = recordingPolicy({ maxAttempts: 3 });
  const client = new OpledgerClient({ target: `127.0.0.1:${port}`, apiKey: "k", plaintext: true, retry: policy });
  try {
    await assert.rejects(client.get("op_1"), (err: unknown) => {
      assert.ok(isOpledgerError(err));
      assert.equal(err.code, Code.Unavailable);
      assert.equal(err.reason, undefined);
      return true;
    });
    assert.equal(sleeps.length, 2);
  } finally {
    client.close();
  }
});

test("backoff: full jitter under a doubling, capped ceiling, RetryInfo as floor", () => {
  const top = retryPolicy({ random: () => 1 });
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6, 7].map((n) => backoffMs(top, n)),
    [100, 200, 400, 800, 1600, 2000, 2000],
  );
  const bottom = retryPolicy({ random: () => 0 });
  assert.equal(backoffMs(bottom, 3), 0);
  assert.equal(backoffMs(bottom, 3, 700), 700);
  assert.equal(backoffMs(top, 1, 5000), 5000);
  assert.throws(() => retryPolicy({ maxAttempts: 0 }), RangeError);
});
