package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// bundle is a Ledger on a real database (the test's own, migrated) with the
// fake processor behind the demo tools, and no gRPC: no server, no
// interceptors, no encoding, no background workers. A ledger rule's test
// drives it directly, so that it tests the rule and nothing the server
// adds; what the server adds (roles, the reason → code table, the wire
// form) keeps its tests over gRPC (newWorld).
type bundle struct {
	t   *testing.T
	env *harness.Env
	l   *ledger.Ledger
	// agent, approver and operator are principals of tenant acme with
	// that role, as the server's authentication hands them to the ledger.
	agent, approver, operator ledger.Actor
}

// newBundle starts a bundle on an Env shaped by opts (its tools file)
// whose ledger has cfg (its secret is the Env's).
func newBundle(t *testing.T, opts harness.Options, cfg ledger.Config) *bundle {
	t.Helper()
	env := harness.New(t, opts)
	cfg.DownstreamSecret = env.Secret
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := ledger.New(cfg, env.Store, env.Tools(), executor.NewDefaultRegistry(nil, logger), nil, logger)
	require.NoError(t, err)
	b := &bundle{t: t, env: env, l: l}
	b.agent, b.approver, b.operator = b.actor("acme", "agent"), b.actor("acme", "approver"), b.actor("acme", "operator")
	return b
}

// actor creates a principal with roles in tenant and authenticates it.
func (b *bundle) actor(tenant string, roles ...string) ledger.Actor {
	b.t.Helper()
	a, err := b.l.Authenticate(context.Background(), b.env.Key(tenant, roles...))
	require.NoError(b.t, err)
	return a
}

// prepare prepares a call of tool under a new idempotency key.
func (b *bundle) prepare(a ledger.Actor, tool string, args *structpb.Struct) ledger.Operation {
	b.t.Helper()
	op, replayed, err := b.l.Prepare(context.Background(), a, ledger.PrepareInput{Tool: tool, Args: args,
		IdempotencyKey: harness.Unique("idem"), Method: opledgerv1.LedgerService_Prepare_FullMethodName})
	require.NoError(b.t, err)
	require.False(b.t, replayed)
	return op
}

// decide records a's decision on op, bound to fingerprint fp.
func (b *bundle) decide(a ledger.Actor, id, fp, decision string) (ledger.Operation, bool, error) {
	return b.l.Approve(context.Background(), a, ledger.ApproveInput{OperationID: id, Fingerprint: fp, Decision: decision, Reason: "test"})
}

// approve approves op as b.approver, bound to its fingerprint.
func (b *bundle) approve(op ledger.Operation) (ledger.Operation, bool) {
	b.t.Helper()
	out, replayed, err := b.decide(b.approver, op.ID, op.Fingerprint, ledger.DecisionApprove)
	require.NoError(b.t, err)
	return out, replayed
}

// approved prepares a call of tool and approves it.
func (b *bundle) approved(tool string) ledger.Operation {
	b.t.Helper()
	op := b.prepare(b.agent, tool, payArgs(b.t, harness.Unique("INV")))
	require.Equal(b.t, ledger.StateAwaitingApproval, ledger.State(op.State))
	out, _, err := b.decide(b.approver, op.ID, op.Fingerprint, ledger.DecisionApprove)
	require.NoError(b.t, err)
	return out
}

func (b *bundle) execute(a ledger.Actor, id string) (ledger.Operation, bool, error) {
	return b.l.Execute(context.Background(), a, id, 0)
}

// get reads op with its event log.
func (b *bundle) get(a ledger.Actor, id string) (ledger.Operation, []ledger.OperationEvent) {
	b.t.Helper()
	op, evs, err := b.l.Get(context.Background(), a, id, true)
	require.NoError(b.t, err)
	return op, evs
}

// requireReason asserts that err is the ledger's refusal with reason.
func requireReason(t *testing.T, err error, reason opledgerv1.ErrorReason) {
	t.Helper()
	var le *ledger.Error
	require.True(t, errors.As(err, &le), "not a ledger refusal: %v", err)
	require.Equal(t, reason, le.Reason, "error: %v", err)
}

func ledgerEventTypes(evs []ledger.OperationEvent) []ledger.EventKind {
	out := make([]ledger.EventKind, len(evs))
	for i, e := range evs {
		out[i] = ledger.EventKind(e.Type)
	}
	return out
}

func TestExecuteFullFlow(t *testing.T) {
	t.Parallel()
	b := newBundle(t, harness.Options{}, ledger.Config{})

	op := b.prepare(b.agent, "pay_invoice", payArgs(t, "INV-2048"))
	require.Equal(t, ledger.StateAwaitingApproval, ledger.State(op.State))
	require.NotEmpty(t, op.Fingerprint)

	ar, replayed, err := b.decide(b.approver, op.ID, op.Fingerprint, ledger.DecisionApprove)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, ledger.StateReady, ledger.State(ar.State))
	require.Equal(t, ledger.DecisionApprove, ar.ApprovalDecision)
	require.Equal(t, op.Fingerprint, ar.ApprovalFingerprint)

	got, replayed, err := b.execute(b.agent, op.ID)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, ledger.StateSucceeded, ledger.State(got.State))
	require.EqualValues(t, 1, got.Attempts)
	require.EqualValues(t, 1, got.Fence)
	require.Empty(t, got.Error)

	charges := b.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, got.ExternalRef)
	require.Equal(t, op.DownstreamKey, charges[0].IdempotencyKey)
	require.EqualValues(t, 4900, charges[0].AmountMinor)
	var result map[string]any
	require.NoError(t, json.Unmarshal(got.Result, &result))
	require.Equal(t, charges[0].ID, result["id"])

	again, replayed, err := b.execute(b.agent, op.ID)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, ledger.StateSucceeded, ledger.State(again.State))
	require.Equal(t, got.ExternalRef, again.ExternalRef)
	require.JSONEq(t, string(got.Result), string(again.Result))
	require.EqualValues(t, 1, again.Attempts)
	require.Len(t, b.env.Fakepay.Charges(), 1)

	// Another tenant cannot even see it.
	_, _, err = b.execute(b.actor("globex", "agent"), op.ID)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND)

	// Reconciling a settled operation changes nothing.
	rec, detail, err := b.l.Reconcile(context.Background(), b.agent, op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, ledger.StateSucceeded, ledger.State(rec.State))
	require.Contains(t, detail, "nothing to reconcile")

	final, evs := b.get(b.agent, op.ID)
	require.Equal(t, ledger.StateSucceeded, ledger.State(final.State))
	require.Equal(t, []ledger.EventKind{ledger.EventPrepared, ledger.EventApproved, ledger.EventClaimed, ledger.EventSucceeded},
		ledgerEventTypes(evs))
	wantFences := []int64{0, 0, 1, 1}
	wantTo := []ledger.State{ledger.StateAwaitingApproval, ledger.StateReady, ledger.StateExecuting, ledger.StateSucceeded}
	for i, e := range evs {
		require.EqualValues(t, i+1, e.Seq)
		require.Equal(t, wantFences[i], e.Fence, "event %d", i)
		require.Equal(t, wantTo[i], ledger.State(e.ToState), "event %d", i)
		if i > 0 {
			require.Equal(t, wantTo[i-1], ledger.State(e.FromState), "event %d", i)
		}
	}
}

func TestApproveSelfApprovalForbidden(t *testing.T) {
	t.Parallel()
	b := newBundle(t, harness.Options{}, ledger.Config{})
	both := b.actor("acme", "agent", "approver")

	op := b.prepare(both, "pay_invoice", payArgs(t, "INV-1"))
	_, _, err := b.decide(both, op.ID, op.Fingerprint, ledger.DecisionApprove)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_SELF_APPROVAL_FORBIDDEN)
	_, _, err = b.decide(both, op.ID, op.Fingerprint, ledger.DecisionDeny)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_SELF_APPROVAL_FORBIDDEN)

	got, evs := b.get(b.agent, op.ID)
	require.Equal(t, ledger.StateAwaitingApproval, ledger.State(got.State))
	require.Len(t, evs, 1)
}

func TestApproveFingerprintMismatch(t *testing.T) {
	t.Parallel()
	b := newBundle(t, harness.Options{}, ledger.Config{})
	op := b.prepare(b.agent, "pay_invoice", payArgs(t, "INV-1"))
	// What an approver saw for other args: a well-formed fingerprint that
	// is not this operation's.
	other := b.prepare(b.agent, "pay_invoice", payArgs(t, "INV-2"))
	require.NotEqual(t, op.Fingerprint, other.Fingerprint)

	for _, d := range []string{ledger.DecisionApprove, ledger.DecisionDeny} {
		_, _, err := b.decide(b.approver, op.ID, other.Fingerprint, d)
		requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH)
	}
	got, evs := b.get(b.agent, op.ID)
	require.Equal(t, ledger.StateAwaitingApproval, ledger.State(got.State))
	require.Empty(t, got.ApprovalDecision)
	require.Empty(t, got.ApprovalFingerprint)
	require.Len(t, evs, 1, "nothing changed")

	_, _, err := b.execute(b.agent, op.ID)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED)
	require.Empty(t, b.env.Fakepay.Charges())
}

// TestCancel: an operation nobody executed can be cancelled (and Execute
// then refuses it, sending nothing); repeating is replayed; an executed one
// cannot be cancelled. (That only an agent may cancel is the server's:
// TestCancelNeedsTheAgentRole.)
func TestCancel(t *testing.T) {
	t.Parallel()
	b := newBundle(t, harness.Options{}, ledger.Config{})
	ctx := context.Background()
	op := b.prepare(b.agent, "pay_invoice", payArgs(t, "INV-C1"))

	r, replayed, err := b.l.Cancel(ctx, b.agent, op.ID, "customer changed their mind")
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, ledger.StateCancelled, ledger.State(r.State))
	_, replayed, err = b.l.Cancel(ctx, b.agent, op.ID, "")
	require.NoError(t, err)
	require.True(t, replayed)

	_, _, err = b.execute(b.agent, op.ID)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED)
	_, _, err = b.decide(b.approver, op.ID, op.Fingerprint, ledger.DecisionApprove)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED)
	_, evs := b.get(b.agent, op.ID)
	require.Equal(t, ledger.EventCancelled, ledger.EventKind(evs[len(evs)-1].Type))
	require.Empty(t, b.env.Fakepay.Charges())

	done := b.approved("pay_invoice")
	_, _, err = b.execute(b.agent, done.ID)
	require.NoError(t, err)
	_, _, err = b.l.Cancel(ctx, b.agent, done.ID, "")
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_CANCEL_NOT_APPLICABLE)
}

// TestExecuteWithoutWaitIsPending: without a wait, a second caller gets the
// pending state of the same operation, not an error.
func TestExecuteWithoutWaitIsPending(t *testing.T) {
	t.Parallel()
	bn := newBundle(t, harness.Options{}, ledger.Config{})
	b := newBlocker()
	bn.l.SetHooks(&ledger.Hooks{AfterDownstream: b.hook})
	op := bn.approved("pay_invoice")

	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		_, _, _ = bn.execute(bn.agent, op.ID)
	}()
	b.waitArrived(t, holderDone)
	got, replayed, err := bn.execute(bn.agent, op.ID)
	close(b.release)
	<-holderDone
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, ledger.StateExecuting, ledger.State(got.State))
	require.Equal(t, op.ID, got.ID)
	require.False(t, got.LeaseExpiresAt.IsZero())

	final, _ := bn.get(bn.agent, op.ID)
	require.Equal(t, ledger.StateSucceeded, ledger.State(final.State))
	require.Len(t, bn.env.Fakepay.Charges(), 1)
}

// briefApprovalTools is a pay tool whose approval lasts a second.
func briefApprovalTools() harness.Options {
	return harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_brief",
		ApprovalTTL: time.Second, DedupesKeys: true, MaxAttempts: 3, Lookup: true})}
}

// TestApprovalExpires: an approval is good for the tool's TTL; an Execute
// after it refuses, puts the operation back to AWAITING_APPROVAL and sends
// nothing, and a fresh approval makes it executable again.
func TestApprovalExpires(t *testing.T) {
	t.Parallel()
	b := newBundle(t, briefApprovalTools(), ledger.Config{})
	op := b.prepare(b.agent, "pay_brief", payArgs(t, "INV-1"))

	approved, _ := b.approve(op)
	expires := approved.ApprovalExpiresAt
	require.WithinDuration(t, approved.ApprovalDecidedAt.Add(time.Second), expires, 10*time.Millisecond)
	time.Sleep(time.Until(expires) + 200*time.Millisecond)

	_, _, err := b.execute(b.agent, op.ID)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_EXPIRED)
	got, evs := b.get(b.agent, op.ID)
	require.Equal(t, ledger.StateAwaitingApproval, ledger.State(got.State))
	require.EqualValues(t, 0, got.Attempts)
	require.Equal(t, ledger.EventApprovalExpired, ledger.EventKind(evs[len(evs)-1].Type))
	require.Empty(t, b.env.Fakepay.Charges())

	// Asking again does not change the answer.
	_, _, err = b.execute(b.agent, op.ID)
	requireReason(t, err, opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED)

	again, replayed := b.approve(op)
	require.False(t, replayed)
	require.Equal(t, ledger.StateReady, ledger.State(again.State))
	done, _, err := b.execute(b.agent, op.ID)
	require.NoError(t, err)
	require.Equal(t, ledger.StateSucceeded, ledger.State(done.State))
	require.Len(t, b.env.Fakepay.Charges(), 1)
}

// TestApprovalExpiredReapprovedWhileReady: an approver may renew a lapsed
// approval before anyone executed (the operation still says READY).
func TestApprovalExpiredReapprovedWhileReady(t *testing.T) {
	t.Parallel()
	b := newBundle(t, briefApprovalTools(), ledger.Config{})
	op := b.prepare(b.agent, "pay_brief", payArgs(t, "INV-1"))
	first, _ := b.approve(op)
	time.Sleep(time.Until(first.ApprovalExpiresAt) + 200*time.Millisecond)

	renewed, replayed := b.approve(op)
	require.False(t, replayed)
	require.Equal(t, ledger.StateReady, ledger.State(renewed.State))
	require.True(t, renewed.ApprovalExpiresAt.After(first.ApprovalExpiresAt))
	done, _, err := b.execute(b.agent, op.ID)
	require.NoError(t, err)
	require.Equal(t, ledger.StateSucceeded, ledger.State(done.State))
	require.Len(t, b.env.Fakepay.Charges(), 1)
}
