package ledger_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// stallThenRefuse holds the first request in "connecting" until released,
// then fails it as a refused connection (no byte written); later requests
// go through.
type stallThenRefuse struct {
	once              sync.Once
	arrived, released chan struct{}
}

func (s *stallThenRefuse) RoundTrip(req *http.Request) (*http.Response, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.arrived)
		<-s.released
		return nil, errors.New("dial tcp: connect: connection refused")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestDecisionDuringUnsentAttemptPastTheApproval: an Execute claimed the
// operation inside its approval, but its first request is still connecting
// when the approval ends, so it sends nothing (the approval bounds the
// first send) and the operation goes back to AWAITING_APPROVAL. An approver
// who approved in that window was told "approved" (replayed), with an
// approval that had lapsed, and the agent was then refused
// APPROVAL_EXPIRED; one who denied was told the opposite decision stood.
// While such an attempt holds the operation, a decision is refused as in
// progress (judged on the database's clock under the row lock), and once
// the attempt ends, the approver's retry renews it.
func TestDecisionDuringUnsentAttemptPastTheApproval(t *testing.T) {
	t.Parallel()
	for _, d := range []opledgerv1.Decision{opledgerv1.Decision_DECISION_APPROVE, opledgerv1.Decision_DECISION_DENY} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_stall",
				ApprovalTTL: 2 * time.Second, DedupesKeys: true, Lookup: true, MaxAttempts: 1})})
			tr := &stallThenRefuse{arrived: make(chan struct{}), released: make(chan struct{})}
			release := sync.OnceFunc(func() { close(tr.released) })
			t.Cleanup(release) // a failed check must not leave the request held
			c := w.env.StartServer(harness.ServerOptions{NoReconciler: true, HTTPClient: &http.Client{Transport: tr}}).Client
			op := prepare(t, c, w.agent, "pay_stall", payArgs(t, "INV-STALL"))
			expires := approve(t, c, w.approver, op).GetOperation().GetApproval().GetExpireTime().AsTime()

			done := make(chan error, 1)
			go func() { _, err := execute(c, w.agent, op.GetId(), 0); done <- err }()
			select {
			case <-tr.arrived: // claimed inside the approval; the request is connecting
			case <-time.After(30 * time.Second):
				t.Fatal("the request never started")
			}
			time.Sleep(time.Until(expires.Add(300 * time.Millisecond))) // the approval's end, a time rule

			_, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), d)
			requireStatus(t, err, codes.Aborted, "OPERATION_IN_PROGRESS")
			release()
			requireStatus(t, <-done, codes.FailedPrecondition, "APPROVAL_EXPIRED")

			resp, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), d)
			require.NoError(t, err, "once the attempt ended, the decision applies")
			require.False(t, resp.GetReplayed())
			if d == opledgerv1.Decision_DECISION_DENY {
				require.Equal(t, opledgerv1.State_STATE_REJECTED, resp.GetOperation().GetState())
				require.Empty(t, w.env.Fakepay.Charges())
				return
			}
			r, err := execute(c, w.agent, op.GetId(), 0)
			require.NoError(t, err)
			require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, r.GetOperation().GetState())
			require.Len(t, w.env.Fakepay.Charges(), 1)
		})
	}
}
