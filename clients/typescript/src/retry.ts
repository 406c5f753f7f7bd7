// retry is the client's one retry owner.
//
// Only two failures are retried, always with the very same request and the same idempotency key:
// UNAVAILABLE on any method, and ABORTED with a RetryInfo (a concurrent duplicate holds the
// operation). Everything else is final for that request. Attempts are bounded (4 by default) and
// separated by exponential backoff with full jitter: before retry n (n = 1, 2, …) the client
// sleeps random(0, min(maxDelayMs, baseDelayMs * 2^(n-1))), and never less than the server's
// RetryInfo delay. The Connect transport has no retry interceptor, so attempts never multiply
// across layers; nothing is hedged.
//
// With the defaults the worst case is 4 attempts and at most 100 + 200 + 400 = 700 ms of sleep
// (plus any RetryInfo floors), on top of 4 × the per-attempt timeout.

import { Code, ConnectError } from "@connectrpc/connect";
import { OpledgerError, toOpledgerError } from "./errors";

/** RetryPolicy bounds the client's retries. */
export interface RetryPolicy {
  /** maxAttempts counts every attempt, the first included (1 disables retries). Default 4. */
  maxAttempts: number;
  /** baseDelayMs is the backoff ceiling before the first retry. Default 100. */
  baseDelayMs: number;
  /** maxDelayMs is the ceiling the backoff doubles up to. Default 2000. */
  maxDelayMs: number;
  /** sleep waits (tests replace it); it rejects when signal aborts. */
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** random returns a number in [0, 1) (tests replace it). */
  random: () => number;
}

/** sleep waits ms milliseconds, or rejects as soon as signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** DEFAULT_RETRY is the policy used when none is given. */
export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 4,
  baseDelayMs: 100,
  maxDelayMs: 2000,
  sleep,
  random: Math.random,
});

/** NO_RETRY makes exactly one attempt. */
export const NO_RETRY: Readonly<RetryPolicy> = Object.freeze({ ...DEFAULT_RETRY, maxAttempts: 1 });

/** retryPolicy completes a partial policy with the defaults and checks it. */
export function retryPolicy(p: Partial<RetryPolicy> = {}): RetryPolicy {
  const policy = { ...DEFAULT_RETRY, ...p };
  if (!Number.isInteger(policy.maxAttempts) || policy.maxAttempts < 1) {
    throw new RangeError("maxAttempts must be an integer >= 1");
  }
  if (policy.baseDelayMs < 0 || policy.maxDelayMs < 0) {
    throw new RangeError("delays must not be negative");
  }
  return policy;
}

/** backoffMs returns the delay before retry number `retry` (1 for the first retry): full jitter
 * under an exponentially growing, capped ceiling, at least floorMs. */
export function backoffMs(policy: RetryPolicy, retry: number, floorMs?: number): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1));
  const d = policy.random() * ceiling;
  return floorMs !== undefined && floorMs > d ? floorMs : d;
}

/** callWithRetry runs attempt until it resolves, fails finally, or the attempts run out. Every
 * attempt must send the same request (and the same idempotency key). Errors come out as
 * OpledgerError; an abort during the backoff too (code Canceled, as an abort during an attempt
 * gives through Connect; the signal's reason is its cause). */
export async function callWithRetry<T>(
  policy: RetryPolicy,
  attempt: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  for (let n = 1; ; n++) {
    let err: OpledgerError;
    try {
      return await attempt();
    } catch (e) {
      err = toOpledgerError(e);
    }
    if (n >= policy.maxAttempts || !err.retryable || signal?.aborted) {
      throw err;
    }
    try {
      await policy.sleep(backoffMs(policy, n, err.retryDelayMs), signal);
    } catch (e) {
      throw signal?.aborted ? abortError(signal) : toOpledgerError(e);
    }
  }
}

/** abortError is the OpledgerError for a signal that aborted between attempts: what Connect
 * gives for an abort during one (ConnectError.from(reason, Canceled): Canceled, unless the reason
 * is a ConnectError with its own code), with the reason itself as cause. */
function abortError(signal: AbortSignal): OpledgerError {
  const reason: unknown = signal.reason;
  if (reason instanceof OpledgerError) {
    return reason;
  }
  const ce = ConnectError.from(reason, Code.Canceled);
  return new OpledgerError(ce.code, ce.rawMessage, undefined, undefined, {}, { cause: reason });
}
