package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

func TestApproveDecisions(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client

	t.Run("execute before approval", func(t *testing.T) {
		op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-1"))
		_, err := execute(c, w.agent, op.GetId(), 0)
		requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_REQUIRED")
		got, _ := get(t, c, w.agent, op.GetId())
		require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState())
	})

	t.Run("agent cannot approve", func(t *testing.T) {
		op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-2"))
		other := w.env.Key("acme", "agent")
		_, err := decide(c, other, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		requireStatus(t, err, codes.PermissionDenied, "ROLE_REQUIRED")
	})

	t.Run("another tenant's approver sees nothing", func(t *testing.T) {
		op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-3"))
		stranger := w.env.Key("globex", "approver")
		_, err := decide(c, stranger, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		requireStatus(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	})

	t.Run("approve is idempotent, deny after it conflicts", func(t *testing.T) {
		op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-4"))
		first := approve(t, c, w.approver, op)
		require.False(t, first.GetReplayed())
		second := approve(t, c, w.approver, op)
		require.True(t, second.GetReplayed())
		require.Equal(t, opledgerv1.State_STATE_READY, second.GetOperation().GetState())
		require.Equal(t, first.GetOperation().GetApproval().GetExpireTime().AsTime(),
			second.GetOperation().GetApproval().GetExpireTime().AsTime())
		_, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
		requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_CONFLICT")
		_, evs := get(t, c, w.agent, op.GetId())
		require.Len(t, evs, 2, "the replay and the conflict append nothing")

		resp, err := execute(c, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
		// Approving an executed operation is still the same decision.
		after := approve(t, c, w.approver, op)
		require.True(t, after.GetReplayed())
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, after.GetOperation().GetState())
	})

	t.Run("deny rejects for good", func(t *testing.T) {
		op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-5"))
		denied, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
		require.NoError(t, err)
		require.False(t, denied.GetReplayed())
		require.Equal(t, opledgerv1.State_STATE_REJECTED, denied.GetOperation().GetState())
		require.Equal(t, opledgerv1.Decision_DECISION_DENY, denied.GetOperation().GetApproval().GetDecision())

		_, err = execute(c, w.agent, op.GetId(), 0)
		requireStatus(t, err, codes.FailedPrecondition, "OPERATION_REJECTED")
		_, err = decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_CONFLICT")
		again, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
		require.NoError(t, err)
		require.True(t, again.GetReplayed())

		got, evs := get(t, c, w.agent, op.GetId())
		require.Equal(t, opledgerv1.State_STATE_REJECTED, got.GetState())
		require.Equal(t, []opledgerv1.EventType{opledgerv1.EventType_EVENT_TYPE_PREPARED, opledgerv1.EventType_EVENT_TYPE_DENIED}, eventTypes(evs))
	})

	t.Run("a tool without approval refuses decisions", func(t *testing.T) {
		op := prepare(t, c, w.agent, "send_email", emailArgs(t))
		require.Equal(t, opledgerv1.State_STATE_READY, op.GetState())
		_, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_NOT_APPLICABLE")
	})

	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestApprovalExpiryGuard: an Execute that read a lapsed approval expires it
// with a statement guarded on the approval still being lapsed, so a renewal
// an approver committed in between survives. The interleaving is staged by
// issuing the expiry directly against an approval that is in force.
func TestApprovalExpiryGuard(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_invoice")

	_, err := w.env.Store.OperationDecide(context.Background(), store.Decision{Tenant: "acme", ID: op.GetId(),
		From: []string{string(ledger.StateReady)}, To: string(ledger.StateAwaitingApproval),
		Event: string(ledger.EventApprovalExpired), Actor: "test", Detail: "stale expiry", RequireLapsedUnsent: true})
	require.ErrorIs(t, err, store.ErrConditionFailed)

	got, evs := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, got.GetState())
	require.Equal(t, opledgerv1.Decision_DECISION_APPROVE, got.GetApproval().GetDecision())
	require.Len(t, evs, 2)
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
}
