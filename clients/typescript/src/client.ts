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
  /** target is "host:port", or a URL ("https://host:port"; "http://host:port" needs plaintext). */
  target: string;
  /** apiKey is sent as `authorization: Bearer <apiKey>` on every call. */
  apiKey: string;
  /** plaintext: true sends calls over HTTP/2 without TLS, for a server on loopback or behind a
   * TLS-terminating proxy. The default is TLS, as in every opledger client. */
  plaintext?: boolean;
  /** tls is Node's TLS session options (ca, cert, key, servername…); the default is the system
   * roots. Not with plaintext. */
  tls?: http2.SecureClientSessionOptions;
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

/** PrepareOptions are Prepare's named arguments. */
export interface PrepareOptions extends CallOptions {
  /** idempotencyKey is the operation's business identity (see deriveKey); required. */
  idempotencyKey: string;
  /** toolVersion pins the tool version; by default the server uses the tool's current one. */
  toolVersion?: string;
  /** execute also executes the operation in the same call, as an execute right after it would
   * (the one-call path for tools that need no approval): the answer is the operation as the
   * execution left it, and executionReplayed says that no downstream request was made. An
   * operation that awaits approval comes back as without execute (no error). */
  execute?: boolean;
  /** waitMs, with execute: how long to wait when another caller is executing it. */
  waitMs?: number;
}

/** ExecuteOptions are Execute's named arguments. */
export interface ExecuteOptions extends CallOptions {
  /** waitMs is how long to wait for the outcome when another caller is executing it (the server
   * caps it). */
  waitMs?: number;
}

/** GetOptions are Get's named arguments. */
export interface GetOptions extends CallOptions {
  /** includeEvents asks for the operation's event log too. */
  includeEvents?: boolean;
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

/** OpledgerClient calls one opledger server with one API key. withApiKey adds principals (an
 * approver, say) on the same HTTP/2 connection. */
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
      const baseUrl = baseUrlOf(opts);
      // An own session manager, so close() can end the HTTP/2 connection.
      this.sessions = new Http2SessionManager(baseUrl, {}, opts.tls ?? {});
      // No retry interceptor: this client is the one retry owner.
      transport = createGrpcTransport({ baseUrl, sessionManager: this.sessions });
    }
    this.rpc = createClient(LedgerService, transport);
    this.auth = "Bearer " + opts.apiKey;
    this.policy = retryPolicy(opts.retry);
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** withApiKey returns a client for another principal on this client's connection, retry policy
   * and timeout. Its close() leaves the connection open; close this client. */
  withApiKey(apiKey: string): OpledgerClient {
    if (!apiKey) {
      throw new RangeError("apiKey must not be empty");
    }
    const other = Object.create(OpledgerClient.prototype) as OpledgerClient;
    Object.assign(other, { rpc: this.rpc, sessions: undefined, auth: "Bearer " + apiKey, policy: this.policy, timeoutMs: this.timeoutMs });
    return other;
  }

  /** close ends the client's HTTP/2 connection (not for a client from withApiKey); calls in
   * flight fail. */
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

  /** prepare records a proposed call of tool with args under opts.idempotencyKey (see
   * deriveKey), or returns the operation already recorded under that key with replayed = true.
   * The same key with other args fails with reason IDEMPOTENCY_KEY_REUSED. */
  prepare(tool: string, args: JsonObject | undefined, opts: PrepareOptions): Promise<PrepareResponse> {
    if (!opts?.idempotencyKey) {
      return Promise.reject(new RangeError("idempotencyKey must not be empty"));
    }
    const waitMs = opts.waitMs;
    const req = {
      tool,
      toolVersion: opts.toolVersion ?? "",
      args,
      execute: opts.execute ?? false,
      wait: waitMs === undefined ? undefined : durationFromMs(waitMs),
    };
    const headers = { "idempotency-key": opts.idempotencyKey };
    const t = opts.execute ? Math.max(opts.timeoutMs ?? this.timeoutMs, (waitMs ?? 0) + WAIT_MARGIN_MS) : (opts.timeoutMs ?? this.timeoutMs);
    return this.call((o) => this.rpc.prepare(req, o), headers, t, opts.signal);
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

  /** approveEdited approves the operation "the same, but with these arguments" (approve-with-edit,
   * docs/policy.md): editedArgs may differ from the operation's only in the fields its tool's policy
   * lists as editable. The ledger records a new operation with them, which this approval approves
   * (it may still need another approver) and the policy judges again, and rejects the original
   * (Operation.supersededBy): the answer's edited is the new one, its operation the original.
   * fingerprint is the original's, as the approver was shown it. The same edit again is replayed;
   * another edit of the same operation is APPROVAL_CONFLICT. */
  approveEdited(
    operationId: string,
    fingerprint: string,
    editedArgs: JsonObject,
    reason = "",
    opts: CallOptions = {},
  ): Promise<ApproveResponse> {
    const req = { operationId, fingerprint, decision: Decision.APPROVE, reason, editedArgs };
    return this.call((o) => this.rpc.approve(req, o), {}, opts.timeoutMs ?? this.timeoutMs, opts.signal);
  }

  /** execute performs the operation's effect at most once; a repeat returns the stored outcome
   * with replayed = true. Check
   * operation.state: SUCCEEDED, FAILED, OUTCOME_UNKNOWN (reconcile, never re-execute) or
   * EXECUTING (still pending). opts.waitMs: see ExecuteOptions. */
  execute(operationId: string, opts: ExecuteOptions = {}): Promise<ExecuteResponse> {
    const waitMs = opts.waitMs;
    const req = { operationId, wait: waitMs === undefined ? undefined : durationFromMs(waitMs) };
    const t = Math.max(opts.timeoutMs ?? this.timeoutMs, (waitMs ?? 0) + WAIT_MARGIN_MS);
    return this.call((o) => this.rpc.execute(req, o), {}, t, opts.signal);
  }

  /** get returns the operation and, with opts.includeEvents, its event log. */
  get(operationId: string, opts: GetOptions = {}): Promise<GetResponse> {
    const req = { operationId, includeEvents: opts.includeEvents ?? false };
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

/** baseUrlOf resolves the target and the TLS choice: TLS unless plaintext is asked for, and a URL
 * scheme that contradicts that choice is an error rather than a silent downgrade. */
function baseUrlOf(opts: ClientOptions): string {
  const plaintext = opts.plaintext ?? false;
  if (plaintext && opts.tls) {
    throw new RangeError("plaintext and tls exclude each other");
  }
  const m = /^(https?):\/\//.exec(opts.target);
  if (!m) {
    return `${plaintext ? "http" : "https"}://${opts.target}`;
  }
  if ((m[1] === "http") !== plaintext) {
    throw new RangeError(`target ${opts.target}: ${plaintext ? "plaintext needs an http:// URL" : "an http:// URL needs plaintext: true"}`);
  }
  return opts.target;
}
