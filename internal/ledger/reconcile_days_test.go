package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// TestReconcilerSurvivesAnOperationRetriedForDays: an e-mail whose outcome
// stays unknown is looked at again and again (its backoff capped at the
// maximum); after 1024 rounds, about 85 hours at the default 5 minutes,
// 2^attempts overflowed and failed every batch of every replica, so no
// stuck operation of any tenant was reconciled again.
func TestReconcilerSurvivesAnOperationRetriedForDays(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(
		harness.ToolSpec{Name: "mail_once", Kind: harness.KindEmail, MaxAttempts: 1},
		harness.ToolSpec{Name: "pay_once", MaxAttempts: 1, DedupesKeys: true, Lookup: true})})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true,
		Ledger: ledger.Config{ReconcileBackoff: time.Millisecond, ReconcileMaxBackoff: time.Millisecond}})
	c := srv.Client
	mail := prepare(t, c, w.agent, "mail_once", emailArgs(t))
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}})
	r, err := execute(c, w.agent, mail.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, r.GetOperation().GetState())
	ctx := context.Background()
	for round := 0; round < 1100; round++ {
		// The batch takes the e-mail again once its 1 ms backoff passed.
		require.Eventually(t, func() bool {
			n, err := srv.Ledger.ReconcileBatch(ctx)
			require.NoError(t, err, "round %d", round)
			return n == 1
		}, 5*time.Second, time.Millisecond)
	}
	pay := prepare(t, c, w.agent, "pay_once", payArgs(t, "INV-DAYS"))
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}})
	r, err = execute(c, w.agent, pay.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, r.GetOperation().GetState())
	require.Eventually(t, func() bool {
		_, err := srv.Ledger.ReconcileBatch(ctx)
		require.NoError(t, err)
		got, _ := get(t, c, w.agent, pay.GetId())
		return got.GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 10*time.Second, 5*time.Millisecond, "the charge is found and recorded")
}
