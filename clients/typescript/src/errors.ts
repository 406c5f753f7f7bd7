// errors turns opledger's gRPC statuses into one typed error class.
//
// Every error the service returns carries exactly one google.rpc.ErrorInfo (domain
// "opledger.v1") whose reason names what happened; callers branch on `err.reason`, never on the
// message text.

import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";

/** ERROR_DOMAIN is the ErrorInfo domain of every opledger error. */
export const ERROR_DOMAIN = "opledger.v1";

/** REASONS lists the ErrorInfo reasons an opledger RPC can fail with (ErrorReason names without
 * the ERROR_REASON_ prefix). DOWNSTREAM_REJECTED and DOWNSTREAM_OUTCOME_UNKNOWN are not RPC
 * errors: they are stored in Operation.error. */
export const REASONS = [
  "API_KEY_MISSING",
  "API_KEY_INVALID",
  "ROLE_REQUIRED",
  "IDEMPOTENCY_KEY_MISSING",
  "IDEMPOTENCY_KEY_INVALID",
  "IDEMPOTENCY_KEY_REUSED",
  "TOOL_UNKNOWN",
  "TOOL_VERSION_UNKNOWN",
  "ARGS_INVALID",
  "ARGS_TOO_LARGE",
  "FIELD_INVALID",
  "OPERATION_NOT_FOUND",
  "APPROVAL_REQUIRED",
  "APPROVAL_EXPIRED",
  "APPROVAL_FINGERPRINT_MISMATCH",
  "APPROVAL_CONFLICT",
  "SELF_APPROVAL_FORBIDDEN",
  "APPROVAL_NOT_APPLICABLE",
  "OPERATION_REJECTED",
  "OPERATION_CANCELLED",
  "OPERATION_IN_PROGRESS",
  "RESOLUTION_NOT_APPLICABLE",
  "LEDGER_UNAVAILABLE",
  "INTERNAL",
  "DOWNSTREAM_UNAVAILABLE",
  "DEADLINE_INVALID",
  "OPERATOR_REQUIRED",
  "RATE_LIMITED",
  "QUOTA_EXCEEDED",
  "CANCEL_NOT_APPLICABLE",
  "POLICY_DENIED",
  "LIMIT_EXCEEDED",
  "OPERATION_DUPLICATE",
  "OPERATION_SUPERSEDED",
] as const;

/** Reason is one ErrorInfo reason. */
export type Reason = (typeof REASONS)[number];

/** OpledgerError is any failed opledger call. */
export class OpledgerError extends Error {
  /** code is the gRPC status code (Connect's Code has the same numbers). */
  readonly code: Code;
  /** reason is the ErrorInfo reason, or undefined when the status had no opledger ErrorInfo (a
   * transport failure, or a limit enforced by gRPC itself). */
  readonly reason: Reason | undefined;
  /** retryDelayMs is the RetryInfo delay, or undefined when the server sent none. */
  readonly retryDelayMs: number | undefined;
  /** metadata is the ErrorInfo metadata, e.g. { operation_id: "op_…" }. */
  readonly metadata: Readonly<Record<string, string>>;
  /** rawMessage is the status message, for people; do not parse it. */
  readonly rawMessage: string;

  constructor(
    code: Code,
    rawMessage: string,
    reason?: Reason,
    retryDelayMs?: number,
    metadata: Record<string, string> = {},
    options?: { cause?: unknown },
  ) {
    super(`${Code[code] ?? code}: ${reason ? reason + ": " : ""}${rawMessage}`, options);
    this.name = "OpledgerError";
    this.code = code;
    this.reason = reason;
    this.retryDelayMs = retryDelayMs;
    this.metadata = metadata;
    this.rawMessage = rawMessage;
  }

  /** retryable says whether the same request may be sent again: UNAVAILABLE on any method, or
   * ABORTED with a RetryInfo (a concurrent duplicate that is not answered yet). */
  get retryable(): boolean {
    return this.code === Code.Unavailable || (this.code === Code.Aborted && this.retryDelayMs !== undefined);
  }

  /** operationId is the operation an error names (IDEMPOTENCY_KEY_REUSED names the holder). */
  get operationId(): string | undefined {
    return this.metadata["operation_id"];
  }
}

/** isOpledgerError reports whether err is an OpledgerError, with the given reason if one is
 * passed. */
export function isOpledgerError(err: unknown, reason?: Reason): err is OpledgerError {
  return err instanceof OpledgerError && (reason === undefined || err.reason === reason);
}

/** toOpledgerError converts anything a Connect call threw into an OpledgerError. */
export function toOpledgerError(err: unknown): OpledgerError {
  if (err instanceof OpledgerError) {
    return err;
  }
  const ce = ConnectError.from(err);
  let reason: Reason | undefined;
  let metadata: Record<string, string> = {};
  let retryDelayMs: number | undefined;
  for (const d of ce.details) {
    // Incoming details are still encoded: gen/ts has no google.rpc.ErrorInfo schema, and two
    // small messages are simpler to read by hand than to generate.
    if (!("type" in d) || !(d.value instanceof Uint8Array)) {
      continue;
    }
    if (d.type === "google.rpc.ErrorInfo" && reason === undefined) {
      const info = decodeErrorInfo(d.value);
      if (info.domain === ERROR_DOMAIN && info.reason !== "") {
        reason = info.reason as Reason;
        metadata = info.metadata;
      }
    } else if (d.type === "google.rpc.RetryInfo") {
      retryDelayMs = decodeRetryInfo(d.value);
    }
  }
  return new OpledgerError(ce.code, ce.rawMessage, reason, retryDelayMs, metadata, { cause: err });
}

/** decodeErrorInfo reads google.rpc.ErrorInfo { reason = 1; domain = 2; map<string,string>
 * metadata = 3 }. */
export function decodeErrorInfo(bytes: Uint8Array): { reason: string; domain: string; metadata: Record<string, string> } {
  const r = new BinaryReader(bytes);
  let reason = "";
  let domain = "";
  const metadata: Record<string, string> = {};
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      reason = r.string();
    } else if (no === 2 && wt === WireType.LengthDelimited) {
      domain = r.string();
    } else if (no === 3 && wt === WireType.LengthDelimited) {
      const e = new BinaryReader(r.bytes());
      let k = "";
      let v = "";
      while (e.pos < e.len) {
        const [eno, ewt] = e.tag();
        if (eno === 1 && ewt === WireType.LengthDelimited) k = e.string();
        else if (eno === 2 && ewt === WireType.LengthDelimited) v = e.string();
        else e.skip(ewt, eno);
      }
      metadata[k] = v;
    } else {
      r.skip(wt, no);
    }
  }
  return { reason, domain, metadata };
}

/** decodeRetryInfo reads google.rpc.RetryInfo { google.protobuf.Duration retry_delay = 1 } and
 * returns the delay in milliseconds. */
export function decodeRetryInfo(bytes: Uint8Array): number {
  const r = new BinaryReader(bytes);
  let ms = 0;
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      const d = new BinaryReader(r.bytes());
      let seconds = 0;
      let nanos = 0;
      while (d.pos < d.len) {
        const [dno, dwt] = d.tag();
        if (dno === 1 && dwt === WireType.Varint) seconds = Number(d.int64());
        else if (dno === 2 && dwt === WireType.Varint) nanos = d.int32();
        else d.skip(dwt, dno);
      }
      ms = seconds * 1000 + nanos / 1e6;
    } else {
      r.skip(wt, no);
    }
  }
  return ms;
}
