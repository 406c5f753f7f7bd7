package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/reason"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// TestLedgerStatementBoundIsNotTheCallersDeadline: an Execute whose claim
// waits for the operation's row lock (held here by another transaction)
// past the ledger's own bound on that statement (statementTimeout, 10 s),
// while the caller's deadline (60 s) is far off, was answered
// DEADLINE_EXCEEDED "the call's deadline passed" with no ErrorInfo: a false
// statement about the caller's deadline, and against the contract that every
// error carries exactly one ErrorInfo in domain opledger.v1.
func TestLedgerStatementBoundIsNotTheCallersDeadline(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	agent := env.Key("acme", "agent")
	op := prepare(t, srv.Client, agent, harness.Unique("k"), "send_email", emailArgs(t, "hello")).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_READY, op.GetState())

	locked, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- env.Store.InTx(context.Background(), func(tx *store.Conn) error {
			_, err := tx.OperationGetForUpdate(context.Background(), "acme", op.GetId())
			close(locked)
			<-release
			return err
		})
	}()
	<-locked

	ctx, cancel := context.WithTimeout(harness.Ctx(agent, ""), 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err := srv.Client.Execute(ctx, &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	took := time.Since(start)
	close(release)
	require.NoError(t, <-done)

	require.Error(t, err)
	require.Less(t, took, 50*time.Second, "answered long before the caller's deadline")
	st, ok := status.FromError(err)
	require.True(t, ok)
	var infos []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	require.NotEqual(t, codes.DeadlineExceeded, st.Code(), "the caller's deadline had not passed (after %v): %v", took, err)
	require.Len(t, infos, 1, "want exactly one ErrorInfo in %v", err)
	require.Equal(t, reason.Domain, infos[0].GetDomain())
	require.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	require.Equal(t, "LEDGER_UNAVAILABLE", infos[0].GetReason(), "%v", err)

	// Nothing was sent; the operation can still be executed once.
	require.Eventually(t, func() bool {
		r, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		return err == nil && r.GetOperation().GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 30*time.Second, 200*time.Millisecond)
	require.Len(t, env.Fakepay.Emails(), 1)
}
