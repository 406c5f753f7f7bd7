package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestCancelNeedsTheAgentRole: the server lets only an agent cancel (the
// interceptor's role table); the ledger's rules of Cancel are TestCancel's,
// on the ledger directly (bundle_test.go).
func TestCancelNeedsTheAgentRole(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	done := preparedApproved(t, w, c, "pay_invoice")
	_, err := execute(c, w.agent, done.GetId(), 0)
	require.NoError(t, err)
	_, err = c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: done.GetId()})
	requireStatus(t, err, codes.FailedPrecondition, "CANCEL_NOT_APPLICABLE")
	_, err = c.Cancel(harness.Ctx(w.approver, ""), &opledgerv1.CancelRequest{OperationId: done.GetId()})
	requireStatus(t, err, codes.PermissionDenied, "ROLE_REQUIRED")
}
