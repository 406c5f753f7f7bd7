package ledger_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// The tests of this file each reproduce a defect a review found (issue 11):
// a false answer, or an approval that was not enforced. Each fails on the
// code before its fix.

func payOnce(ttl time.Duration) []byte {
	return harness.ToolsYAML(harness.ToolSpec{Name: "pay_once", ApprovalTTL: ttl, MaxAttempts: 1, DedupesKeys: true, Lookup: true})
}

// TestRedirectAfterCommitIsUnknown (defect 1): the processor charges, then
// answers 303. FAILED would tell the agent nothing happened, and it would
// retry under a new key and pay twice: the outcome is unknown, and the
// lookup settles it.
func TestRedirectAfterCommitIsUnknown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: payOnce(15 * time.Minute)})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{RedirectAfterCommit: fakepay.Trigger{Next: 1}})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	require.Equal(t, "DOWNSTREAM_OUTCOME_UNKNOWN", storedReason(t, resp.GetOperation()))
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)

	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, rec.GetOperation().GetState(), rec.GetDetail())
	require.Equal(t, charges[0].ID, rec.GetOperation().GetExternalRef())
}

// TestRefusalAfterAmbiguousSendAcrossExecutes (defect 2): attempt 1 charges
// and answers 500; a lookup that lags makes the operation READY again; the
// resubmission under the same key is refused (400). The charge exists: the
// refusal proves nothing about the first attempt, so the outcome stays
// unknown until a lookup settles it.
func TestRefusalAfterAmbiguousSendAcrossExecutes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: payOnce(15 * time.Minute)})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}, RefuseReplay: fakepay.Trigger{Next: 1},
		LookupLag: time.Hour})

	first, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, first.GetOperation().GetState())
	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, rec.GetOperation().GetState(), rec.GetDetail())

	second, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, second.GetOperation().GetState(),
		"a refusal of attempt 2 does not undo attempt 1's charge")
	require.Len(t, w.env.Fakepay.Charges(), 1)

	// The lookup catches up and settles it.
	w.env.Fakepay.SetFaults(fakepay.Faults{})
	rec = reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, rec.GetOperation().GetState(), rec.GetDetail())
	require.Equal(t, w.env.Fakepay.Charges()[0].ID, rec.GetOperation().GetExternalRef())
}

// TestRefusalAfterLeaseTakeover (defect 2, across a takeover): server A's
// request charges and A stalls before recording anything; B takes the
// expired lease over and resubmits the same key, which is refused. A may
// have charged (it did): B's refusal is not FAILED.
func TestRefusalAfterLeaseTakeover(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	b := newBlocker()
	cfg := ledger.Config{MinLease: time.Second}
	a := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	bsrv := w.env.StartServer(harness.ServerOptions{Ledger: cfg, NoReconciler: true})
	op := preparedApproved(t, w, a.Client, "pay_fast")
	w.env.Fakepay.SetFaults(fakepay.Faults{RefuseReplay: fakepay.Trigger{Next: 1}})

	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = execute(a.Client, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, aDone)
	require.Len(t, w.env.Fakepay.Charges(), 1)

	resp, err := execute(bsrv.Client, w.agent, op.GetId(), 20*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 2, resp.GetOperation().GetFence(), "B took over")
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	close(b.release)
	<-aDone
	final, _ := get(t, a.Client, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, final.GetState(), "A's late success is fenced out; the lookup will settle it")
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// flakyDownstream is a downstream address that refuses connections until
// up is called, then forwards to the Env's fake processor.
type flakyDownstream struct {
	addr string
	to   string
}

func newFlakyDownstream(t *testing.T) *flakyDownstream {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return &flakyDownstream{addr: addr}
}

func (f *flakyDownstream) up(t *testing.T, target string) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", f.addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(u), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestReleasedClaimDoesNotConsumeTheApproval (defect 3): the first claim
// finds the downstream refusing connections, so nothing is sent and the
// operation is released. The approval then lapses. Nothing was ever sent,
// so the lapsed approval is lapsed: Execute refuses, however often the
// operation was claimed, and an operation that was only released may still
// be cancelled.
func TestReleasedClaimDoesNotConsumeTheApproval(t *testing.T) {
	t.Parallel()
	down := newFlakyDownstream(t)
	const ttl = time.Second
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_flaky", ApprovalTTL: ttl,
		URL: "http://" + down.addr + "/charges", DedupesKeys: true, MaxAttempts: 1})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_flaky")

	_, err := execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.Unavailable, "DOWNSTREAM_UNAVAILABLE")
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, got.GetState())
	require.EqualValues(t, 1, got.GetFence())

	down.up(t, w.env.FakepayURL)
	time.Sleep(time.Until(got.GetApproval().GetExpireTime().AsTime()) + 200*time.Millisecond)
	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_EXPIRED")
	require.Empty(t, w.env.Fakepay.Charges(), "a stale approval sent nothing")

	again := approve(t, c, w.approver, op)
	require.Equal(t, opledgerv1.State_STATE_READY, again.GetOperation().GetState())
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestReleasedOperationMayBeCancelled (defect 3): a claim that sent nothing
// does not make CANCELLED a lie.
func TestReleasedOperationMayBeCancelled(t *testing.T) {
	t.Parallel()
	down := newFlakyDownstream(t)
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_flaky", ApprovalTTL: time.Hour,
		URL: "http://" + down.addr + "/charges", DedupesKeys: true, MaxAttempts: 1})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_flaky")
	_, err := execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.Unavailable, "DOWNSTREAM_UNAVAILABLE")

	resp, err := c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId(), Reason: "no longer needed"})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_CANCELLED, resp.GetOperation().GetState())
	down.up(t, w.env.FakepayURL)
	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_CANCELLED")
	require.Empty(t, w.env.Fakepay.Charges())
}

// TestStalledExpiryCannotUnsendAnOperation (defect 4): Execute A reads a
// READY operation whose approval lapsed, and stalls before expiring it.
// Meanwhile the approval is renewed, B sends the operation (the processor
// charges and answers 500), a lagging lookup makes it READY again, and the
// renewed approval lapses too. A's expiry must not move an operation that
// was sent back to AWAITING_APPROVAL, where a denial would make it REJECTED
// with a charge behind it.
func TestStalledExpiryCannotUnsendAnOperation(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	w := newWorld(t, harness.Options{ToolsYAML: payOnce(ttl)})
	stall := make(chan struct{})
	stalled := make(chan ledger.Operation, 1)
	var once bool
	a := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{
		BeforeApprovalExpiry: func(_ context.Context, op ledger.Operation) {
			if once {
				return
			}
			once = true
			stalled <- op
			<-stall
		}}})
	bsrv := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	op := preparedApproved(t, w, a.Client, "pay_once")
	time.Sleep(time.Until(op.GetApproval().GetExpireTime().AsTime()) + 200*time.Millisecond)

	aDone := make(chan error, 1)
	go func() {
		_, err := execute(a.Client, w.agent, op.GetId(), 0)
		aDone <- err
	}()
	select {
	case read := <-stalled:
		require.EqualValues(t, 0, read.Fence)
	case err := <-aDone:
		t.Fatalf("A returned without reaching the expiry: %v", err)
	}

	renewed := approve(t, bsrv.Client, w.approver, op).GetOperation()
	w.env.Fakepay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}, LookupLag: time.Hour})
	sent, err := execute(bsrv.Client, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, sent.GetOperation().GetState())
	require.Equal(t, opledgerv1.State_STATE_READY, reconcile(t, bsrv.Client, w.agent, op.GetId()).GetOperation().GetState())
	time.Sleep(time.Until(renewed.GetApproval().GetExpireTime().AsTime()) + 200*time.Millisecond)
	w.env.Fakepay.SetFaults(fakepay.Faults{})

	close(stall)
	require.NoError(t, <-aDone, "A goes on to resubmit the same key")
	got, _ := get(t, a.Client, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	_, err = decide(a.Client, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_CONFLICT")
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, got.GetExternalRef())
}

// TestReapprovalJudgedOnDatabaseClock (defect 5): the database runs 90 s
// ahead of the server. The approval lapsed on the database's clock (which
// judges Execute), so a re-approval must renew it; judged on the server's
// clock it looked in force and the re-approval was a silent no-op.
func TestReapprovalJudgedOnDatabaseClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, 90*time.Second)
	const ttl = 2 * time.Second
	w := newWorld(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: payOnce(ttl)})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	time.Sleep(ttl + 500*time.Millisecond)

	renewed := approve(t, c, w.approver, op)
	require.False(t, renewed.GetReplayed(), "the lapsed approval is renewed")
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestExecuteWaitJudgesTheLeaseOnDatabaseClock (defect 5): the database
// runs 90 s behind the server. Server A holds the lease; B's Execute with
// wait must wait for A, not read the lease as long expired on its own clock,
// fail to take it over round after round and answer ABORTED.
func TestExecuteWaitJudgesTheLeaseOnDatabaseClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, -90*time.Second)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: fastPayTools()})
	b := newBlocker()
	a := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: b.hook}})
	bsrv := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	op := preparedApproved(t, w, a.Client, "pay_fast")
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = execute(a.Client, w.agent, op.GetId(), 0)
	}()
	b.waitArrived(t, aDone)

	go func() {
		time.Sleep(time.Second)
		close(b.release)
	}()
	resp, err := execute(bsrv.Client, w.agent, op.GetId(), 10*time.Second)
	require.NoError(t, err, "B waits for A's outcome")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.EqualValues(t, 1, resp.GetOperation().GetFence(), "nobody took A's lease")
	<-aDone
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestKeyRetentionJudgedOnDatabaseClock (defect 5): the database runs 90 s
// ahead. Measured on the server's clock, the first claim happened in the
// future, so a resubmission long past the downstream's key retention still
// looked safe, and a processor that had forgotten the key charged twice.
func TestKeyRetentionJudgedOnDatabaseClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, 90*time.Second)
	const retention = time.Second
	w := newWorld(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_once",
		ApprovalTTL: 15 * time.Minute, MaxAttempts: 1, DedupesKeys: true, Lookup: true, KeyRetention: retention})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}, LookupLag: time.Hour, KeyRetention: retention})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	require.Equal(t, opledgerv1.State_STATE_READY, reconcile(t, c, w.agent, op.GetId()).GetOperation().GetState())

	time.Sleep(retention + retention/5)
	again, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Len(t, w.env.Fakepay.Charges(), 1, "never a second charge")
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, again.GetOperation().GetState())
}

// TestKnownOutcomeSurvivesADatabaseOutage (defect 6): the mail service (no
// dedupe, no lookup) sent the e-mail, and PostgreSQL is down at the moment
// the executor records it. A known success written once would be lost for
// good: the executor retries the write until the database is back.
func TestKnownOutcomeSurvivesADatabaseOutage(t *testing.T) {
	t.Parallel()
	dbURL, cluster := pgtest.NewPrivateDatabase(t)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: fastPayTools()})
	restarted := make(chan error, 1)
	var done bool
	hook := func(ctx context.Context, op ledger.Operation) {
		if done {
			return
		}
		done = true
		require.NoError(t, cluster.Crash(ctx))
		go func() {
			time.Sleep(2 * time.Second)
			restarted <- cluster.Restart(context.Background())
		}()
	}
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Hooks: &ledger.Hooks{AfterDownstream: hook}}).Client
	op := prepare(t, c, w.agent, "send_fast", emailArgs(t))

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, <-restarted)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Emails(), 1)
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Equal(t, w.env.Fakepay.Emails()[0].ID, got.GetExternalRef())
}

// TestDownstreamKeySurvivesALostOperation (issue 12): an operation row is
// lost (here pruned; in life an asynchronously replicated primary fails
// over, or a backup is restored) after its charge. The agent prepares it
// again under the same idempotency key with the same arguments: a new
// operation id, but the same downstream key, so the processor replays the
// first charge instead of charging again.
func TestDownstreamKeySurvivesALostOperation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{Retention: time.Millisecond}})
	c := srv.Client
	args := payArgs(t, "INV-lost")
	key := harness.Unique("invoice")
	prep := func() *opledgerv1.Operation {
		resp, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
		require.NoError(t, err)
		require.False(t, resp.GetReplayed())
		return approve(t, c, w.approver, resp.GetOperation()).GetOperation()
	}
	first := prep()
	resp, err := execute(c, w.agent, first.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())

	time.Sleep(10 * time.Millisecond)
	n, err := srv.Ledger.Prune(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the operation row is gone")

	second := prep()
	require.NotEqual(t, first.GetId(), second.GetId())
	require.Equal(t, first.GetDownstreamKey(), second.GetDownstreamKey())
	again, err := execute(c, w.agent, second.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, again.GetOperation().GetState())
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1, "one charge for one business operation")
	require.Equal(t, charges[0].ID, again.GetOperation().GetExternalRef())
}
