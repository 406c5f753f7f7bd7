package dev.opledger.client;

import java.time.Duration;
import java.util.random.RandomGenerator;

/**
 * RetryPolicy bounds the client's retries. The client is the only retry owner: its channel is
 * built with {@code disableRetry()}, so grpc-java never repeats a call behind it, and there is no
 * hedging.
 *
 * <p>A call is retried only after UNAVAILABLE (any method) or ABORTED carrying a {@code
 * google.rpc.RetryInfo}, always with the same request and the same idempotency key, so a retry can
 * only replay, never duplicate. Before attempt n+1 the client sleeps a random duration in [0,
 * min(maxDelay, baseDelay·2^(n-1))] ("full jitter"), but never less than the server's RetryInfo
 * delay, and never past the call's deadline (it then throws the last error at once).
 *
 * <p>With the defaults (4 attempts, 100 ms, 2 s) a call makes at most 4 attempts and sleeps at most
 * 100 + 200 + 400 = 700 ms in total, unless the server asks for longer through RetryInfo.
 *
 * @param maxAttempts total attempts, the first included; 1 disables retries
 * @param baseDelay the backoff ceiling before the second attempt, doubled for each further one
 * @param maxDelay the cap of the backoff ceiling (a longer RetryInfo delay is still honoured)
 */
public record RetryPolicy(int maxAttempts, Duration baseDelay, Duration maxDelay) {
  /** The policy validates its bounds. */
  public RetryPolicy {
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("maxAttempts must be at least 1");
    }
    if (baseDelay.isNegative() || maxDelay.isNegative()) {
      throw new IllegalArgumentException("delays must not be negative");
    }
  }

  /** Defaults returns 4 attempts, base 100 ms, cap 2 s. */
  public static RetryPolicy defaults() {
    return new RetryPolicy(4, Duration.ofMillis(100), Duration.ofSeconds(2));
  }

  /** NoRetries returns a policy of a single attempt. */
  public static RetryPolicy noRetries() {
    return new RetryPolicy(1, Duration.ZERO, Duration.ZERO);
  }

  /** Backoff returns the sleep before attempt n+1 after attempt n (n ≥ 1) failed. */
  Duration backoff(int n, Duration floor, RandomGenerator random) {
    long ceiling = baseDelay.toNanos();
    long cap = maxDelay.toNanos();
    for (int i = 1; i < n && ceiling < cap; i++) {
      ceiling *= 2;
    }
    ceiling = Math.min(ceiling, cap);
    long jitter = ceiling <= 0 ? 0 : random.nextLong(ceiling + 1);
    return Duration.ofNanos(Math.max(jitter, floor.toNanos()));
  }
}
