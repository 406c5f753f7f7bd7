package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestExecuteWithAnOutdatedCopy: a replica keeps the operation it prepared
// or approved for the Execute that follows, whose claim then returns only
// what it changes (docs/performance.md, finding 32). When the operation
// changed through another replica in between, that copy is outdated, and
// the Execute must answer exactly as a replica without one: from the row.
func TestExecuteWithAnOutdatedCopy(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	a := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	b := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	requireAnswer := func(t *testing.T, resp *opledgerv1.ExecuteResponse, state opledgerv1.State) {
		t.Helper()
		got, _ := get(t, b.Client, w.agent, resp.GetOperation().GetId())
		require.Equal(t, state, got.GetState())
		require.True(t, proto.Equal(got, resp.GetOperation()), "the answer is not the stored operation:\nanswer %v\nstored %v", resp.GetOperation(), got)
	}

	t.Run("the copy is current", func(t *testing.T) {
		op := prepare(t, a.Client, w.agent, "send_email", emailArgs(t))
		resp, err := execute(a.Client, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		require.False(t, resp.GetReplayed())
		requireAnswer(t, resp, opledgerv1.State_STATE_SUCCEEDED)
	})

	// executedElsewhere executes op through b first, then through a, which
	// holds the copy it wrote.
	executedElsewhere := func(t *testing.T, op *opledgerv1.Operation) {
		_, err := execute(b.Client, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		resp, err := execute(a.Client, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		require.True(t, resp.GetReplayed())
		requireAnswer(t, resp, opledgerv1.State_STATE_SUCCEEDED)
	}
	t.Run("executed through another replica", func(t *testing.T) {
		executedElsewhere(t, prepare(t, a.Client, w.agent, "send_email", emailArgs(t)))
	})
	t.Run("approved here, executed through another replica", func(t *testing.T) {
		executedElsewhere(t, preparedApproved(t, w, a.Client, "pay_invoice"))
	})

	t.Run("cancelled through another replica", func(t *testing.T) {
		op := prepare(t, a.Client, w.agent, "send_email", emailArgs(t))
		_, err := b.Client.Cancel(harness.Ctx(w.operator, ""), &opledgerv1.CancelRequest{OperationId: op.GetId(), Reason: "test"})
		require.NoError(t, err)
		_, errA := execute(a.Client, w.agent, op.GetId(), 0)
		_, errB := execute(b.Client, w.agent, op.GetId(), 0)
		require.Error(t, errA)
		codeA, reasonA := reasonOf(t, errA)
		codeB, reasonB := reasonOf(t, errB)
		require.Equal(t, [2]any{codeB, reasonB}, [2]any{codeA, reasonA}, "the replica with the copy answers as the one without")
	})
}

// TestExecuteWithACopyOutdatedByAReapproval: the claim takes with an
// outdated copy. A approved the operation and holds that copy; the approval
// lapsed, B's Execute expired it and B recorded a new approval; A's Execute
// then claims the operation, whose approval A's copy no longer shows. The
// answer must be the stored operation, with the approval B recorded, not
// the copy's (the store's events check, finding 32).
func TestExecuteWithACopyOutdatedByAReapproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: payOnce(time.Second)})
	a := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	b := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	op := preparedApproved(t, w, a.Client, "pay_once")
	time.Sleep(time.Until(op.GetApproval().GetExpireTime().AsTime()) + 200*time.Millisecond)
	_, err := execute(b.Client, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_EXPIRED")
	renewed := approve(t, b.Client, w.approver, op).GetOperation()
	require.True(t, renewed.GetApproval().GetExpireTime().AsTime().After(op.GetApproval().GetExpireTime().AsTime()))

	resp, err := execute(a.Client, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	got, _ := get(t, b.Client, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.True(t, proto.Equal(got, resp.GetOperation()), "the answer is not the stored operation:\nanswer %v\nstored %v", resp.GetOperation(), got)
	require.True(t, proto.Equal(renewed.GetApproval(), resp.GetOperation().GetApproval()), "the answer shows the approval A's copy held")
}
