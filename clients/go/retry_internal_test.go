package client

import (
	"testing"
	"time"

	"github.com/opledger/opledger/clients/go/internal/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

func TestBackoffIsFullJitterCappedWithRetryInfoFloor(t *testing.T) {
	t.Parallel()
	p := DefaultRetryPolicy()
	top := func(n int64) int64 { return n - 1 } // the largest value rand may return
	zero := func(int64) int64 { return 0 }
	require.Equal(t, 100*time.Millisecond, p.backoff(1, 0, top))
	require.Equal(t, 200*time.Millisecond, p.backoff(2, 0, top))
	require.Equal(t, 400*time.Millisecond, p.backoff(3, 0, top))
	require.Equal(t, 2*time.Second, p.backoff(10, 0, top), "capped")
	require.Equal(t, 2*time.Second, p.backoff(1000, 0, top), "no overflow")
	require.Equal(t, time.Duration(0), p.backoff(3, 0, zero), "full jitter reaches 0")
	require.Equal(t, 750*time.Millisecond, p.backoff(1, 750*time.Millisecond, zero), "RetryInfo is a floor")
	require.Equal(t, 5*time.Second, p.backoff(1, 5*time.Second, top), "a floor above the cap wins")
}

func TestRetryPolicyDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, DefaultRetryPolicy(), RetryPolicy{}.withDefaults())
	require.Equal(t, 1, RetryPolicy{MaxAttempts: 1}.withDefaults().MaxAttempts)
}

func TestReasonEnumRoundTrip(t *testing.T) {
	t.Parallel()
	for e := range opledgerv1.ErrorReason_name {
		r := ReasonFromEnum(opledgerv1.ErrorReason(e))
		if e == 0 {
			require.Empty(t, r)
			continue
		}
		require.Equal(t, opledgerv1.ErrorReason(e), r.Enum(), r)
	}
	require.Equal(t, opledgerv1.ErrorReason_ERROR_REASON_UNSPECIFIED, Reason("NOT_A_REASON").Enum())
}
