package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestPolicyDocWorkedExample runs docs/policy.md's worked example as
// written: its tools file served by a real `opledger serve`, and each row of
// its table of calls.
func TestPolicyDocWorkedExample(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "policy.md"))
	require.NoError(t, err)
	toolsYAML := docBlock(t, string(raw), "## Worked example: refunds", "yaml")

	env := harness.New(t, harness.Options{ToolsYAML: []byte(toolsYAML)})
	c := env.StartProcess(harness.ProcessOptions{}).Client
	agent, first, second := env.Key("acme", "agent"), env.Key("acme", "approver"), env.Key("acme", "approver")
	refund := func(amount float64, currency string) (*opledgerv1.PrepareResponse, error) {
		args, err := structpb.NewStruct(map[string]any{"invoice_id": harness.Unique("INV"), "amount_minor": amount, "currency": currency})
		require.NoError(t, err)
		return c.Prepare(harness.Ctx(agent, harness.Unique("refund")), &opledgerv1.PrepareRequest{Tool: "refund", Args: args})
	}
	decide := func(key string, op *opledgerv1.Operation, edited *structpb.Struct) *opledgerv1.ApproveResponse {
		resp, err := c.Approve(harness.Ctx(key, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
			Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE, EditedArgs: edited})
		require.NoError(t, err)
		return resp
	}
	executed := func(op *opledgerv1.Operation) {
		resp, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	}

	// 30.00 EUR: READY at Prepare, executed at once.
	small, err := refund(3000, "EUR")
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_READY, small.GetOperation().GetState())
	executed(small.GetOperation())

	// 60.00 EUR: one approver.
	mid, err := refund(6000, "EUR")
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, mid.GetOperation().GetState())
	require.EqualValues(t, 1, mid.GetOperation().GetApproval().GetApprovalsNeeded())
	require.Equal(t, "approval.when", mid.GetOperation().GetApproval().GetRule())
	require.Equal(t, opledgerv1.State_STATE_READY, decide(first, mid.GetOperation(), nil).GetOperation().GetState())
	executed(mid.GetOperation())

	// 1,500.00 EUR: two distinct approvers.
	big, err := refund(150000, "EUR")
	require.NoError(t, err)
	require.EqualValues(t, 2, big.GetOperation().GetApproval().GetApprovalsNeeded())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, decide(first, big.GetOperation(), nil).GetOperation().GetState())
	require.Equal(t, opledgerv1.State_STATE_READY, decide(second, big.GetOperation(), nil).GetOperation().GetState())
	executed(big.GetOperation())

	// 20.00 USD: refused, nothing stored.
	_, err = refund(2000, "USD")
	st, _ := status.FromError(err)
	require.Equal(t, codes.FailedPrecondition, st.Code())
	require.Contains(t, st.Message(), "refunds are paid in EUR only")
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	require.Equal(t, "POLICY_DENIED", info.GetReason())
	require.Equal(t, "deny.eur_only", info.GetMetadata()["rule"])

	// 1,500.00 EUR edited to 900.00 by an approver: one charge of 900.00.
	edit, err := refund(150000, "EUR")
	require.NoError(t, err)
	m := edit.GetOperation().GetArgs().AsMap()
	m["amount_minor"] = 90000
	edited, err := structpb.NewStruct(m)
	require.NoError(t, err)
	resp := decide(first, edit.GetOperation(), edited)
	require.Equal(t, opledgerv1.State_STATE_REJECTED, resp.GetOperation().GetState())
	require.Equal(t, resp.GetEdited().GetId(), resp.GetOperation().GetSupersededBy())
	require.Equal(t, opledgerv1.State_STATE_READY, resp.GetEdited().GetState())
	executed(resp.GetEdited())
	charges := env.Fakepay.Charges()
	require.Len(t, charges, 4)
	require.EqualValues(t, 90000, charges[3].AmountMinor)
}

// TestBudgetDocWorkedExample runs docs/policy.md's budget example as
// written: its tools file served by a real `opledger serve`, and each row of
// its table of calls.
func TestBudgetDocWorkedExample(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "policy.md"))
	require.NoError(t, err)
	toolsYAML := docBlock(t, string(raw), "## Worked example: a refund budget", "yaml")

	env := harness.New(t, harness.Options{ToolsYAML: []byte(toolsYAML)})
	c := env.StartProcess(harness.ProcessOptions{}).Client
	agent := env.Key("acme", "agent")
	refund := func(order, customer string, amount float64) (*opledgerv1.PrepareResponse, error) {
		args, err := structpb.NewStruct(map[string]any{"order_id": order, "customer_id": customer, "amount_minor": amount, "currency": "EUR"})
		require.NoError(t, err)
		return c.Prepare(harness.Ctx(agent, harness.Unique("refund")), &opledgerv1.PrepareRequest{Tool: "refund_order", Args: args, Execute: true})
	}
	refused := func(err error, code codes.Code, reason string) *errdetails.ErrorInfo {
		t.Helper()
		st, _ := status.FromError(err)
		require.Equal(t, code, st.Code(), "%v", err)
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				require.Equal(t, reason, i.GetReason())
				return i
			}
		}
		t.Fatalf("no ErrorInfo in %v", err)
		return nil
	}
	var first string
	for i := 1; i <= 3; i++ {
		resp, err := refund(fmt.Sprintf("order-%d", i), "c-1", 10000)
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
		if i == 1 {
			first = resp.GetOperation().GetId()
		}
	}
	_, err = refund("order-4", "c-1", 10000)
	info := refused(err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	require.Equal(t, map[string]string{"limit": "refunds_per_customer", "scope": "c-1", "window": "1h0m0s"}, info.GetMetadata())
	_, err = refund("order-1", "c-2", 10000)
	info = refused(err, codes.AlreadyExists, "OPERATION_DUPLICATE")
	require.Equal(t, first, info.GetMetadata()["operation_id"])
	_, err = refund("order-5", "c-2", 25000)
	info = refused(err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	require.Equal(t, "daily_refund_total", info.GetMetadata()["limit"])
	resp, err := refund("order-6", "c-2", 20000)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, env.Fakepay.Charges(), 4)
}
