package ledger_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// refusingTransport refuses every connection: nothing is ever written.
type refusingTransport struct{}

func (refusingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("dial tcp: connect: connection refused")
}

// TestTakeoverThatSendsNothingIsUnknown: server A's request charged, then A
// stalled past its lease; B took the operation over and could not reach the
// downstream. B's attempt sent nothing, but A's did: the operation is
// OUTCOME_UNKNOWN (for the reconciler to look up), never READY, and B's
// caller is not told that nothing was sent.
func TestTakeoverThatSendsNothingIsUnknown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	blk := newBlocker()
	a := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true,
		Hooks: &ledger.Hooks{AfterDownstream: blk.hook}}).Client
	b := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true,
		HTTPClient: &http.Client{Transport: refusingTransport{}}}).Client
	op := preparedApproved(t, w, a, "pay_fast")

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = execute(a, w.agent, op.GetId(), 0)
	}()
	blk.waitArrived(t, done)
	require.Len(t, w.env.Fakepay.Charges(), 1, "A's request charged")
	untilLeaseExpired(t, a, w.agent, op.GetId())

	r, err := execute(b, w.agent, op.GetId(), 0)
	if err != nil {
		code, reason := reasonOf(t, err)
		require.NotEqual(t, codes.Unavailable, code, "the caller is told nothing was sent, but a charge exists: %s %v", reason, err)
	}
	got, evs := get(t, b, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, got.GetState(), "events %v", eventTypes(evs))
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, r.GetOperation().GetState())
	close(blk.release)
	<-done
	require.Len(t, w.env.Fakepay.Charges(), 1)
}
