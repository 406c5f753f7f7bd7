package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/harness"
)

// world is a real server with an agent, an approver and another tenant's
// agent, each a client.
type world struct {
	env      *harness.Env
	agent    *client.Client
	approver *client.Client
	other    *client.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	agent, err := client.New(srv.Addr, env.Key("demo", "agent"), client.WithInsecure())
	require.NoError(t, err)
	t.Cleanup(func() { _ = agent.Close() })
	return &world{
		env:      env,
		agent:    agent,
		approver: agent.WithAPIKey(env.Key("demo", "approver")),
		other:    agent.WithAPIKey(env.Key("other", "agent")),
	}
}

func invoice(amount int) map[string]any {
	return map[string]any{"invoice_id": "INV-2048", "amount_minor": amount, "currency": "EUR"}
}

func testKey(t *testing.T, call string) string {
	t.Helper()
	k, err := client.DeriveKey(client.KeyParts{Conversation: t.Name(), Round: 1, ToolCall: call, Tool: "pay_invoice", ToolVersion: ""})
	require.NoError(t, err)
	return k
}

func TestPrepareTwiceReplaysTheSameOperation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	key := testKey(t, "call_1")

	first, err := w.agent.Prepare(ctx, "pay_invoice", invoice(4900), key)
	require.NoError(t, err)
	require.False(t, first.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, first.GetOperation().GetState())

	// The same call again, with the args spelled differently (JSON text, 4900.0): same fingerprint.
	second, err := w.agent.Prepare(ctx, "pay_invoice", json.RawMessage(`{"currency":"EUR","amount_minor":4900.0,"invoice_id":"INV-2048"}`), key)
	require.NoError(t, err)
	require.True(t, second.GetReplayed())
	require.Equal(t, first.GetOperation().GetId(), second.GetOperation().GetId())
	require.Equal(t, first.GetOperation().GetFingerprint(), second.GetOperation().GetFingerprint())
}

func TestPrepareWithChangedArgsIsKeyReused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	key := testKey(t, "call_1")
	first, err := w.agent.Prepare(ctx, "pay_invoice", invoice(4900), key)
	require.NoError(t, err)

	_, err = w.agent.Prepare(ctx, "pay_invoice", invoice(49000), key)
	require.ErrorIs(t, err, client.ReasonIdempotencyKeyReused)
	require.Equal(t, client.ReasonIdempotencyKeyReused, client.ReasonOf(err))
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, codes.AlreadyExists, e.Code)
	require.Equal(t, codes.AlreadyExists, status.Code(err))
	require.False(t, e.Retryable())
	require.Equal(t, first.GetOperation().GetId(), e.Metadata["operation_id"])
	require.Equal(t, opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED, e.Reason.Enum())
}

func TestApproveExecuteMakesOneCharge(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	prep, err := w.agent.Prepare(ctx, "pay_invoice", invoice(4900), testKey(t, "call_1"))
	require.NoError(t, err)
	op := prep.GetOperation()

	_, err = w.agent.Execute(ctx, op.GetId())
	require.ErrorIs(t, err, client.ReasonApprovalRequired)

	// The approver checks that what it shows is what it approves.
	require.NoError(t, client.CheckFingerprint(op))
	fp, err := client.Fingerprint("demo", "pay_invoice", op.GetToolVersion(), invoice(4900))
	require.NoError(t, err)
	require.Equal(t, op.GetFingerprint(), fp)

	_, err = w.agent.Approve(ctx, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE, "self")
	require.ErrorIs(t, err, client.ReasonRoleRequired)
	appr, err := w.approver.Approve(ctx, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE, "customer confirmed")
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_READY, appr.GetOperation().GetState())

	ex, err := w.agent.Execute(ctx, op.GetId(), client.WithWait(5*time.Second))
	require.NoError(t, err)
	require.False(t, ex.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, ex.GetOperation().GetState())
	require.NotEmpty(t, ex.GetOperation().GetExternalRef())
	require.Len(t, w.env.Fakepay.Charges(), 1)

	// The answer was "lost": execute again.
	again, err := w.agent.Execute(ctx, op.GetId())
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.Equal(t, ex.GetOperation().GetExternalRef(), again.GetOperation().GetExternalRef())
	require.Len(t, w.env.Fakepay.Charges(), 1)

	got, err := w.approver.Get(ctx, op.GetId(), client.WithEvents())
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetOperation().GetState())
	require.NotEmpty(t, got.GetEvents())

	rec, err := w.agent.Reconcile(ctx, op.GetId())
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, rec.GetOperation().GetState())
}

func TestAnotherTenantGetsNotFound(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	prep, err := w.agent.Prepare(ctx, "pay_invoice", invoice(4900), testKey(t, "call_1"))
	require.NoError(t, err)

	for name, call := range map[string]func() error{
		"get":     func() error { _, err := w.other.Get(ctx, prep.GetOperation().GetId()); return err },
		"execute": func() error { _, err := w.other.Execute(ctx, prep.GetOperation().GetId()); return err },
	} {
		err := call()
		require.ErrorIs(t, err, client.ReasonOperationNotFound, name)
		require.Equal(t, codes.NotFound, status.Code(err), name)
	}
}

func TestValidationErrorsAreTyped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()

	_, err := w.agent.Prepare(ctx, "pay_invoice", map[string]any{"invoice_id": "INV-1", "amount_minor": -1, "currency": "EUR"}, testKey(t, "c"))
	require.ErrorIs(t, err, client.ReasonArgsInvalid)
	_, err = w.agent.Prepare(ctx, "no_such_tool", nil, testKey(t, "c"))
	require.ErrorIs(t, err, client.ReasonToolUnknown)

	bad := w.agent.WithAPIKey("opl_not-a-real-key")
	_, err = bad.Get(ctx, "op_00000000000000000000000000")
	require.ErrorIs(t, err, client.ReasonAPIKeyInvalid)
	require.False(t, errors.Is(err, client.ReasonAPIKeyMissing))
}

func TestListToolsOperationsAndCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()

	tools, err := w.approver.ListTools(ctx)
	require.NoError(t, err)
	var pay *opledgerv1.Tool
	for _, tl := range tools.GetTools() {
		if tl.GetName() == "pay_invoice" {
			pay = tl
		}
	}
	require.NotNil(t, pay)
	require.True(t, pay.GetApprovalRequired())
	require.Equal(t, opledgerv1.Effect_EFFECT_SIDE_EFFECT, pay.GetEffect())
	require.Contains(t, pay.GetArgsSchema().AsMap()["properties"], "amount_minor")

	var ids []string // oldest first
	for i := range 3 {
		prep, err := w.agent.Prepare(ctx, "pay_invoice", invoice(4900+i), testKey(t, "call_"+string(rune('a'+i))))
		require.NoError(t, err)
		ids = append(ids, prep.GetOperation().GetId())
	}
	pending := client.WithStates(opledgerv1.State_STATE_AWAITING_APPROVAL)
	page1, err := w.approver.ListOperations(ctx, pending, client.WithTool("pay_invoice"), client.WithPageSize(2))
	require.NoError(t, err)
	require.Len(t, page1.GetOperations(), 2)
	require.Equal(t, []string{ids[2], ids[1]}, []string{page1.GetOperations()[0].GetId(), page1.GetOperations()[1].GetId()})
	require.NotEmpty(t, page1.GetNextPageToken())
	page2, err := w.approver.ListOperations(ctx, pending, client.WithTool("pay_invoice"), client.WithPageSize(2),
		client.WithPageToken(page1.GetNextPageToken()))
	require.NoError(t, err)
	require.Len(t, page2.GetOperations(), 1)
	require.Equal(t, ids[0], page2.GetOperations()[0].GetId())
	require.Empty(t, page2.GetNextPageToken())

	// The token is bound to the filters; another tenant sees none of it.
	_, err = w.approver.ListOperations(ctx, client.WithPageToken(page1.GetNextPageToken()))
	require.ErrorIs(t, err, client.ReasonFieldInvalid)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	theirs, err := w.other.ListOperations(ctx)
	require.NoError(t, err)
	require.Empty(t, theirs.GetOperations())

	// Cancel takes an operation off the pending list.
	cancelled, err := w.agent.Cancel(ctx, ids[1], "not needed")
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_CANCELLED, cancelled.GetOperation().GetState())
	again, err := w.agent.Cancel(ctx, ids[1], "not needed")
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	left, err := w.approver.ListOperations(ctx, pending)
	require.NoError(t, err)
	require.Len(t, left.GetOperations(), 2)
	require.Equal(t, ids[2], left.GetOperations()[0].GetId())
	require.Equal(t, ids[0], left.GetOperations()[1].GetId())
}
