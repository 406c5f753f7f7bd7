package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestTextWithTheNULCharacterIsRefused: PostgreSQL cannot store the NUL
// character (U+0000) in a text value. A reason, a note or a reference that
// holds one is FIELD_INVALID naming the field, not INTERNAL, and the
// operation is left as it was (args: ARGS_INVALID, in TestPrepare's
// refusals).
func TestTextWithTheNULCharacterIsRefused(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{}).Client
	agent, approver, operator := env.Key("acme", "agent"), env.Key("acme", "approver"), env.Key("acme", "operator")
	op := prepare(t, c, agent, harness.Unique("nul"), "pay_invoice", invoiceArgs(t, 4900)).GetOperation()

	calls := []struct {
		field string
		call  func() error
	}{
		{"reason", func() error {
			_, err := c.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
				Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "ok\x00"})
			return err
		}},
		{"reason", func() error {
			_, err := c.Cancel(harness.Ctx(agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId(), Reason: "\x00"})
			return err
		}},
		{"resolution.note", func() error {
			_, err := c.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
				Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_FAILED, Note: "checked\x00"}})
			return err
		}},
		{"resolution.external_ref", func() error {
			_, err := c.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
				Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: "ch_\x00", Note: "checked"}})
			return err
		}},
	}
	for _, tc := range calls {
		st := requireReason(t, tc.call(), codes.InvalidArgument, "FIELD_INVALID")
		require.Contains(t, badRequestFields(st), tc.field)
	}
	got := get(t, c, agent, op.GetId(), true)
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetOperation().GetState())
	require.Len(t, got.GetEvents(), 1, "the refused calls left no trace")
}
