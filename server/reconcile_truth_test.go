package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/server"
)

// The tests of this file each reproduce a state the reconciler recorded
// without evidence (found by a review): each fails on the code before its
// fix.

// crashedAfterSend has replica a send op's request and never record the
// answer (it blocks after the downstream answered, as a process that died
// there would), and waits until the processor holds the effect.
func crashedAfterSend(t *testing.T, env *harness.Env, agent, idem, tool string) (*harness.Server, *opledgerv1.Operation) {
	t.Helper()
	block := make(chan struct{})
	a := env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{MinLease: time.Second},
		Hooks: &ledger.Hooks{AfterDownstream: func(context.Context, ledger.Operation) { <-block }}})
	t.Cleanup(func() { close(block) }) // before a's own cleanup stops it
	op := prepare(t, a.Client, agent, idem, tool, invoiceArgs(t, 4900)).GetOperation()
	go func() {
		_, _ = a.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	}()
	require.Eventually(t, func() bool { return len(env.Fakepay.Charges()) == 1 }, 10*time.Second, 20*time.Millisecond)
	return a, op
}

// reconcileUntilTaken runs srv's reconciler until a batch takes an
// operation (the lease has to expire first).
func reconcileUntilTaken(t *testing.T, srv *harness.Server) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := srv.Ledger.ReconcileBatch(context.Background())
		require.NoError(t, err)
		return n >= 1
	}, 20*time.Second, 100*time.Millisecond)
}

// TestExpiredLeaseWithoutLookupIsUnknown: a tool whose downstream dedupes
// keys but has no lookup; the attempt charged and its process died. The
// reconciler made the operation READY ("the next Execute resubmits the same
// key"), which says nothing was done while the customer was charged, and
// from READY nothing settled it again: the reconciler no longer took it, an
// operator could not resolve it, and the processor's signed webhook was
// dropped ("operation is READY: nothing changed"). With no lookup there is
// no evidence either way: OUTCOME_UNKNOWN, which the webhook then resolves.
func TestExpiredLeaseWithoutLookupIsUnknown(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook",
		MaxAttempts: 1, DedupesKeys: true, WebhookSecret: hookSecret, Timeout: 500 * time.Millisecond})})
	agent := env.Key("acme", "agent")
	_, op := crashedAfterSend(t, env, agent, "lease-nolookup-1", "pay_hook")
	charge := env.Fakepay.Charges()[0]

	b := env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{MinLease: time.Second}})
	reconcileUntilTaken(t, b)
	got := get(t, b.Client, agent, op.GetId(), false).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, got.GetState())

	hooks := httptest.NewServer(server.WebhookHandler(b.Ledger, slog.New(slog.DiscardHandler)))
	t.Cleanup(hooks.Close)
	body, err := json.Marshal(fakepay.WebhookEvent{ID: "evt_" + charge.ID, Type: "succeeded",
		IdempotencyKey: charge.IdempotencyKey, ExternalRef: charge.ID, Data: json.RawMessage(`{"id":"` + charge.ID + `"}`)})
	require.NoError(t, err)
	postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
	got = get(t, b.Client, agent, op.GetId(), false).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Equal(t, charge.ID, got.GetExternalRef())
	require.Len(t, env.Fakepay.Charges(), 1)
}

// TestExpiredLeaseOfAToolNoReplicaServesIsUnknown: an EXECUTING operation
// whose lease expired, of a tool version no running replica serves any
// more. The reconciler answered "inconclusive" before anything else, so the
// operation stayed EXECUTING for good with nobody executing it. The lease's
// end needs no tool to be recorded: OUTCOME_UNKNOWN.
func TestExpiredLeaseOfAToolNoReplicaServesIsUnknown(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook",
		MaxAttempts: 1, DedupesKeys: true, Timeout: 500 * time.Millisecond})})
	agent := env.Key("acme", "agent")
	_, op := crashedAfterSend(t, env, agent, "lease-notool-1", "pay_hook")

	env.ToolsYAML = harness.ToolsYAML(harness.ToolSpec{Name: "pay_other", MaxAttempts: 1, DedupesKeys: true})
	b := env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{MinLease: time.Second}})
	reconcileUntilTaken(t, b)
	got := get(t, b.Client, agent, op.GetId(), false).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, got.GetState())
}

// TestResolutionNamesItsAttempt: a manual resolution that names the attempt
// it is about (Resolution.fence, the fence the operator read) applies only
// while the operation is still at that attempt; without a fence it applies
// to the current one, as before.
func TestResolutionNamesItsAttempt(t *testing.T) {
	t.Parallel()
	env, srv, _ := webhookServer(t)
	agent, operator := env.Key("acme", "agent"), env.Key("acme", "operator")
	op := unknownOutcome(t, env, srv.Client, agent, "resolve-fence-1", "pay_hook")
	require.EqualValues(t, 1, op.GetFence())
	_, err := srv.Client.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_FAILED, Note: "checked", Fence: 2}})
	requireReason(t, err, codes.FailedPrecondition, "RESOLUTION_NOT_APPLICABLE")
	_, err = srv.Client.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_FAILED, Note: "checked", Fence: -1}})
	requireReason(t, err, codes.InvalidArgument, "FIELD_INVALID")
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState())
	r, err := srv.Client.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_SUCCEEDED, Note: "checked", Fence: 1}})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, r.GetOperation().GetState())
}
