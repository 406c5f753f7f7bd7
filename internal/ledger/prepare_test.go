package ledger_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// TestPrepareWhosePrunedOperationVanishes: a Prepare replayed at its
// operation's retention age had its insert refused by the finished
// operation, which the pruner then deleted before the Prepare read it. The
// key was free again, but the Prepare answered an error (the operation it
// had just collided with was not found). A key reused after its operation
// was pruned starts a new operation, so that is the answer.
func TestPrepareWhosePrunedOperationVanishes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	var conflicts, pruned atomic.Int64
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{
		PrepareConflict: func(ctx context.Context) {
			if conflicts.Add(1) == 1 {
				n, err := w.env.Store.OperationPrune(ctx, 0, 100)
				if err == nil {
					pruned.Add(n)
				}
			}
		}}}).Client
	idem := harness.Unique("pruned")
	args := payArgs(t, idem)
	first, err := c.Prepare(harness.Ctx(w.agent, idem), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
	require.NoError(t, err)
	_, err = c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: first.GetOperation().GetId()})
	require.NoError(t, err)

	again, err := c.Prepare(harness.Ctx(w.agent, idem), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned.Load(), "the pruner deleted the finished operation between the insert and the read")
	require.False(t, again.GetReplayed())
	require.NotEqual(t, first.GetOperation().GetId(), again.GetOperation().GetId(), "a new operation under the freed key")
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, again.GetOperation().GetState())

	// And the key now names the new operation.
	replay, err := c.Prepare(harness.Ctx(w.agent, idem), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
	require.NoError(t, err)
	require.True(t, replay.GetReplayed())
	require.Equal(t, again.GetOperation().GetId(), replay.GetOperation().GetId())
}
