package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// TestFinishedReplayNeedsNoDatabase: once an operation is finished, this
// server answers its replays from memory. The proof takes the database away
// from the server (its pool is closed): replays of a succeeded and of a
// rejected operation still get their true answers, while anything that
// needs the database (a Get, an operation never seen finished) is refused
// as unavailable. The cache is per tenant: another tenant still gets
// NOT_FOUND.
func TestFinishedReplayNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true})
	c := srv.Client
	other := w.env.Key("globex", "agent")

	paid := preparedApproved(t, w, c, "pay_invoice")
	first, err := execute(c, w.agent, paid.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, first.GetOperation().GetState())

	denied := prepare(t, c, w.agent, "pay_invoice", payArgs(t, harness.Unique("INV")))
	_, err = decide(c, w.approver, denied.GetId(), denied.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	require.NoError(t, err)
	_, err = execute(c, w.agent, denied.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_REJECTED")

	open := prepare(t, c, w.agent, "pay_invoice", payArgs(t, harness.Unique("INV")))
	_, err = execute(c, other, paid.GetId(), 0) // authenticates the other key while the database is there
	requireStatus(t, err, codes.NotFound, "OPERATION_NOT_FOUND")

	srv.Store.Close()

	again, err := execute(c, w.agent, paid.GetId(), 0)
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.True(t, proto.Equal(first.GetOperation(), again.GetOperation()), "the replay is the recorded outcome, field for field")
	_, err = execute(c, w.agent, denied.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_REJECTED")

	_, err = execute(c, other, paid.GetId(), 0)
	requireStatus(t, err, codes.Unavailable, "LEDGER_UNAVAILABLE")
	_, err = execute(c, w.agent, open.GetId(), 0)
	requireStatus(t, err, codes.Unavailable, "LEDGER_UNAVAILABLE")
	_, err = c.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: paid.GetId()})
	requireStatus(t, err, codes.Unavailable, "LEDGER_UNAVAILABLE")
}

// TestFinishedCacheDisabled: with the cache off, every replay reads the
// database, so without it the replay is refused as unavailable.
func TestFinishedCacheDisabled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{FinishedCacheSize: -1}})
	paid := preparedApproved(t, w, srv.Client, "pay_invoice")
	_, err := execute(srv.Client, w.agent, paid.GetId(), 0)
	require.NoError(t, err)
	again, err := execute(srv.Client, w.agent, paid.GetId(), 0)
	require.NoError(t, err)
	require.True(t, again.GetReplayed())

	srv.Store.Close()
	_, err = execute(srv.Client, w.agent, paid.GetId(), 0)
	requireStatus(t, err, codes.Unavailable, "LEDGER_UNAVAILABLE")
}

// TestFinishedCacheRespectsRetention: a remembered operation is forgotten
// no later than the pruner may delete it, so a replay after pruning tells
// the same story as a Get (NOT_FOUND) on every replica.
func TestFinishedCacheRespectsRetention(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	srv := w.env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{Retention: 300 * time.Millisecond}})
	op := prepare(t, srv.Client, w.agent, "send_email", emailArgs(t))
	_, err := execute(srv.Client, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	again, err := execute(srv.Client, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.True(t, again.GetReplayed())

	time.Sleep(500 * time.Millisecond)
	n, err := srv.Ledger.Prune(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = execute(srv.Client, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
}
