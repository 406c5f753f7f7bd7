package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds the client's retries. The client is the only retry owner
// on its connection: grpc-go's own retries are disabled (grpc.WithDisableRetry)
// so a call is never repeated behind the policy's back, and there is no
// hedging.
//
// A call is retried only when it failed with UNAVAILABLE (any method) or with
// ABORTED carrying a google.rpc.RetryInfo, and always with the same request
// and the same idempotency key, so a retry can only replay, never duplicate.
// Before attempt n+1 the client sleeps a random duration in
// [0, min(MaxDelay, BaseDelay·2^(n-1))] ("full jitter"), but never less than
// the server's RetryInfo delay. It does not sleep past the context's deadline:
// when the wait would end after it, the last error is returned at once.
//
// With the defaults (4 attempts, 100 ms, 2 s) a call makes at most 4 attempts
// and sleeps at most 100 + 200 + 400 = 700 ms in total, unless the server
// asks for longer through RetryInfo.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts, the first included.
	// 0 means 4; 1 disables retries.
	MaxAttempts int
	// BaseDelay is the backoff ceiling before the second attempt, doubled
	// for each further one. 0 means 100 ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff ceiling. 0 means 2 s. A RetryInfo delay
	// longer than MaxDelay is still honoured.
	MaxDelay time.Duration
}

// DefaultRetryPolicy returns the policy used when none is given: 4 attempts,
// base 100 ms, cap 2 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	return p
}

// backoff is the sleep before attempt n+1 after attempt n (n ≥ 1) failed;
// randN returns a uniform value in [0, n).
func (p RetryPolicy) backoff(n int, floor time.Duration, randN func(int64) int64) time.Duration {
	ceiling := p.BaseDelay
	for i := 1; i < n && ceiling < p.MaxDelay; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.MaxDelay)
	return max(time.Duration(randN(int64(ceiling)+1)), floor)
}

// retry runs call until it succeeds, fails with a non-retryable error, or
// the attempts are spent. call must send the same request every time.
func (p RetryPolicy) retry(ctx context.Context, call func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := call(ctx)
		if err == nil {
			return nil
		}
		e := toError(err)
		if attempt >= p.MaxAttempts || !e.Retryable() {
			return e
		}
		wait := p.backoff(attempt, e.RetryDelay, rand.Int64N)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			return e
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return e
		case <-t.C:
		}
	}
}
