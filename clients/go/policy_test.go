package client_test

// The policy flows against the real server (server_test.go's world), on the
// refund tool clients/run-server.sh adds (clients/testdata/policy_tools.yaml):
// EUR only, every call approved, two approvers above 1,000.00, amount_minor
// editable by an approver.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/clients/go/internal/require"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// amounts lists the fake processor's charges of one invoice by amount.
func (w *world) amounts(t *testing.T, invoiceID string) []int64 {
	t.Helper()
	resp, err := http.Get(w.fakepay + "/charges")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			InvoiceID   string `json:"invoice_id"`
			AmountMinor int64  `json:"amount_minor"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	var out []int64
	for _, c := range list.Data {
		if c.InvoiceID == invoiceID {
			out = append(out, c.AmountMinor)
		}
	}
	return out
}

// editingApprover is an OnApprovalRequired hook that approves the call as
// made with amount_minor changed to amount, as a person at a prompt would,
// and leaves an edited operation (one that supersedes another) alone.
func editingApprover(t *testing.T, w *world, amount int) func(context.Context, *opledgerv1.Operation) error {
	return func(ctx context.Context, op *opledgerv1.Operation) error {
		if op.GetSupersedes() != "" {
			return nil
		}
		edited := op.GetArgs().AsMap()
		edited["amount_minor"] = amount
		resp, err := w.approver.ApproveEdited(ctx, op.GetId(), op.GetFingerprint(), edited, "less is enough")
		if err != nil {
			return err
		}
		require.Equal(t, opledgerv1.State_STATE_REJECTED, resp.GetOperation().GetState())
		require.Equal(t, resp.GetEdited().GetId(), resp.GetOperation().GetSupersededBy())
		return nil
	}
}

// TestToolRunnerFollowsAnApproverEdit: an approver approves the call "the
// same, but 40.00 instead of 49.00"; the runner follows the link to the
// edited operation, runs it once, and tells the model what ran, never the
// original. Running the same call again, and checking the original's id,
// answer the same.
func TestToolRunnerFollowsAnApproverEdit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{ApprovalWait: 30 * time.Second, OnApprovalRequired: editingApprover(t, w, 4000)})
	id := newInvoiceID()
	key := testKey(t, id, "call_1")

	out, err := runner.Run(ctx, "refund", invoice(id, 4900), key)
	require.NoError(t, err)
	done, ok := out.(*client.Succeeded)
	require.True(t, ok, "got %T: %s", out, out.ForModel())
	edit := done.Edited()
	require.NotNil(t, edit)
	require.NotEqual(t, edit.Supersedes, done.OperationID(), "the answer is the edited operation's")
	require.Equal(t, edit.Supersedes, done.Operation.GetSupersedes())
	require.Equal(t, 4000.0, edit.Args["amount_minor"])
	require.Equal(t, []client.Change{{Field: "amount_minor", From: 4900.0, To: 4000.0}}, edit.Changes)
	require.Equal(t, []int64{4000}, w.amounts(t, id), "the edited amount ran, once")
	var forModel struct {
		OperationID string `json:"operation_id"`
		Edited      struct {
			Args    map[string]any `json:"args"`
			Message string         `json:"message"`
		} `json:"edited"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.ForModel()), &forModel))
	require.Equal(t, done.OperationID(), forModel.OperationID)
	require.Equal(t, 4000.0, forModel.Edited.Args["amount_minor"])
	require.True(t, strings.HasPrefix(forModel.Edited.Message, "An approver changed amount_minor from 4900 to 4000; this ran: {"), forModel.Edited.Message)

	// The same call again: the ledger replays the original, whose Execute
	// answers OPERATION_SUPERSEDED; the runner follows it to the outcome.
	again, err := runner.Run(ctx, "refund", invoice(id, 4900), key)
	require.NoError(t, err)
	require.Equal(t, out.ForModel(), again.ForModel())
	checked, err := runner.Run(ctx, client.CheckOperationTool, map[string]any{"operation_id": edit.Supersedes}, "")
	require.NoError(t, err)
	require.Equal(t, out.ForModel(), checked.ForModel())
	require.Equal(t, []int64{4000}, w.amounts(t, id))

	// Execute of the original is refused with the link, not run.
	_, err = w.agent.Execute(ctx, edit.Supersedes)
	require.ErrorIs(t, err, client.ReasonOperationSuperseded)
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, done.OperationID(), e.Metadata["superseded_by"])
}

// TestToolRunnerEditIntoAQuorumAwaitsTheSecondApprover: an edit into
// two-approver territory is approved by the editor and still needs a
// second person: the runner answers AwaitingApproval for the edited
// operation, with the quorum's progress on it.
func TestToolRunnerEditIntoAQuorumAwaitsTheSecondApprover(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{ApprovalWait: time.Second, OnApprovalRequired: editingApprover(t, w, 150000)})
	id := newInvoiceID()
	out, err := runner.Run(ctx, "refund", invoice(id, 4900), testKey(t, id, "call_1"))
	require.NoError(t, err)
	waiting, ok := out.(*client.AwaitingApproval)
	require.True(t, ok, "got %T: %s", out, out.ForModel())
	require.NotNil(t, waiting.Edited())
	require.Equal(t, waiting.Edited().Supersedes, waiting.Operation.GetSupersedes())
	have, needed := client.ApprovalsOf(waiting.Operation)
	require.Equal(t, 1, have, "the editor's approval counts")
	require.Equal(t, 2, needed)
	require.Contains(t, out.ForModel(), `An approver changed amount_minor from 4900 to 150000; this awaits approval: {`)
	require.Empty(t, w.amounts(t, id))
}

// TestToolRunnerPolicyDeniedSaysItWillBeRefusedAgain: a deny rule's refusal
// is a Failed whose message has the rule's message and says that the same
// call is refused again; nothing is recorded.
func TestToolRunnerPolicyDeniedSaysItWillBeRefusedAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{})
	id := newInvoiceID()
	args := map[string]any{"invoice_id": id, "amount_minor": 4900, "currency": "USD"}
	for range 2 {
		out, err := runner.Run(ctx, "refund", args, testKey(t, id, "call_1"))
		require.NoError(t, err)
		failed, ok := out.(*client.Failed)
		require.True(t, ok, "got %T: %s", out, out.ForModel())
		require.Equal(t, client.ReasonPolicyDenied, failed.Reason)
		require.True(t, failed.Operation == nil, "nothing was recorded")
		require.Contains(t, failed.Message, "refunds are paid in EUR only")
		require.Contains(t, failed.Message, "will be refused again")
	}
	tools, err := runner.ModelTools(ctx)
	require.NoError(t, err)
	for _, tl := range tools {
		if tl.Name == "refund" {
			require.Contains(t, tl.Description, "\n\nPolicy: refused when", "the policy's summary is in the model's description")
			require.Contains(t, tl.Description, "an approver may edit amount_minor")
		}
	}
	require.Empty(t, w.amounts(t, id))
}
