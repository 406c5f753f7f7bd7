package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestCancel: an operation nobody executed can be cancelled (and Execute
// then refuses it, sending nothing); repeating is replayed; an executed one
// cannot be cancelled.
func TestCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-C1"))

	r, err := c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId(), Reason: "customer changed their mind"})
	require.NoError(t, err)
	require.False(t, r.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_CANCELLED, r.GetOperation().GetState())
	again, err := c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.True(t, again.GetReplayed())

	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_CANCELLED")
	_, err = decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_CANCELLED")
	_, evs := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_CANCELLED, evs[len(evs)-1].GetType())
	require.Empty(t, w.env.Fakepay.Charges())

	done := preparedApproved(t, w, c, "pay_invoice")
	_, err = execute(c, w.agent, done.GetId(), 0)
	require.NoError(t, err)
	_, err = c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: done.GetId()})
	requireStatus(t, err, codes.FailedPrecondition, "CANCEL_NOT_APPLICABLE")
	_, err = c.Cancel(harness.Ctx(w.approver, ""), &opledgerv1.CancelRequest{OperationId: done.GetId()})
	requireStatus(t, err, codes.PermissionDenied, "ROLE_REQUIRED")
}
