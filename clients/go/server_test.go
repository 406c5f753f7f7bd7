package client_test

// End to end against a real opledger: the server clients/test.sh starts
// (clients/run-server.sh) and describes in OPLEDGER_ADDR, AGENT_KEY,
// APPROVER_KEY, OTHER_AGENT_KEY and FAKEPAY_URL. Without them these tests
// skip; with OPLEDGER_REQUIRE_SERVER=1 they fail instead. The server is
// shared with the other suites and between tests, so every test uses its own
// invoice ids and keys, and counts charges per invoice.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/clients/go/internal/require"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// world is the shared server with an agent, an approver and another
// tenant's agent, all on one connection.
type world struct {
	agent    *client.Client
	approver *client.Client
	other    *client.Client
	fakepay  string
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("OPLEDGER_REQUIRE_SERVER") == "1" {
			t.Fatalf("%s is not set and OPLEDGER_REQUIRE_SERVER=1", name)
		}
		t.Skipf("%s is not set: run clients/test.sh go (or source clients/run-server.sh's env file)", name)
	}
	return v
}

func newWorld(t *testing.T) *world {
	t.Helper()
	addr := env(t, "OPLEDGER_ADDR")
	agent, err := client.New(addr, env(t, "AGENT_KEY"), client.WithPlaintext())
	require.NoError(t, err)
	t.Cleanup(func() { _ = agent.Close() })
	return &world{
		agent:    agent,
		approver: agent.WithAPIKey(env(t, "APPROVER_KEY")),
		other:    agent.WithAPIKey(env(t, "OTHER_AGENT_KEY")),
		fakepay:  strings.TrimRight(env(t, "FAKEPAY_URL"), "/"),
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newInvoiceID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "INV-GO-" + strings.ToUpper(hex.EncodeToString(b))
}

func invoice(id string, amount int) map[string]any {
	return map[string]any{"invoice_id": id, "amount_minor": amount, "currency": "EUR"}
}

func testKey(t *testing.T, conversation, call string) string {
	t.Helper()
	k, err := client.DeriveKey(client.KeyParts{Conversation: conversation, Round: 1, ToolCall: call, Tool: "pay_invoice"})
	require.NoError(t, err)
	return k
}

// charges counts the fake processor's charges for one invoice.
func (w *world) charges(t *testing.T, invoiceID string) int {
	t.Helper()
	resp, err := http.Get(w.fakepay + "/charges")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			InvoiceID string `json:"invoice_id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	n := 0
	for _, c := range list.Data {
		if c.InvoiceID == invoiceID {
			n++
		}
	}
	return n
}

// setFaults replaces the fake processor's faults ("" clears them) until the
// test ends. Tests that use it are not parallel: the faults are global.
func (w *world) setFaults(t *testing.T, faults string) {
	t.Helper()
	put := func(body string) error {
		method := http.MethodPut
		if body == "" {
			method = http.MethodDelete
		}
		req, err := http.NewRequest(method, w.fakepay+"/admin/faults", bytes.NewBufferString(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("faults: %s", resp.Status)
		}
		return nil
	}
	require.NoError(t, put(faults))
	t.Cleanup(func() { _ = put("") })
}

func TestPrepareTwiceReplaysTheSameOperation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	id := newInvoiceID()
	key := testKey(t, id, "call_1")

	first, err := w.agent.Prepare(ctx, "pay_invoice", invoice(id, 4900), key)
	require.NoError(t, err)
	require.False(t, first.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, first.GetOperation().GetState())

	// The same call again, with the args spelled differently (JSON text, 4900.0): same fingerprint.
	second, err := w.agent.Prepare(ctx, "pay_invoice", json.RawMessage(fmt.Sprintf(`{"currency":"EUR","amount_minor":4900.0,"invoice_id":%q}`, id)), key)
	require.NoError(t, err)
	require.True(t, second.GetReplayed())
	require.Equal(t, first.GetOperation().GetId(), second.GetOperation().GetId())
	require.Equal(t, first.GetOperation().GetFingerprint(), second.GetOperation().GetFingerprint())
}

func TestPrepareWithChangedArgsIsKeyReused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	id := newInvoiceID()
	key := testKey(t, id, "call_1")
	first, err := w.agent.Prepare(ctx, "pay_invoice", invoice(id, 4900), key)
	require.NoError(t, err)

	_, err = w.agent.Prepare(ctx, "pay_invoice", invoice(id, 49000), key)
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
	ctx := ctxFor(t)
	id := newInvoiceID()
	prep, err := w.agent.Prepare(ctx, "pay_invoice", invoice(id, 4900), testKey(t, id, "call_1"))
	require.NoError(t, err)
	op := prep.GetOperation()

	_, err = w.agent.Execute(ctx, op.GetId())
	require.ErrorIs(t, err, client.ReasonApprovalRequired)

	// The approver checks that what it shows is what it approves.
	require.NoError(t, client.CheckFingerprint(op))
	fp, err := client.Fingerprint(op.GetTenant(), "pay_invoice", op.GetToolVersion(), invoice(id, 4900))
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
	require.Equal(t, 1, w.charges(t, id))

	// The answer was "lost": execute again.
	again, err := w.agent.Execute(ctx, op.GetId())
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.Equal(t, ex.GetOperation().GetExternalRef(), again.GetOperation().GetExternalRef())
	require.Equal(t, 1, w.charges(t, id))

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
	ctx := ctxFor(t)
	id := newInvoiceID()
	prep, err := w.agent.Prepare(ctx, "pay_invoice", invoice(id, 4900), testKey(t, id, "call_1"))
	require.NoError(t, err)

	for name, call := range map[string]func() error{
		"get":     func() error { _, err := w.other.Get(ctx, prep.GetOperation().GetId()); return err },
		"execute": func() error { _, err := w.other.Execute(ctx, prep.GetOperation().GetId()); return err },
		"cancel":  func() error { _, err := w.other.Cancel(ctx, prep.GetOperation().GetId(), ""); return err },
	} {
		err := call()
		require.ErrorIs(t, err, client.ReasonOperationNotFound, name)
		require.Equal(t, codes.NotFound, status.Code(err), name)
	}
}

func TestValidationErrorsAreTyped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	id := newInvoiceID()

	_, err := w.agent.Prepare(ctx, "pay_invoice", map[string]any{"invoice_id": id, "amount_minor": -1, "currency": "EUR"}, testKey(t, id, "c"))
	require.ErrorIs(t, err, client.ReasonArgsInvalid)
	_, err = w.agent.Prepare(ctx, "no_such_tool", nil, testKey(t, id, "c"))
	require.ErrorIs(t, err, client.ReasonToolUnknown)

	bad := w.agent.WithAPIKey("opl_not-a-real-key")
	_, err = bad.Get(ctx, "op_00000000000000000000000000")
	require.ErrorIs(t, err, client.ReasonAPIKeyInvalid)
	require.False(t, errors.Is(err, client.ReasonAPIKeyMissing))
}

// TestListToolsOperationsAndCancel is not parallel: it pages through the
// tenant's newest pending operations, which no other test may add to
// meanwhile.
func TestListToolsOperationsAndCancel(t *testing.T) {
	w := newWorld(t)
	ctx := ctxFor(t)

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
		id := newInvoiceID()
		prep, err := w.agent.Prepare(ctx, "pay_invoice", invoice(id, 4900+i), testKey(t, id, "call"))
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
	require.Equal(t, ids[0], page2.GetOperations()[0].GetId())

	// The token is bound to the filters; another tenant sees none of it.
	_, err = w.approver.ListOperations(ctx, client.WithPageToken(page1.GetNextPageToken()))
	require.ErrorIs(t, err, client.ReasonFieldInvalid)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	theirs, err := w.other.ListOperations(ctx, client.WithPageSize(200))
	require.NoError(t, err)
	for _, op := range theirs.GetOperations() {
		for _, id := range ids {
			require.NotEqual(t, id, op.GetId())
		}
	}

	// Cancel takes an operation off the pending list.
	cancelled, err := w.agent.Cancel(ctx, ids[1], "not needed")
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_CANCELLED, cancelled.GetOperation().GetState())
	again, err := w.agent.Cancel(ctx, ids[1], "not needed")
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	left, err := w.approver.ListOperations(ctx, pending, client.WithTool("pay_invoice"), client.WithPageSize(2))
	require.NoError(t, err)
	require.Equal(t, []string{ids[2], ids[0]}, []string{left.GetOperations()[0].GetId(), left.GetOperations()[1].GetId()})
}

func TestToolRunnerModelToolsAreTheCurrentTools(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tools, err := client.NewToolRunner(w.agent, client.RunnerOptions{}).ModelTools(ctxFor(t))
	require.NoError(t, err)
	byName := map[string]client.ModelTool{}
	for _, tl := range tools {
		_, dup := byName[tl.Name]
		require.False(t, dup, "one entry per tool: %s", tl.Name)
		byName[tl.Name] = tl
	}
	pay := byName["pay_invoice"]
	require.Equal(t, "1", pay.Version)
	require.True(t, pay.ApprovalRequired)
	require.Equal(t, "side_effect", pay.Effect)
	require.NotEmpty(t, pay.Description)
	require.Equal(t, "object", pay.ArgsSchema["type"])
	require.Contains(t, pay.ArgsSchema["properties"], "amount_minor")
	require.Contains(t, byName, "send_email")
}

// TestToolRunnerResumesAfterApproval: a call that needs approval answers
// AwaitingApproval at once; after a person approves, the same call (same
// key) runs it, and running it again replays the one charge.
func TestToolRunnerResumesAfterApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{})
	id := newInvoiceID()
	args := json.RawMessage(fmt.Sprintf(`{"invoice_id":%q,"amount_minor":4900,"currency":"EUR"}`, id))
	key := testKey(t, id, "call_1")

	out, err := runner.Run(ctx, "pay_invoice", args, key)
	require.NoError(t, err)
	waiting, ok := out.(*client.AwaitingApproval)
	require.True(t, ok, "got %T", out)
	require.NotEmpty(t, waiting.OperationID())
	require.Equal(t, `{"message":"`+client.MessageAwaitingApproval+`","operation_id":"`+waiting.OperationID()+`","status":"awaiting_approval"}`, out.ForModel())
	require.Equal(t, 0, w.charges(t, id))

	op := waiting.Operation
	require.NoError(t, client.CheckFingerprint(op))
	_, err = w.approver.Approve(ctx, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE, "ok")
	require.NoError(t, err)

	out, err = runner.Run(ctx, "pay_invoice", args, key)
	require.NoError(t, err)
	done, ok := out.(*client.Succeeded)
	require.True(t, ok, "got %T", out)
	require.Equal(t, op.GetId(), done.OperationID())
	require.Equal(t, id, done.Result["invoice_id"])
	require.Equal(t, done.Operation.GetExternalRef(), done.Result["id"])
	require.Equal(t, 1, w.charges(t, id))
	var forModel map[string]any
	require.NoError(t, json.Unmarshal([]byte(out.ForModel()), &forModel))
	require.Equal(t, "succeeded", forModel["status"])
	require.Equal(t, done.Result, forModel["result"])

	again, err := runner.Run(ctx, "pay_invoice", args, key)
	require.NoError(t, err)
	require.Equal(t, out.ForModel(), again.ForModel())
	require.Equal(t, 1, w.charges(t, id))
}

// TestToolRunnerWaitsForAnInProcessApproval: the hook approves (as a person
// at a prompt would) and Run waits for that decision, then executes.
func TestToolRunnerWaitsForAnInProcessApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	calls := 0
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{
		ApprovalWait: 20 * time.Second,
		OnApprovalRequired: func(ctx context.Context, op *opledgerv1.Operation) error {
			calls++
			go func() { // a person decides a moment later
				time.Sleep(300 * time.Millisecond)
				_, _ = w.approver.Approve(context.Background(), op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE, "ok")
			}()
			return nil
		},
	})
	id := newInvoiceID()
	out, err := runner.Run(ctx, "pay_invoice", invoice(id, 4900), testKey(t, id, "call_1"))
	require.NoError(t, err)
	_, ok := out.(*client.Succeeded)
	require.True(t, ok, "got %T: %s", out, out.ForModel())
	require.Equal(t, 1, calls)
	require.Equal(t, 1, w.charges(t, id))
}

// TestToolRunnerTurnsRefusalsIntoFailed: what the model can correct (bad
// args, a denied call) is a Failed with its reason, never an error.
func TestToolRunnerTurnsRefusalsIntoFailed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	id := newInvoiceID()
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{
		ApprovalWait: 20 * time.Second,
		OnApprovalRequired: func(ctx context.Context, op *opledgerv1.Operation) error {
			_, err := w.approver.Approve(ctx, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY, "not this one")
			return err
		},
	})

	out, err := runner.Run(ctx, "pay_invoice", invoice(id, -1), testKey(t, id, "bad"))
	require.NoError(t, err)
	f, ok := out.(*client.Failed)
	require.True(t, ok, "got %T", out)
	require.Equal(t, client.ReasonArgsInvalid, f.Reason)
	require.Equal(t, "", f.OperationID())
	require.True(t, strings.HasPrefix(out.ForModel(), `{"message":`), out.ForModel())
	require.True(t, strings.HasSuffix(out.ForModel(), `"reason":"ARGS_INVALID","status":"failed"}`), out.ForModel())

	out, err = runner.Run(ctx, "pay_invoice", invoice(id, 4900), testKey(t, id, "denied"))
	require.NoError(t, err)
	f, ok = out.(*client.Failed)
	require.True(t, ok, "got %T", out)
	require.Equal(t, client.ReasonOperationRejected, f.Reason)
	require.NotEmpty(t, f.OperationID())
	require.Equal(t, 0, w.charges(t, id))
}

// TestToolRunnerOutcomeUnknownIsNotAFailure: the mail service answers 500
// after it sent the mail and does not dedupe, so the ledger cannot know: the
// answer is OutcomeUnknown, and repeating the call never sends a second
// mail. Not parallel: it sets the fake processor's faults.
func TestToolRunnerOutcomeUnknownIsNotAFailure(t *testing.T) {
	w := newWorld(t)
	ctx := ctxFor(t)
	w.setFaults(t, `{"fail_after_commit":{"next":1}}`)
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{})
	to := strings.ToLower(newInvoiceID()) + "@example.com"
	args := map[string]any{"to": to, "subject": "receipt", "body": "paid"}
	key, err := client.DeriveKey(client.KeyParts{Conversation: to, Round: 1, Tool: "send_email"})
	require.NoError(t, err)

	out, err := runner.Run(ctx, "send_email", args, key)
	require.NoError(t, err)
	unknown, ok := out.(*client.OutcomeUnknown)
	require.True(t, ok, "got %T: %s", out, out.ForModel())
	_, isFailed := out.(*client.Failed)
	require.False(t, isFailed)
	require.False(t, unknown.Pending)
	require.Equal(t, `{"message":"`+client.MessageOutcomeUnknown+`","operation_id":"`+unknown.OperationID()+`","status":"outcome_unknown"}`, out.ForModel())

	again, err := runner.Run(ctx, "send_email", args, key)
	require.NoError(t, err)
	_, ok = again.(*client.OutcomeUnknown)
	require.True(t, ok, "got %T", again)
	require.Equal(t, unknown.OperationID(), again.OperationID())
	require.Equal(t, 1, w.emails(t, to))
}

// emails counts the mails the fake processor took for one recipient.
func (w *world) emails(t *testing.T, to string) int {
	t.Helper()
	resp, err := http.Get(w.fakepay + "/emails")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			To string `json:"to"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	n := 0
	for _, e := range list.Data {
		if e.To == to {
			n++
		}
	}
	return n
}

// TestToolRunnerRunsAToolWithoutApproval: send_email needs no approval, so
// one Run sends it (Prepare with execute), and running it again replays the
// answer without a second mail.
func TestToolRunnerRunsAToolWithoutApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := ctxFor(t)
	runner := client.NewToolRunner(w.agent, client.RunnerOptions{})
	to := strings.ToLower(newInvoiceID()) + "@example.com"
	args := json.RawMessage(fmt.Sprintf(`{"to":%q,"subject":"receipt","body":"paid"}`, to))
	key, err := client.DeriveKey(client.KeyParts{Conversation: to, Round: 1, ToolCall: "call_1", Tool: "send_email"})
	require.NoError(t, err)

	out, err := runner.Run(ctx, "send_email", args, key)
	require.NoError(t, err)
	done, ok := out.(*client.Succeeded)
	require.True(t, ok, "got %T: %s", out, out.ForModel())
	require.Equal(t, done.Operation.GetExternalRef(), done.Result["id"])
	again, err := runner.Run(ctx, "send_email", args, key)
	require.NoError(t, err)
	require.Equal(t, out.ForModel(), again.ForModel())
	require.Equal(t, 1, w.emails(t, to))
}
