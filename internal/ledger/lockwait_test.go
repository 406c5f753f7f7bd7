package ledger_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// The tests in this file stage a wait for an operation's row lock (held by
// lockRow) inside a statement of the ledger's, and check that the time
// rules the statement judges, and the times it records, still hold: a
// statement's now() and statement_timestamp() are both its start, before
// the wait.

// lockRow holds the operation's row lock until the returned func is called.
func lockRow(t *testing.T, st *store.Store, id string) func() {
	t.Helper()
	locked, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- st.InTx(context.Background(), func(tx *store.Conn) error {
			_, err := tx.OperationGetForUpdate(context.Background(), "acme", id)
			close(locked)
			<-release
			return err
		})
	}()
	<-locked
	return func() { close(release); require.NoError(t, <-done) }
}

// approvedAndLocked is an operation of a tool whose approval lasts 2 s,
// prepared and approved (expires: the approval's end), with its row locked
// until unlock is called.
func approvedAndLocked(t *testing.T, invoice string) (w *world, c opledgerv1.LedgerServiceClient, op *opledgerv1.Operation, expires time.Time, unlock func()) {
	t.Helper()
	w = newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_brief",
		ApprovalTTL: 2 * time.Second, DedupesKeys: true, Lookup: true})})
	c = w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op = prepare(t, c, w.agent, "pay_brief", payArgs(t, invoice))
	expires = approve(t, c, w.approver, op).GetOperation().GetApproval().GetExpireTime().AsTime()
	return w, c, op, expires, lockRow(t, w.env.Store, op.GetId())
}

// TestClaimThatWaitedPastTheApprovalIsRefused: a claim that waited for the
// row lock from before the approval's end to after it sends nothing (the
// approval bounds the first send), and its caller is told the approval
// expired, not that the downstream could not be reached.
func TestClaimThatWaitedPastTheApprovalIsRefused(t *testing.T) {
	t.Parallel()
	w, c, op, expires, unlock := approvedAndLocked(t, "INV-CW")
	time.Sleep(time.Until(expires.Add(-400 * time.Millisecond)))
	done := make(chan error, 1)
	go func() { _, err := execute(c, w.agent, op.GetId(), 0); done <- err }()
	time.Sleep(time.Until(expires.Add(400 * time.Millisecond)))
	unlock()
	err := <-done
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_EXPIRED")
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState(), "back before its approvers")
	require.Empty(t, w.env.Fakepay.Charges())
}

// atSend records the operation as the database shows it when a charge is
// sent.
type atSend struct {
	st *store.Store
	mu sync.Mutex
	id string
	op []ledger.Operation
}

func (r *atSend) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op, err := r.st.OperationGet(context.Background(), "acme", r.id); err == nil && req.Method == http.MethodPost {
		r.op = append(r.op, op)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestTakeoverSendsOnlyWhileItsLeaseHolds: a takeover that waited for the
// row lock longer than its lease sends nothing: its lease began when its
// statement did, and its request must reach the downstream inside it.
func TestTakeoverSendsOnlyWhileItsLeaseHolds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_take",
		Timeout: time.Second, DedupesKeys: true, Lookup: true})}) // lease 2 s
	blk := newBlocker()
	a := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true,
		Hooks: &ledger.Hooks{AfterDownstream: blk.hook}}).Client
	rec := &atSend{st: w.env.Store}
	b := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true,
		HTTPClient: &http.Client{Transport: rec}}).Client
	op := prepare(t, a, w.agent, "pay_take", payArgs(t, "INV-TW"))
	rec.mu.Lock()
	rec.id = op.GetId()
	rec.mu.Unlock()
	doneA := make(chan struct{})
	go func() { defer close(doneA); _, _ = execute(a, w.agent, op.GetId(), 0) }()
	blk.waitArrived(t, doneA) // A charged, then stalls
	untilLeaseExpired(t, a, w.agent, op.GetId())
	unlock := lockRow(t, w.env.Store, op.GetId())
	doneB := make(chan error, 1)
	go func() { _, err := execute(b, w.agent, op.GetId(), 0); doneB <- err }()
	time.Sleep(3 * time.Second) // B's takeover waits on the lock longer than its lease
	unlock()
	<-doneB
	close(blk.release)
	<-doneA
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, sent := range rec.op {
		require.True(t, sent.LeaseExpiresAt.After(sent.DBNow), "fence %d sent %s after its lease ended",
			sent.Fence, sent.DBNow.Sub(sent.LeaseExpiresAt))
	}
}

// TestWebhookOutcomeStampedWhenApplied: a webhook that waited for the row
// lock records its outcome at the time it applied it, the time of its
// event, not when its transaction began.
func TestWebhookOutcomeStampedWhenApplied(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook",
		Timeout: time.Second, DedupesKeys: true, Lookup: true})})
	blk := newBlocker()
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: blk.hook}})
	op := prepare(t, srv.Client, w.agent, "pay_hook", payArgs(t, "INV-HW"))
	doneA := make(chan struct{})
	go func() { defer close(doneA); _, _ = execute(srv.Client, w.agent, op.GetId(), 0) }()
	blk.waitArrived(t, doneA)
	stored, err := w.env.Store.OperationGet(context.Background(), "acme", op.GetId())
	require.NoError(t, err)
	unlock := lockRow(t, w.env.Store, op.GetId())
	done := make(chan error, 1)
	go func() {
		_, err := srv.Ledger.Webhook(context.Background(), "pay_hook", ledger.WebhookEvent{ID: "evt_1",
			Type: "succeeded", IdempotencyKey: stored.DownstreamKey, ExternalRef: "ch_1"})
		done <- err
	}()
	time.Sleep(time.Second) // the webhook waits on the lock
	unlock()
	require.NoError(t, <-done)
	close(blk.release)
	<-doneA
	got, evs := get(t, srv.Client, w.agent, op.GetId())
	last := evs[len(evs)-1]
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_RECONCILED, last.GetType())
	require.Equal(t, last.GetCreateTime().AsTime(), got.GetUpdateTime().AsTime())
}

// TestFinishedCacheForgetsWhenPruned: a replica's copy of a finished
// operation goes no later than the database prunes it, even when the
// statement that finished it waited for the row lock.
func TestFinishedCacheForgetsWhenPruned(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_prune",
		Timeout: time.Second, DedupesKeys: true, Lookup: true})})
	blk := newBlocker()
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: blk.hook},
		Ledger: ledger.Config{Retention: 3 * time.Second, PruneInterval: time.Hour}})
	op := prepare(t, srv.Client, w.agent, "pay_prune", payArgs(t, "INV-PR"))
	doneA := make(chan struct{})
	go func() { defer close(doneA); _, _ = execute(srv.Client, w.agent, op.GetId(), 0) }()
	blk.waitArrived(t, doneA)
	unlock := lockRow(t, w.env.Store, op.GetId())
	close(blk.release)                  // the outcome's statement waits on the lock
	time.Sleep(1500 * time.Millisecond) // for this long
	unlock()
	<-doneA
	got, _ := get(t, srv.Client, w.agent, op.GetId())
	time.Sleep(time.Until(got.GetUpdateTime().AsTime().Add(3300 * time.Millisecond)))
	n, err := srv.Ledger.Prune(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = execute(srv.Client, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
}

// TestClaimThatWaitedPastItsLeaseRunsTheCall: a claim whose statement
// waited for the row lock until its lease was spent sends nothing under it;
// it releases and claims again, and the call runs, instead of telling its
// caller the downstream could not be reached.
func TestClaimThatWaitedPastItsLeaseRunsTheCall(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_lw",
		Timeout: time.Second, DedupesKeys: true, Lookup: true})}) // lease 2 s
	c := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "pay_lw", payArgs(t, "INV-LW"))
	unlock := lockRow(t, w.env.Store, op.GetId())
	done := make(chan error, 1)
	go func() { _, err := execute(c, w.agent, op.GetId(), 0); done <- err }()
	time.Sleep(3 * time.Second) // the claim waits on the lock longer than its lease
	unlock()
	require.NoError(t, <-done, "the downstream was up the whole time")
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)
}
