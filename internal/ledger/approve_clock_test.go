package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// TestApproveJudgesLapseWhenItDecides: an Approve that began before the
// approval's end but waited on the operation's row lock until after it must
// judge the lapse when it decides, not when its transaction began (now() in
// PostgreSQL): it renews the lapsed approval, instead of answering "approved,
// replayed" with an expiry already past, which the agent's Execute then
// refuses as APPROVAL_EXPIRED.
func TestApproveJudgesLapseWhenItDecides(t *testing.T) {
	t.Parallel()
	w, c, op, expires, unlock := approvedAndLocked(t, "INV-LOCK")
	// The second Approve begins 400 ms before the approval's end and waits
	// on the lock until 400 ms after it.
	time.Sleep(time.Until(expires.Add(-400 * time.Millisecond)))
	type answer struct {
		resp *opledgerv1.ApproveResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		done <- answer{r, err}
	}()
	time.Sleep(time.Until(expires.Add(400 * time.Millisecond)))
	unlock()
	a := <-done
	require.NoError(t, a.err)
	require.True(t, a.resp.GetOperation().GetApproval().GetExpireTime().AsTime().After(expires),
		"the lapsed approval is renewed (replayed=%v)", a.resp.GetReplayed())
	_, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err, "the approver was just told the operation is approved")
}

// TestApprovedEventIsStampedWhenDecided: an Approve that waited for the row
// lock records its APPROVED event at the time it decided (the approval's
// decide_time, from which its end is counted), not when its transaction
// began: the event log is what an auditor, and the chaos checker, judge
// the approval's window by.
func TestApprovedEventIsStampedWhenDecided(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_brief",
		ApprovalTTL: time.Minute, DedupesKeys: true, Lookup: true})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "pay_brief", payArgs(t, "INV-STAMP"))
	unlock := lockRow(t, w.env.Store, op.GetId())
	done := make(chan error, 1)
	go func() {
		_, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		done <- err
	}()
	// The Approve waits on the lock for as long as it is held: a second
	// (the staging, as in the test above, not a wait for a condition).
	time.Sleep(time.Second)
	unlock()
	require.NoError(t, <-done)
	got, events := get(t, c, w.agent, op.GetId())
	decided := got.GetApproval().GetDecideTime().AsTime()
	var approved *opledgerv1.OperationEvent
	for _, e := range events {
		if e.GetType() == opledgerv1.EventType_EVENT_TYPE_APPROVED {
			approved = e
		}
	}
	require.NotNil(t, approved)
	require.Equal(t, decided, approved.GetCreateTime().AsTime(), "the APPROVED event is the decision's time")
}

// decisions records the approval latencies the ledger reports.
type decisions struct{ seen []time.Duration }

func (*decisions) ExecutionStarted(string)                        {}
func (*decisions) DuplicatePrevented(string, string, bool)        {}
func (*decisions) DownstreamCalled(string, string, time.Duration) {}
func (*decisions) Reconciled(string, string)                      {}
func (d *decisions) Decided(_, _ string, took time.Duration)      { d.seen = append(d.seen, took) }
func (*decisions) LimitUsed(string)                               {}
func (*decisions) LimitRefused(string)                            {}

// TestDecisionLatencyOnTheDatabasesClock: how long an operation waited for
// its decision is measured between two of the database's timestamps, not
// from one of them to this replica's clock, which may be off by minutes.
func TestDecisionLatencyOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, -90*time.Second)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	rec := &decisions{}
	srv.Ledger.SetObserver(rec)
	op := prepare(t, srv.Client, w.agent, "pay_invoice", payArgs(t, "INV-LAT"))
	approve(t, srv.Client, w.approver, op)
	require.Len(t, rec.seen, 1)
	require.GreaterOrEqual(t, rec.seen[0], time.Duration(0))
	require.Less(t, rec.seen[0], 30*time.Second, "a decision taken at once")
}
