package server_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestListTools: every role of any tenant gets the tools file's tools with
// their descriptions, effects, approval policies and schemas.
func TestListTools(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	for _, key := range []string{env.Key("acme", "agent"), env.Key("acme", "approver"), env.Key("globex", "operator")} {
		resp, err := c.ListTools(harness.Ctx(key, ""), &opledgerv1.ListToolsRequest{})
		require.NoError(t, err)
		tools := resp.GetTools()
		require.Len(t, tools, 2)
		pay, email := tools[0], tools[1]
		require.Equal(t, "pay_invoice", pay.GetName())
		require.Equal(t, "1", pay.GetVersion())
		require.True(t, pay.GetCurrent())
		require.Contains(t, pay.GetDescription(), "Pay one invoice")
		require.Equal(t, opledgerv1.Effect_EFFECT_SIDE_EFFECT, pay.GetEffect())
		require.True(t, pay.GetApprovalRequired())
		require.Equal(t, 15*time.Minute, pay.GetApprovalTtl().AsDuration())
		schema := pay.GetArgsSchema().AsMap()
		require.Equal(t, "object", schema["type"])
		require.ElementsMatch(t, []any{"invoice_id", "amount_minor", "currency"}, schema["required"])
		amount := schema["properties"].(map[string]any)["amount_minor"].(map[string]any)
		require.Equal(t, "integer", amount["type"])

		require.Equal(t, "send_email", email.GetName())
		require.False(t, email.GetApprovalRequired())
		require.Nil(t, email.GetApprovalTtl())
		require.Equal(t, opledgerv1.Effect_EFFECT_SIDE_EFFECT, email.GetEffect())
		require.NotEmpty(t, email.GetDescription())
	}
}

// TestListToolsVersionsAndEffects: every version is listed and only the last
// declared one is current; each effect of the tools file maps to its enum.
func TestListToolsVersionsAndEffects(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: []byte(`tools:
  - name: lookup
    version: "1"
    description: Read a record.
    effect: read_only
    args_schema: {type: object}
    executor: {type: http, url: "${OPLEDGER_FAKEPAY_URL}/x"}
  - name: lookup
    version: "2"
    description: Read a record, v2.
    effect: idempotent
    args_schema: {type: object}
    executor: {type: http, url: "${OPLEDGER_FAKEPAY_URL}/x", dedupes_keys: true}
`)})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	resp, err := c.ListTools(harness.Ctx(env.Key("acme", "agent"), ""), &opledgerv1.ListToolsRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetTools(), 2)
	v1, v2 := resp.GetTools()[0], resp.GetTools()[1]
	require.Equal(t, []string{"1", "2"}, []string{v1.GetVersion(), v2.GetVersion()})
	require.False(t, v1.GetCurrent())
	require.True(t, v2.GetCurrent())
	require.Equal(t, opledgerv1.Effect_EFFECT_READ_ONLY, v1.GetEffect())
	require.Equal(t, opledgerv1.Effect_EFFECT_IDEMPOTENT, v2.GetEffect())
}

// listIDs pages through ListOperations with req and returns every id, in
// order, and how many pages it took.
func listIDs(t *testing.T, c opledgerv1.LedgerServiceClient, key string, req *opledgerv1.ListOperationsRequest) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for {
		resp, err := c.ListOperations(harness.Ctx(key, ""), req)
		require.NoError(t, err)
		pages++
		for _, op := range resp.GetOperations() {
			ids = append(ids, op.GetId())
		}
		if resp.GetNextPageToken() == "" {
			return ids, pages
		}
		require.Len(t, resp.GetOperations(), int(max(req.GetPageSize(), 1)), "a page before the last is full")
		req.PageToken = resp.GetNextPageToken()
		require.Less(t, pages, 1000)
	}
}

// TestListOperations: a tenant's operations, newest first, filtered by
// state and tool, paged with tokens, and nothing of another tenant.
func TestListOperations(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agent, approver, operator := env.Key("acme", "agent"), env.Key("acme", "approver"), env.Key("acme", "operator")
	otherAgent := env.Key("globex", "agent")

	var payments, emails []string // newest last
	for i := range 7 {
		payments = append(payments, prepare(t, c, agent, fmt.Sprintf("pay-%d", i), "pay_invoice", invoiceArgs(t, 100+i)).GetOperation().GetId())
		emails = append(emails, prepare(t, c, agent, fmt.Sprintf("mail-%d", i), "send_email", emailArgs(t, "hello")).GetOperation().GetId())
	}
	otherOp := prepare(t, c, otherAgent, "pay-0", "pay_invoice", invoiceArgs(t, 100)).GetOperation().GetId()
	// One payment denied: REJECTED.
	op := get(t, c, approver, payments[3], false).GetOperation()
	_, err := c.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
		Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_DENY, Reason: "duplicate invoice"})
	require.NoError(t, err)

	newestFirst := func(ids ...[]string) []string {
		var all []string
		for i := len(ids[0]) - 1; i >= 0; i-- {
			for j := len(ids) - 1; j >= 0; j-- {
				all = append(all, ids[j][i])
			}
		}
		return all
	}

	t.Run("every role sees the whole tenant, newest first, over several pages", func(t *testing.T) {
		want := newestFirst(payments, emails) // emails were prepared after payments of the same round
		for _, key := range []string{agent, approver, operator} {
			got, pages := listIDs(t, c, key, &opledgerv1.ListOperationsRequest{PageSize: 4})
			require.Equal(t, want, got)
			require.Equal(t, 4, pages)
		}
	})
	t.Run("another tenant sees only its own", func(t *testing.T) {
		got, _ := listIDs(t, c, otherAgent, &opledgerv1.ListOperationsRequest{})
		require.Equal(t, []string{otherOp}, got)
	})
	t.Run("by state", func(t *testing.T) {
		got, _ := listIDs(t, c, approver, &opledgerv1.ListOperationsRequest{
			States: []opledgerv1.State{opledgerv1.State_STATE_AWAITING_APPROVAL}, PageSize: 2})
		want := slices.Clone(payments)
		want = slices.Delete(want, 3, 4)
		slices.Reverse(want)
		require.Equal(t, want, got)

		got, _ = listIDs(t, c, approver, &opledgerv1.ListOperationsRequest{
			States: []opledgerv1.State{opledgerv1.State_STATE_REJECTED, opledgerv1.State_STATE_READY, opledgerv1.State_STATE_REJECTED}, PageSize: 3})
		want = append(slices.Clone(emails), payments[3])
		require.ElementsMatch(t, want, got)
		require.Equal(t, newestFirst(emails)[:3], got[:3])
	})
	t.Run("by tool", func(t *testing.T) {
		got, pages := listIDs(t, c, agent, &opledgerv1.ListOperationsRequest{Tool: "send_email", PageSize: 3})
		require.Equal(t, newestFirst(emails), got)
		require.Equal(t, 3, pages)
		got, _ = listIDs(t, c, agent, &opledgerv1.ListOperationsRequest{Tool: "pay_invoice",
			States: []opledgerv1.State{opledgerv1.State_STATE_REJECTED}})
		require.Equal(t, []string{payments[3]}, got)
		got, _ = listIDs(t, c, agent, &opledgerv1.ListOperationsRequest{Tool: "no_such_tool"})
		require.Empty(t, got)
	})
	t.Run("operations carry what an approver needs", func(t *testing.T) {
		resp, err := c.ListOperations(harness.Ctx(approver, ""), &opledgerv1.ListOperationsRequest{
			States: []opledgerv1.State{opledgerv1.State_STATE_AWAITING_APPROVAL}, Tool: "pay_invoice", PageSize: 1})
		require.NoError(t, err)
		require.Len(t, resp.GetOperations(), 1)
		op := resp.GetOperations()[0]
		require.Equal(t, payments[6], op.GetId())
		require.Equal(t, float64(106), op.GetArgs().AsMap()["amount_minor"])
		require.Equal(t, get(t, c, approver, op.GetId(), false).GetOperation().GetFingerprint(), op.GetFingerprint())
		require.NotNil(t, op.GetCreateTime())
	})
}

// TestListOperationsPageTokens: a token is bound to its tenant and filters,
// and an altered one is refused; tokens work on every replica.
func TestListOperationsPageTokens(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	c := srv.Client
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	otherApprover := env.Key("globex", "approver")
	for i := range 3 {
		prepare(t, c, agent, fmt.Sprintf("pay-%d", i), "pay_invoice", invoiceArgs(t, 100+i))
	}
	pending := []opledgerv1.State{opledgerv1.State_STATE_AWAITING_APPROVAL}
	first, err := c.ListOperations(harness.Ctx(approver, ""), &opledgerv1.ListOperationsRequest{States: pending, PageSize: 1})
	require.NoError(t, err)
	token := first.GetNextPageToken()
	require.NotEmpty(t, token)

	refused := func(t *testing.T, key string, req *opledgerv1.ListOperationsRequest) {
		t.Helper()
		_, err := c.ListOperations(harness.Ctx(key, ""), req)
		st := requireReason(t, err, codes.InvalidArgument, "FIELD_INVALID")
		require.Equal(t, []string{"page_token"}, badRequestFields(st))
	}
	t.Run("tampered", func(t *testing.T) {
		for i := range token {
			b := []byte(token)
			b[i] = "AB"[map[bool]int{true: 1}[b[i] == 'A']]
			refused(t, approver, &opledgerv1.ListOperationsRequest{States: pending, PageSize: 1, PageToken: string(b)})
		}
		refused(t, approver, &opledgerv1.ListOperationsRequest{States: pending, PageToken: token[:len(token)-2]})
		refused(t, approver, &opledgerv1.ListOperationsRequest{States: pending, PageToken: token + "AA"})
		refused(t, approver, &opledgerv1.ListOperationsRequest{States: pending, PageToken: "not a token!"})
	})
	t.Run("another tenant's", func(t *testing.T) {
		refused(t, otherApprover, &opledgerv1.ListOperationsRequest{States: pending, PageSize: 1, PageToken: token})
	})
	t.Run("other filters", func(t *testing.T) {
		refused(t, approver, &opledgerv1.ListOperationsRequest{PageSize: 1, PageToken: token})
		refused(t, approver, &opledgerv1.ListOperationsRequest{States: pending, Tool: "pay_invoice", PageSize: 1, PageToken: token})
		refused(t, approver, &opledgerv1.ListOperationsRequest{
			States: []opledgerv1.State{opledgerv1.State_STATE_AWAITING_APPROVAL, opledgerv1.State_STATE_READY}, PageToken: token})
	})
	t.Run("same filters in another order, another page size, another principal, another replica", func(t *testing.T) {
		other := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
		resp, err := other.ListOperations(harness.Ctx(env.Key("acme", "operator"), ""), &opledgerv1.ListOperationsRequest{
			States: []opledgerv1.State{opledgerv1.State_STATE_AWAITING_APPROVAL, opledgerv1.State_STATE_AWAITING_APPROVAL}, PageSize: 5, PageToken: token})
		require.NoError(t, err)
		require.Len(t, resp.GetOperations(), 2)
		require.Empty(t, resp.GetNextPageToken())
		require.NotEqual(t, first.GetOperations()[0].GetId(), resp.GetOperations()[0].GetId())
	})
}

// TestListOperationsPageSize: 0 means 50, more than 200 means 200, negative
// is refused, as are unknown states and malformed tool names.
func TestListOperationsPageSize(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agent := env.Key("acme", "agent")
	for i := range 205 {
		prepare(t, c, agent, fmt.Sprintf("mail-%d", i), "send_email", emailArgs(t, "hello"))
	}
	for _, tc := range []struct {
		size int32
		want int
	}{{0, 50}, {1, 1}, {200, 200}, {201, 200}, {1 << 30, 200}} {
		resp, err := c.ListOperations(harness.Ctx(agent, ""), &opledgerv1.ListOperationsRequest{PageSize: tc.size})
		require.NoError(t, err)
		require.Len(t, resp.GetOperations(), tc.want, "page_size %d", tc.size)
		require.NotEmpty(t, resp.GetNextPageToken())
	}

	for _, tc := range []struct {
		req   *opledgerv1.ListOperationsRequest
		field string
	}{
		{&opledgerv1.ListOperationsRequest{PageSize: -1}, "page_size"},
		{&opledgerv1.ListOperationsRequest{States: []opledgerv1.State{opledgerv1.State_STATE_UNSPECIFIED}}, "states"},
		{&opledgerv1.ListOperationsRequest{States: []opledgerv1.State{opledgerv1.State_STATE_READY, 99}}, "states"},
		{&opledgerv1.ListOperationsRequest{Tool: "Pay Invoice"}, "tool"},
		{&opledgerv1.ListOperationsRequest{PageToken: string(make([]byte, 300))}, "page_token"},
	} {
		_, err := c.ListOperations(harness.Ctx(agent, ""), tc.req)
		st := requireReason(t, err, codes.InvalidArgument, "FIELD_INVALID")
		require.Equal(t, []string{tc.field}, badRequestFields(st))
	}
}

// TestListToolsServesThePolicy: each tool's rules are served as declared,
// with a summary a model and a person can read and the digest operations
// record.
func TestListToolsServesThePolicy(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: []byte(`tools:
  - name: refund
    version: "1"
    effect: side_effect
    deny:
      - {name: eur_only, when: 'args.currency != "EUR"', message: refunds are paid in EUR only}
    approval:
      when: args.amount_minor >= 5000
      approvers: "args.amount_minor > 100000 ? 2 : 1"
      ttl: 15m
      editable: [amount_minor]
    args_schema:
      type: object
      properties: {amount_minor: {type: integer}, currency: {type: string}}
    executor: {type: http, url: "${OPLEDGER_FAKEPAY_URL}/charges"}
`)})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	resp, err := c.ListTools(harness.Ctx(env.Key("acme", "agent"), ""), &opledgerv1.ListToolsRequest{})
	require.NoError(t, err)
	rt := resp.GetTools()[0]
	require.True(t, rt.GetApprovalRequired(), "some calls need an approval")
	require.Equal(t, 15*time.Minute, rt.GetApprovalTtl().AsDuration())
	p := rt.GetPolicy()
	require.Len(t, p.GetDigest(), 64)
	require.Len(t, p.GetDeny(), 1)
	require.Equal(t, "eur_only", p.GetDeny()[0].GetName())
	require.Equal(t, `args.currency != "EUR"`, p.GetDeny()[0].GetWhen())
	require.Equal(t, "refunds are paid in EUR only", p.GetDeny()[0].GetMessage())
	require.Equal(t, "args.amount_minor >= 5000", p.GetApprovalWhen())
	require.Equal(t, "args.amount_minor > 100000 ? 2 : 1", p.GetApproversExpr())
	require.Equal(t, []string{"amount_minor"}, p.GetEditable())
	require.Equal(t, `refused when args.currency != "EUR" (eur_only: refunds are paid in EUR only); `+
		`needs as many distinct approvers as args.amount_minor > 100000 ? 2 : 1 when args.amount_minor >= 5000; `+
		`an approver may edit amount_minor`, p.GetSummary())
}
