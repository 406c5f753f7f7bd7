package mcpgateway_test

import (
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/harness"
)

// policyTools are the demo tools with the clients' refund tool
// (clients/testdata/policy_tools.yaml): EUR only, every call approved, two
// approvers above 1,000.00, amount_minor editable.
func policyTools(t *testing.T) []byte {
	t.Helper()
	refund, err := os.ReadFile("../../clients/testdata/policy_tools.yaml")
	require.NoError(t, err)
	return append(demoTools(), refund...)
}

// approveEdited approves an operation as a person would in the console's
// edit form: the same, but with amount_minor changed.
func (w *world) approveEdited(approver, opID, fingerprint string, args map[string]any, amount int) *opledgerv1.ApproveResponse {
	w.t.Helper()
	edited := map[string]any{}
	for k, v := range args {
		edited[k] = v
	}
	edited["amount_minor"] = amount
	s, err := structpb.NewStruct(edited)
	require.NoError(w.t, err)
	resp, err := w.srv.Client.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: opID, Fingerprint: fingerprint,
		Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "less is enough", EditedArgs: s})
	require.NoError(w.t, err)
	return resp
}

// chargesOf lists the fake processor's charges of one invoice by amount.
func (w *world) chargesOf(invoiceID string) []int64 {
	var out []int64
	for _, c := range w.env.Fakepay.Charges() {
		if c.InvoiceID == invoiceID {
			out = append(out, c.AmountMinor)
		}
	}
	return out
}

// TestApproverEditIsFollowed: a call awaits approval; an approver approves
// it "the same, but 40.00 instead of 49.00". check_operation with the
// call's operation_id runs the edited operation once and answers with it:
// what the approver changed and the arguments that ran, never the
// original's. The same tools/call again answers the same, without a second
// charge.
func TestApproverEditIsFollowed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, policyTools(t))
	cs := connectHTTP(t, w.httpGateway(""), nil)
	args := map[string]any{"invoice_id": harness.Unique("INV"), "amount_minor": 4900, "currency": "EUR"}
	_, a := call(t, cs, "refund", args, nil)
	require.Equal(t, mcpgateway.StatusAwaitingApproval, a.Status)
	original := a.OperationID
	edit := w.approveEdited(w.approver, original, a.Fingerprint, args, 4000)
	edited := edit.GetEdited().GetId()

	res, a := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": original}, nil)
	require.False(t, res.IsError, text(res))
	require.Equal(t, mcpgateway.StatusSucceeded, a.Status, text(res))
	require.Equal(t, edited, a.OperationID, "the answer is the edited operation's")
	require.NotNil(t, a.Edited)
	require.Equal(t, original, a.Edited.Supersedes)
	require.EqualValues(t, 4000, a.Edited.Args["amount_minor"])
	require.Equal(t, []mcpgateway.AnswerChange{{Field: "amount_minor", From: 4900.0, To: 4000.0}}, a.Edited.Changes)
	require.Contains(t, text(res), "An approver changed amount_minor from 4900 to 4000; this ran: {")
	require.Contains(t, text(res), "Operation "+edited+" replaces "+original+", the call as it was made, which will not run.")
	require.Equal(t, []int64{4000}, w.chargesOf(args["invoice_id"].(string)))

	// The same call again in the session: its key names the original,
	// whose one-call Execute answers OPERATION_SUPERSEDED; followed.
	res, a = call(t, cs, "refund", args, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, a.Status, text(res))
	require.Equal(t, edited, a.OperationID)
	require.True(t, a.Replayed)
	require.NotNil(t, a.Edited)
	require.Contains(t, text(res), "this ran:")
	require.Equal(t, []int64{4000}, w.chargesOf(args["invoice_id"].(string)), "one charge, of the edited amount")
}

// TestApproverEditIntoAQuorum: an edit into two-approver territory still
// needs a second person: check_operation answers awaiting_approval for the
// edited operation, and runs it once the second approver approved.
func TestApproverEditIntoAQuorum(t *testing.T) {
	t.Parallel()
	w := newWorld(t, policyTools(t))
	cs := connectHTTP(t, w.httpGateway(""), nil)
	args := map[string]any{"invoice_id": harness.Unique("INV"), "amount_minor": 4900, "currency": "EUR"}
	_, a := call(t, cs, "refund", args, nil)
	require.Equal(t, mcpgateway.StatusAwaitingApproval, a.Status)
	original := a.OperationID
	edit := w.approveEdited(w.approver, original, a.Fingerprint, args, 150000)
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, edit.GetEdited().GetState())

	res, a := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": original}, nil)
	require.Equal(t, mcpgateway.StatusAwaitingApproval, a.Status, text(res))
	require.Equal(t, edit.GetEdited().GetId(), a.OperationID)
	require.NotNil(t, a.Edited)
	require.Contains(t, text(res), "An approver changed amount_minor from 4900 to 150000; this awaits approval: {")
	require.Empty(t, w.chargesOf(args["invoice_id"].(string)))

	second := w.env.Key(w.tenant, "approver")
	_, err := w.srv.Client.Approve(harness.Ctx(second, ""), &opledgerv1.ApproveRequest{OperationId: a.OperationID, Fingerprint: a.Fingerprint,
		Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "checked"})
	require.NoError(t, err)
	res, a = call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, a.Status, text(res))
	require.Equal(t, original, a.Edited.Supersedes, "the edit is told when the edited operation is checked by its own id too")
	require.Equal(t, []int64{150000}, w.chargesOf(args["invoice_id"].(string)))
}

// TestPolicyDeniedIsRefusedAgain: a deny rule's refusal is a tool error
// that says the rule's message and that the same call is refused again;
// nothing is recorded, and the tool's description carried the policy.
func TestPolicyDeniedIsRefusedAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, policyTools(t))
	cs := connectHTTP(t, w.httpGateway(""), nil)
	listed, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var refund *mcp.Tool
	for _, tl := range listed.Tools {
		if tl.Name == "refund" {
			refund = tl
		}
	}
	require.NotNil(t, refund)
	require.Contains(t, refund.Description, "\n\nPolicy: refused when args.currency != \"EUR\" (eur_only: refunds are paid in EUR only)")
	require.Contains(t, refund.Description, "an approver may edit amount_minor")

	args := map[string]any{"invoice_id": harness.Unique("INV"), "amount_minor": 4900, "currency": "USD"}
	for range 2 {
		res, a := call(t, cs, "refund", args, nil)
		require.True(t, res.IsError)
		require.Equal(t, mcpgateway.StatusError, a.Status)
		require.Equal(t, "POLICY_DENIED", a.Error.Reason)
		require.Empty(t, a.OperationID)
		require.Contains(t, text(res), "refunds are paid in EUR only")
		require.Contains(t, a.Next, "will be refused again")
	}
	list, err := w.srv.Client.ListOperations(harness.Ctx(w.agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetOperations(), "nothing was recorded")
}
