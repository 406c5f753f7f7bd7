package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// TestWaiterOnTheHoldersReplicaIsWokenByAWebhook: an Execute waiting on an
// attempt held by its own replica relies on the holder to wake it, and
// never asks the database to notify; a webhook that ends the attempt (on
// any replica) while the holder is still blocked on the downstream must
// wake it, not leave it asleep until its wait ends.
func TestWaiterOnTheHoldersReplicaIsWokenByAWebhook(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	b := newBlocker()
	cfg := ledger.Config{WaitPoll: time.Minute, MinLease: time.Minute, MaxWait: time.Minute}
	waiting := make(chan struct{}, 1)
	hooks := &ledger.Hooks{AfterDownstream: b.hook, Waiting: func(context.Context, ledger.Operation) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}}
	holder := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true, Hooks: hooks})
	other := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true})
	op := preparedApproved(t, w, holder.Client, "pay_invoice")
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		_, _ = execute(holder.Client, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, holderDone)
	defer func() { close(b.release); <-holderDone }()

	waiterDone := make(chan struct{})
	var resp *opledgerv1.ExecuteResponse
	var err error
	go func() {
		defer close(waiterDone)
		ctx, cancel := context.WithTimeout(harness.Ctx(w.agent, ""), 5*time.Second)
		defer cancel()
		resp, err = executeCtx(ctx, holder.Client, op.GetId(), time.Minute)
	}()
	<-waiting
	_, werr := other.Ledger.Webhook(context.Background(), "pay_invoice", ledger.WebhookEvent{
		ID: harness.Unique("evt"), Type: "succeeded", IdempotencyKey: op.GetDownstreamKey(), ExternalRef: "ch_webhook",
		Data: []byte(`{"id":"ch_webhook","status":"succeeded"}`)})
	require.NoError(t, werr)
	<-waiterDone
	require.NoError(t, err, "the waiter slept through the recorded outcome")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
}
