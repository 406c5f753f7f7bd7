package ledger_test

import (
	"context"
	"encoding/json"
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

// TestWebhookSettlesAnOperationReadyAfterASend: a consistent lookup missed
// a charge still in flight and made the operation READY ("nothing done,
// resubmit the same key"); the processor's signed report of that charge
// then settles it, where it was recorded and dropped ("operation is READY:
// nothing changed"), leaving the ledger saying nothing happened.
func TestWebhookSettlesAnOperationReadyAfterASend(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook",
		MaxAttempts: 1, DedupesKeys: true, Lookup: true, WebhookSecret: "webhook-secret-0123456789", Timeout: 300 * time.Millisecond})})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	c := srv.Client
	op := prepare(t, c, w.agent, "pay_hook", payArgs(t, "INV-RW"))
	w.env.Fakepay.SetFaults(fakepay.Faults{Delay: 2 * time.Second})
	r, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, r.GetOperation().GetState())
	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, rec.GetOperation().GetState(), rec.GetDetail())
	require.Eventually(t, func() bool { return len(w.env.Fakepay.Charges()) == 1 }, 10*time.Second, 20*time.Millisecond)
	charge := w.env.Fakepay.Charges()[0]
	data, err := json.Marshal(charge)
	require.NoError(t, err)
	res, err := srv.Ledger.Webhook(context.Background(), "pay_hook", ledger.WebhookEvent{ID: "evt_" + charge.ID, Type: "succeeded",
		IdempotencyKey: charge.IdempotencyKey, ExternalRef: charge.ID, Data: data})
	require.NoError(t, err)
	require.False(t, res.Contradicts, res.Text)
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState(), "the processor's signed report of the charge: %s", res.Text)
	require.Equal(t, charge.ID, got.GetExternalRef())

	// A READY operation nothing was sent for is not settled by a report.
	fresh := prepare(t, c, w.agent, "pay_hook", payArgs(t, "INV-RW2"))
	res, err = srv.Ledger.Webhook(context.Background(), "pay_hook", ledger.WebhookEvent{ID: "evt_other", Type: "succeeded",
		IdempotencyKey: fresh.GetDownstreamKey(), ExternalRef: "ch_none"})
	require.NoError(t, err)
	require.True(t, res.Contradicts, res.Text)
	got, _ = get(t, c, w.agent, fresh.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, got.GetState())
}
