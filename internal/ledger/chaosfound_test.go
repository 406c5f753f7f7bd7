package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// TestResubmissionAfterKeyRetention (found by the chaos suite): a lookup
// miss made the operation READY while the downstream still remembered the
// key, but the next Execute came after the key retention. The miss was
// wrong (the first request had landed; here the lookup lags, in life the
// request was still on its way), so resubmitting a key the downstream has
// forgotten would charge twice. A resubmission must itself happen inside
// the retention window; past it the operation becomes OUTCOME_UNKNOWN.
func TestResubmissionAfterKeyRetention(t *testing.T) {
	t.Parallel()
	const retention = time.Second
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_once",
		ApprovalTTL: 15 * time.Minute, MaxAttempts: 1, DedupesKeys: true, Lookup: true, KeyRetention: retention})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}, LookupLag: time.Hour, KeyRetention: retention})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)

	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, rec.GetOperation().GetState(), rec.GetDetail())

	time.Sleep(retention + retention/5) // the agent comes back late
	again, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Len(t, w.env.Fakepay.Charges(), 1, "never a second charge")
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, again.GetOperation().GetState())
}

// TestApprovalLapsesAfterAMissedEffect (found by the chaos suite's long
// run): an approved operation was sent, its outcome was unknown, and a
// lookup miss that raced the request made it READY again. Its approval then
// lapsed. The ledger sent it back to AWAITING_APPROVAL, where an approver
// could deny it: REJECTED, with the customer charged (Cancel had the same
// hole: CANCELLED, charged). An approval is consumed by the first claim:
// from then on the ledger owes an outcome, and the next Execute resubmits
// the same key, which the downstream replays.
func TestApprovalLapsesAfterAMissedEffect(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_once",
		ApprovalTTL: ttl, MaxAttempts: 1, DedupesKeys: true, Lookup: true})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}, LookupLag: time.Hour})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, rec.GetOperation().GetState(), rec.GetDetail())

	time.Sleep(ttl + ttl/5) // the approval lapses
	_, err = decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_CONFLICT")
	_, err = c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId()})
	requireStatus(t, err, codes.FailedPrecondition, "CANCEL_NOT_APPLICABLE")

	again, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1, "the resubmission replays the first charge")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, again.GetOperation().GetState())
	require.Equal(t, charges[0].ID, again.GetOperation().GetExternalRef())
}
