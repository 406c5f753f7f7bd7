// client is a small client for opledger.v1.LedgerService over gRPC (HTTP/2), built on Connect.
//
// It adds what every caller otherwise gets wrong on its own: the API key on every call, typed
// errors (errors.ts), and exactly one bounded retry policy that resends the same request with the
// same idempotency key (retry.ts). Results are the generated response messages (gen/ts).

import type { JsonObject } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type * as http2 from "node:http2";
import {
  Decision,
  LedgerService,
  type ApproveResponse,
  type ExecuteResponse,
  type GetResponse,
  type PrepareResponse,
  type ReconcileResponse,
  type CancelResponse,
  type ListOperationsResponse,
  type ListToolsResponse,
  type Resolution,
  type State,
} from "./gen/opledger/v1/ledger_pb";
import { callWithRetry, retryPolicy, type RetryPolicy } from "./retry";

/** DEFAULT_TIMEOUT_MS is the deadline of one attempt. */
export const DEFAULT_TIMEOUT_MS = 30_000;

// Execute with a wait needs a deadline beyond the wait, or the client would give up on an answer
// the server is about to send.
const WAIT_MARGIN_MS = 10_000;

/** ClientOptions configures an OpledgerClient. */
export interface ClientOptions {
  /** target is "host:port", or a URL ("http://host:port", "https://host:port"). */
  target: string;
  /** apiKey is sent as `authorization: Bearer <apiKey>` on every call. */
  apiKey: string;
  /** tls: false (default) for plaintext HTTP/2, true for TLS with the system roots, or Node's
   * TLS session options (ca, cert, key, servername…). Ignored when target is a URL. */
  tls?: boolean | http2.SecureClientSessionOptions;
  /** retry overrides parts of the retry policy (default: 4 attempts, see retry.ts). */
  retry?: Partial<RetryPolicy>;
  /** timeoutMs is the deadline of each attempt (default 30 s). */
  timeoutMs?: number;
  /** transport replaces the gRPC transport (tests); it must not retry on its own. */
  transport?: Transport;
}

/** CallOptions apply to one call. */
export interface CallOptions {
  /** timeoutMs overrides the per-attempt deadline. */
  timeoutMs?: number;
  /** signal aborts the call, and any retry still to come. */
  signal?: AbortSignal;
}

/** DecisionInput is "approve", "deny" or a generated Decision value. */
export type DecisionInput = "approve" | "deny" | Decision;

/** ResolutionInput is a manual Reconcile verdict (operator keys only). */
export type ResolutionInput = Partial<Pick<Resolution, "outcome" | "externalRef" | "note">>;

/** ListOperationsInput selects a page of the tenant's operations. */
export interface ListOperationsInput {
  /** states keeps operations in these states (none: all). */
  states?: State[];
  /** tool keeps one tool's operations (empty: all). */
  tool?: string;
  /** pageSize is the most operations per page (0: the server's default, 50; at most 200). */
  pageSize?: number;
  /** pageToken is the previous page's nextPageToken; send the same states and tool with it. */
  pageToken?: string;
}

/** OpledgerClient calls one opledger server with one API key. */
export class OpledgerClient {
  private readonly rpc: Client<typeof LedgerService>;
  private readonly sessions?: Http2SessionManager;
  private readonly auth: string;
  private readonly policy: RetryPolicy;
  private readonly timeoutMs: number;

  constructor(opts: ClientOptions) {
    if (!opts.apiKey) {
      throw new RangeError("apiKey must not be empty");
    }
    let transport = opts.transport;
    if (!transport) {
      const tls = opts.tls ?? false;
      const baseUrl = /^https?:\/\//.test(opts.target) ? opts.target : `${tls === false ? "http" : "https"}://${opts.target}`;
      const nodeOptions = typeof tls === "object" ? tls : {};
      // An own session manager, so close() can end the HTTP/2 connection.
      this.sessions = new Http2SessionManager(baseUrl, {}, nodeOptions);
      // No retry interceptor: this client is the one retry owner.
      transport = createGrpcTransport({ baseUrl, sessionManager: this.sessions });
    }
    this.rpc = createClient(LedgerService, transport);
    this.auth = "Bearer " + opts.apiKey;
    this.policy = retryPolicy(opts.retry);
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** close ends the client's HTTP/2 connection; calls in flight fail. */
  close(): void {
    this.sessions?.abort();
  }

  private call<T>(
    fn: (o: { headers: Record<string, string>; timeoutMs: number; signal?: AbortSignal }) => Promise<T>,
    extraHeaders: Record<string, string>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<T> {
    const headers = { authorization: this.auth, ...extraHeaders };
    return callWithRetry(this.policy, () => fn({ headers, timeoutMs, signal }), signal);
  }

  /** prepare records a proposed call of tool with args under idempotencyKey (see
   * deriveIdempotencyKey), or returns the operation already recorded under that key with
   * replayed = true. The same key with other args fails with reason IDEMPOTENCY_KEY_REUSED. */
  prepare(
    tool: string,
    args: JsonObject | undefined,
    idempotencyKey: string,
    toolVersion?: string,
    opts: CallOptions = {},
  ): Promise<PrepareResponse> {
    if (!idempotencyKey) {
      return Promise.reject(new RangeError("idempotencyKey must not be empty"));
    }
    const req = { tool, toolVersion: toolVersion ?? "", args };
    return this.call((o) => this.rpc.prepare(req, o), { "idempotency-key": idempotencyKey }, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** approve records an approver's decision on the operation whose fingerprint the approver was
   * shown. */
  approve(
    operationId: string,
    fingerprint: string,
    decision: DecisionInput,
    reason = "",
    opts: CallOptions = {},
  ): Promise<ApproveResponse> {
    const d = decision === "approve" ? Decision.APPROVE : decision === "deny" ? Decision.DENY : decision;
    const req = { operationId, fingerprint, decision: d, reason };
    return this.call((o) => this.rpc.approve(req, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** execute performs the operation's effect at most once; a repeat returns the stored outcome
   * with replayed = true. waitMs is how long to wait when another caller is executing it. Check
   * operation.state: SUCCEEDED, FAILED, OUTCOME_UNKNOWN (reconcile, never re-execute) or
   * EXECUTING (still pending). */
  execute(operationId: string, waitMs?: number, opts: CallOptions = {}): Promise<ExecuteResponse> {
    const req = { operationId, wait: waitMs === undefined ? undefined : durationFromMs(waitMs) };
    const t = Math.max(opts.timeoutMs ?? this.timeoutMs, (waitMs ?? 0) + WAIT_MARGIN_MS);
    return this.call((o) => this.rpc.execute(req, o), {}, t, opts.signal);
  }

  /** get returns the operation and, with includeEvents, its event log. */
  get(operationId: string, includeEvents = false, opts: CallOptions = {}): Promise<GetResponse> {
    const req = { operationId, includeEvents };
    return this.call((o) => this.rpc.get(req, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** reconcile resolves an OUTCOME_UNKNOWN (or abandoned EXECUTING) operation by looking the
   * downstream up; an operator key may pass a manual resolution. */
  reconcile(operationId: string, resolution?: ResolutionInput, opts: CallOptions = {}): Promise<ReconcileResponse> {
    const req = { operationId, resolution };
    return this.call((o) => this.rpc.reconcile(req, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** cancel withdraws an operation nobody has executed yet (AWAITING_APPROVAL or READY);
   * repeating it returns replayed = true. */
  cancel(operationId: string, reason = "", opts: CallOptions = {}): Promise<CancelResponse> {
    const req = { operationId, reason };
    return this.call((o) => this.rpc.cancel(req, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** listTools returns the tools the server is configured with (every version; `current` marks
   * the one prepare uses without a version), with their descriptions, effects, approval policies
   * and argument JSON Schemas. */
  listTools(opts: CallOptions = {}): Promise<ListToolsResponse> {
    return this.call((o) => this.rpc.listTools({}, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** listOperations returns one page of the tenant's operations, newest first; nextPageToken is
   * empty on the last page. */
  listOperations(req: ListOperationsInput = {}, opts: CallOptions = {}): Promise<ListOperationsResponse> {
    const r = { states: req.states ?? [], tool: req.tool ?? "", pageSize: req.pageSize ?? 0, pageToken: req.pageToken ?? "" };
    return this.call((o) => this.rpc.listOperations(r, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }
}
