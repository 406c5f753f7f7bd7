package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// The tests of this file each reproduce a claim that no process ran: the
// operation stayed EXECUTING with nothing sent, so its lease's end made it
// OUTCOME_UNKNOWN (a false answer), or let a takeover make the first send
// after its approval had ended. Each fails on the code before its fix.

// holdLock runs lock inside a transaction of its own and keeps that
// transaction open until the returned release is called.
func holdLock(t *testing.T, st *store.Store, lock func(c *store.Conn) error) (release func()) {
	t.Helper()
	locked, done := make(chan error, 1), make(chan error, 1)
	free := make(chan struct{})
	go func() {
		done <- st.InTx(context.Background(), func(c *store.Conn) error {
			err := lock(c)
			locked <- err
			if err == nil {
				<-free
			}
			return err
		})
	}()
	require.NoError(t, <-locked)
	return func() {
		close(free)
		require.NoError(t, <-done)
	}
}

// untilState polls Get until the operation is in want, for up to 20 s.
func untilState(t *testing.T, c opledgerv1.LedgerServiceClient, key, id string, want opledgerv1.State) *opledgerv1.Operation {
	t.Helper()
	var op *opledgerv1.Operation
	require.Eventually(t, func() bool {
		op, _ = get(t, c, key, id)
		return op.GetState() == want
	}, 20*time.Second, 20*time.Millisecond, "the operation never reached %s", want)
	return op
}

// TestClaimOutlivesItsCaller: an Execute whose caller gives up while its
// claim waits (here on a row lock) used to leave the claim to commit on
// the database after the server had dropped it: nothing sent, EXECUTING
// until the lease ended, then OUTCOME_UNKNOWN for an e-mail never sent. A
// claim this process may be given is now its own statement, detached from
// the caller, and the attempt it gives runs to its outcome.
func TestClaimOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	c := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "send_fast", emailArgs(t))
	require.Equal(t, opledgerv1.State_STATE_READY, op.GetState())

	release := holdLock(t, w.env.Store, func(cn *store.Conn) error {
		_, err := cn.OperationGetForUpdate(context.Background(), "acme", op.GetId())
		return err
	})
	ctx, cancel := context.WithTimeout(harness.Ctx(w.agent, ""), 300*time.Millisecond)
	defer cancel()
	_, err := executeCtx(ctx, c, op.GetId(), 0)
	require.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	release()

	got := untilState(t, c, w.agent, op.GetId(), opledgerv1.State_STATE_SUCCEEDED)
	require.EqualValues(t, 1, got.GetAttempts())
	require.Len(t, w.env.Fakepay.Emails(), 1, "sent once")
}

// TestOneCallClaimOutlivesItsCaller: the same for the one-call path, whose
// insert is its claim (held here behind the tenant's quota row).
func TestOneCallClaimOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	c := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second, OpsPerMinute: 1000}, NoReconciler: true}).Client

	release := holdLock(t, w.env.Store, func(cn *store.Conn) error {
		_, err := cn.TenantUsageBump(context.Background(), "acme")
		return err
	})
	key := harness.Unique("idem")
	ctx, cancel := context.WithTimeout(harness.Ctx(w.agent, key), 300*time.Millisecond)
	defer cancel()
	_, err := c.Prepare(ctx, &opledgerv1.PrepareRequest{Tool: "send_fast", Args: emailArgs(t), Execute: true})
	require.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	release()

	var op *opledgerv1.Operation
	require.Eventually(t, func() bool {
		resp, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "send_fast", Args: emailArgs(t)})
		if err != nil {
			return false
		}
		op = resp.GetOperation()
		return op.GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 20*time.Second, 20*time.Millisecond, "the one-call path's operation never succeeded: %v", op)
	require.Len(t, w.env.Fakepay.Emails(), 1, "sent once")
}

// TestClaimOfAToolThisServerLacksIsReleased: a replica whose tools file
// lacks the operation's tool version (a rolling deploy) claimed it and
// answered TOOL_VERSION_UNKNOWN, leaving it EXECUTING with nothing sent:
// Cancel refused it, and the lease's end made it OUTCOME_UNKNOWN. The claim
// is now released unsent, so the operation is READY for a replica that
// serves the tool, and cancellable.
func TestClaimOfAToolThisServerLacksIsReleased(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: fastPayTools()})
	a := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true})
	w.env.ToolsYAML = harness.ToolsYAML(harness.ToolSpec{Name: "pay_fast", ApprovalTTL: 15 * time.Minute,
		Timeout: 200 * time.Millisecond, MaxAttempts: 1, DedupesKeys: true, Lookup: true})
	b := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: time.Second}, NoReconciler: true})

	op := prepare(t, a.Client, w.agent, "send_fast", emailArgs(t))
	_, err := execute(b.Client, w.agent, op.GetId(), 0)
	code, reason := reasonOf(t, err)
	require.Equal(t, codes.InvalidArgument, code)
	require.Equal(t, "TOOL_VERSION_UNKNOWN", reason)

	got, evs := get(t, a.Client, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, got.GetState(), "events %v", eventTypes(evs))
	require.Empty(t, w.env.Fakepay.Emails())

	resp, err := execute(a.Client, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Emails(), 1)
}
