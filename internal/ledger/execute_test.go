package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// fastPayTools is a pay tool whose executor lease is short (timeout 200ms,
// one attempt; with MinLease 1s the lease is a little over a second), with a
// downstream that dedupes keys and a consistent lookup, so lease expiry can
// be staged in a test. send_fast is the same for e-mail, which does not
// dedupe. The file holds no slower tool: a claim takes the longest lease any
// tool needs.
func fastPayTools() []byte {
	return harness.ToolsYAML(
		harness.ToolSpec{Name: "pay_fast", ApprovalTTL: 15 * time.Minute,
			Timeout: 200 * time.Millisecond, MaxAttempts: 1, DedupesKeys: true, Lookup: true},
		harness.ToolSpec{Name: "send_fast", Kind: harness.KindEmail, Timeout: 200 * time.Millisecond})
}

// untilLeaseExpired sleeps until the operation's lease has lapsed.
func untilLeaseExpired(t *testing.T, c opledgerv1.LedgerServiceClient, key, id string) {
	t.Helper()
	op, _ := get(t, c, key, id)
	require.Equal(t, opledgerv1.State_STATE_EXECUTING, op.GetState())
	time.Sleep(time.Until(op.GetLeaseExpireTime().AsTime()) + 50*time.Millisecond)
}

// TestExecuteConcurrent fires 64 Executes of one approved operation at two
// servers sharing the database: one claims, the others wait for its
// outcome, and the processor sees a single charge.
func TestExecuteConcurrent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	clients := []opledgerv1.LedgerServiceClient{
		w.env.StartServer(harness.ServerOptions{}).Client,
		w.env.StartServer(harness.ServerOptions{}).Client,
	}
	op := preparedApproved(t, w, clients[0], "pay_invoice")

	const n = 64
	type answer struct {
		resp *opledgerv1.ExecuteResponse
		err  error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := execute(clients[i%2], w.agent, op.GetId(), 5*time.Second)
			answers[i] = answer{resp, err}
		})
	}
	close(start)
	wg.Wait()

	performed := 0
	var ref string
	for i, a := range answers {
		if a.err != nil {
			requireStatus(t, a.err, codes.Aborted, "OPERATION_IN_PROGRESS")
			continue
		}
		got := a.resp.GetOperation()
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState(), "answer %d", i)
		if ref == "" {
			ref = got.GetExternalRef()
		}
		require.Equal(t, ref, got.GetExternalRef(), "answer %d", i)
		if !a.resp.GetReplayed() {
			performed++
		}
	}
	require.Equal(t, 1, performed, "exactly one caller performs the operation")
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, ref)

	final, evs := get(t, clients[1], w.agent, op.GetId())
	require.EqualValues(t, 1, final.GetAttempts())
	require.EqualValues(t, 1, final.GetFence())
	require.Len(t, evs, 4)
}

// TestExecuteWaitsForHolder: an Execute with a wait, issued on another
// server while the operation is held, is woken when the holder commits and
// answers with the outcome rather than the pending state.
func TestExecuteWaitsForHolder(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	b := newBlocker()
	holder := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	waiter := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	op := preparedApproved(t, w, holder.Client, "pay_invoice")

	holderDone := make(chan struct{})
	var holderResp *opledgerv1.ExecuteResponse
	var holderErr error
	go func() {
		defer close(holderDone)
		holderResp, holderErr = execute(holder.Client, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, holderDone)

	waiterDone := make(chan struct{})
	var waiterResp *opledgerv1.ExecuteResponse
	var waiterErr error
	go func() {
		defer close(waiterDone)
		waiterResp, waiterErr = execute(waiter.Client, w.agent, op.GetId(), 5*time.Second)
	}()
	time.Sleep(300 * time.Millisecond) // the holder keeps the operation a while
	select {
	case <-waiterDone:
		t.Fatalf("the waiter answered while the holder still held the operation: %v %v", waiterResp, waiterErr)
	default:
	}
	close(b.release)
	<-holderDone
	<-waiterDone

	require.NoError(t, holderErr)
	require.NoError(t, waiterErr)
	require.False(t, holderResp.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, holderResp.GetOperation().GetState())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, waiterResp.GetOperation().GetState())
	require.True(t, waiterResp.GetReplayed())
	require.Equal(t, holderResp.GetOperation().GetExternalRef(), waiterResp.GetOperation().GetExternalRef())
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestExecuteLeaseTakeover: server A's executor stalls after the processor
// charged; once its lease expires, server B takes over with the next fence
// and resubmits the same downstream key, which the processor replays. A's
// late commit carries a stale fence and changes nothing.
func TestExecuteLeaseTakeover(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	b := newBlocker()
	cfg := ledger.Config{MinLease: time.Second}
	a := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	bsrv := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true})
	op := preparedApproved(t, w, a.Client, "pay_fast")

	aDone := make(chan struct{})
	var aResp *opledgerv1.ExecuteResponse
	var aErr error
	go func() {
		defer close(aDone)
		aResp, aErr = execute(a.Client, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, aDone)
	require.Len(t, w.env.Fakepay.Charges(), 1, "A's request reached the processor")

	// B waits out A's lease, then takes over.
	bResp, err := execute(bsrv.Client, w.agent, op.GetId(), 20*time.Second)
	require.NoError(t, err)
	got := bResp.GetOperation()
	require.False(t, bResp.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.EqualValues(t, 2, got.GetFence())
	require.EqualValues(t, 2, got.GetAttempts())
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1, "the processor replayed the same key")
	require.Equal(t, charges[0].ID, got.GetExternalRef())

	close(b.release)
	<-aDone
	require.NoError(t, aErr)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, aResp.GetOperation().GetState())
	require.EqualValues(t, 2, aResp.GetOperation().GetFence(), "A reports what the ledger holds")

	final, evs := get(t, a.Client, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, final.GetState())
	require.EqualValues(t, 2, final.GetFence())
	require.Equal(t, charges[0].ID, final.GetExternalRef())
	require.Equal(t, []opledgerv1.EventType{opledgerv1.EventType_EVENT_TYPE_PREPARED, opledgerv1.EventType_EVENT_TYPE_APPROVED,
		opledgerv1.EventType_EVENT_TYPE_CLAIMED, opledgerv1.EventType_EVENT_TYPE_LEASE_TAKEN_OVER,
		opledgerv1.EventType_EVENT_TYPE_SUCCEEDED}, eventTypes(evs), "A's stale commit appended nothing")
	require.EqualValues(t, 2, evs[3].GetFence())
	require.EqualValues(t, 2, evs[4].GetFence())
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestBackgroundReconciler: server A hangs for good after the processor
// charged, and its client gives up. Server B's reconciler finds the
// abandoned lease, looks the charge up by key and records SUCCEEDED with no
// client call.
func TestBackgroundReconciler(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	b := newBlocker()
	a := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true,
		Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	// Release A only when the test is over (cleanups run last-in first-out,
	// so this runs before A's server is stopped).
	t.Cleanup(func() { close(b.release) })
	bsrv := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second, ReconcileInterval: 100 * time.Millisecond}})
	op := preparedApproved(t, w, a.Client, "pay_fast")

	ctx, cancel := context.WithCancel(harness.Ctx(w.agent, ""))
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = executeCtx(ctx, a.Client, op.GetId(), 0)
	}()
	b.waitArrived(t, aDone)
	cancel() // the agent stops waiting for A
	<-aDone
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)

	require.Eventually(t, func() bool {
		got, _ := get(t, bsrv.Client, w.agent, op.GetId())
		return got.GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 30*time.Second, 100*time.Millisecond)

	final, evs := get(t, bsrv.Client, w.agent, op.GetId())
	require.Equal(t, charges[0].ID, final.GetExternalRef())
	require.EqualValues(t, 1, final.GetFence())
	require.EqualValues(t, 1, final.GetAttempts())
	last := evs[len(evs)-1]
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_RECONCILED, last.GetType())
	require.Equal(t, opledgerv1.State_STATE_EXECUTING, last.GetFromState())
	require.Equal(t, "server:"+bsrv.Ledger.ServerID(), last.GetActor())
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestExecuteLeaseExpiredWithoutDedupe: when the stalled holder's
// downstream does not dedupe keys, nobody may resend: the next Execute after
// the lease expired records OUTCOME_UNKNOWN. The holder's late but
// definitive answer, under the fence it still holds, then resolves it.
func TestExecuteLeaseExpiredWithoutDedupe(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	b := newBlocker()
	cfg := ledger.Config{MinLease: time.Second}
	a := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	bsrv := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true})
	op := prepare(t, a.Client, w.agent, "send_fast", emailArgs(t))

	aDone := make(chan struct{})
	var aResp *opledgerv1.ExecuteResponse
	var aErr error
	go func() {
		defer close(aDone)
		aResp, aErr = execute(a.Client, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, aDone)
	emails := w.env.Fakepay.Emails()
	require.Len(t, emails, 1)

	bResp, err := execute(bsrv.Client, w.agent, op.GetId(), 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, bResp.GetOperation().GetState())
	require.EqualValues(t, 1, bResp.GetOperation().GetFence())
	require.EqualValues(t, 1, bResp.GetOperation().GetAttempts())
	require.Len(t, w.env.Fakepay.Emails(), 1, "nothing was resent")

	close(b.release)
	<-aDone
	require.NoError(t, aErr)
	got := aResp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Equal(t, emails[0].ID, got.GetExternalRef())
	require.Nil(t, got.GetError())

	_, evs := get(t, a.Client, w.agent, op.GetId())
	require.Equal(t, []opledgerv1.EventType{opledgerv1.EventType_EVENT_TYPE_PREPARED, opledgerv1.EventType_EVENT_TYPE_CLAIMED,
		opledgerv1.EventType_EVENT_TYPE_OUTCOME_UNKNOWN, opledgerv1.EventType_EVENT_TYPE_SUCCEEDED}, eventTypes(evs))
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestReconcileAbandonedExecuting: the Reconcile RPC leaves a held lease
// alone, and once it has expired looks the charge up by key and records it;
// the stalled holder's commit afterwards changes nothing.
func TestReconcileAbandonedExecuting(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	b := newBlocker()
	a := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true,
		Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	c := a.Client
	op := preparedApproved(t, w, c, "pay_fast")

	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = execute(c, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, aDone)
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)

	held := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_EXECUTING, held.GetOperation().GetState())
	require.Contains(t, held.GetDetail(), "lease is held")

	untilLeaseExpired(t, c, w.agent, op.GetId())
	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, rec.GetOperation().GetState(), rec.GetDetail())
	require.Equal(t, charges[0].ID, rec.GetOperation().GetExternalRef())

	close(b.release)
	<-aDone
	final, evs := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, final.GetState())
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_RECONCILED, evs[len(evs)-1].GetType(), "the stale commit appended nothing")
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestWaitersAreWokenWithoutPolling: outcomes notify only when someone waits
// for them (migration 0009). A waiter on another replica marks the
// operation and is woken by the notification; a waiter on the holder's own
// replica is woken in process. Neither may depend on its poll, which is set
// here to a minute, nor on re-reading when its wait ends (a minute too):
// the caller gives up after 5 s, long after a wake-up would have come. The
// attempt ends with the holder's outcome, or with a webhook (on the other
// replica) while the holder is still blocked on the downstream: a waiter on
// the holder's replica, which relies on the holder to wake it, must be woken
// then too.
func TestWaitersAreWokenWithoutPolling(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ sameReplica, byWebhook bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		sameReplica := c.sameReplica
		t.Run(fmt.Sprintf("same replica %t, by webhook %t", sameReplica, c.byWebhook), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, harness.Options{})
			b := newBlocker()
			cfg := ledger.Config{WaitPoll: time.Minute, MinLease: time.Minute, MaxWait: time.Minute}
			waiting := make(chan ledger.Operation, 1)
			hooks := &ledger.Hooks{AfterDownstream: b.hook, Waiting: func(_ context.Context, op ledger.Operation) {
				select {
				case waiting <- op:
				default:
				}
			}}
			holder := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true, Hooks: hooks})
			other := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true,
				Hooks: &ledger.Hooks{Waiting: hooks.Waiting}})
			waiter := holder
			if !sameReplica {
				waiter = other
			}
			op := preparedApproved(t, w, holder.Client, "pay_invoice")
			holderDone := make(chan struct{})
			go func() {
				defer close(holderDone)
				_, _ = execute(holder.Client, w.agent, op.GetId(), 0)
			}()
			b.waitArrived(t, holderDone)

			waiterDone := make(chan struct{})
			var resp *opledgerv1.ExecuteResponse
			var err error
			go func() {
				defer close(waiterDone)
				ctx, cancel := context.WithTimeout(harness.Ctx(w.agent, ""), 5*time.Second)
				defer cancel()
				resp, err = executeCtx(ctx, waiter.Client, op.GetId(), time.Minute)
			}()
			select {
			case <-waiting:
			case <-waiterDone:
				t.Fatalf("the waiter answered before it waited: %v %v", resp, err)
			}
			got, _ := w.env.Store.OperationGet(context.Background(), "acme", op.GetId())
			require.Equal(t, !sameReplica, got.Waited, "only a waiter on another replica asks to be notified")
			if c.byWebhook {
				_, werr := other.Ledger.Webhook(context.Background(), "pay_invoice", ledger.WebhookEvent{
					ID: harness.Unique("evt"), Type: "succeeded", IdempotencyKey: op.GetDownstreamKey(), ExternalRef: "ch_webhook",
					Data: []byte(`{"id":"ch_webhook","status":"succeeded"}`)})
				require.NoError(t, werr)
				<-waiterDone
				close(b.release)
			} else {
				close(b.release)
				<-waiterDone
			}
			require.NoError(t, err)
			require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState(), "woken, not timed out")
			<-holderDone
		})
	}
}
