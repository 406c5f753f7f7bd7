//go:build failpoints

package failpoint

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/service"
	"github.com/opledger/opledger/store"
)

// withDefects sets OPLEDGER_UNSAFE_DEFECTS (as parsed) and
// OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY for one test.
func withDefects(t *testing.T, fresh bool, names ...string) {
	t.Helper()
	prevDefects, prevFresh := defects, freshKeys
	t.Cleanup(func() { defects, freshKeys = prevDefects, prevFresh })
	defects, freshKeys = map[string]bool{}, fresh
	for _, n := range names {
		defects[n] = true
	}
}

// answering is a downstream that answers the statuses in turn (the last one
// from then on).
func answering(t *testing.T, statuses ...int) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		i := min(int(n.Add(1))-1, len(statuses)-1)
		if statuses[i] >= 300 && statuses[i] < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(statuses[i])
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func httpExecutor(t *testing.T, reg *executor.Registry, url string) executor.Executor {
	t.Helper()
	e, err := reg.New(executor.TypeHTTP, executor.Settings{Tool: "pay", URL: url, LookupURL: url + "?key={key}",
		DedupesKeys: true, MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	require.NoError(t, err)
	return e
}

var call = executor.Call{Tenant: "t", Tool: "pay", OperationID: "op", DownstreamKey: "k", Args: json.RawMessage(`{}`)}

// TestRedirectFailed: the registry Install builds with redirect-failed has
// the HTTP executor take a redirect for a refusal, ending the call there;
// without the defect it is an unknown outcome, retried under the same key.
func TestRedirectFailed(t *testing.T) {
	srv := answering(t, http.StatusFound)
	withDefects(t, false)
	r := httpExecutor(t, executor.NewDefaultRegistry(nil, nil), srv.URL).Send(t.Context(), call)
	require.Equal(t, executor.OutcomeUnknown, r.Outcome)
	require.Equal(t, 3, r.Attempts)

	withDefects(t, false, DefectRedirectFailed)
	o := service.Options{}
	Install(&o)
	r = httpExecutor(t, o.Executors, srv.URL).Send(t.Context(), call)
	require.Equal(t, executor.OutcomeFailed, r.Outcome, r.Detail)
	require.Equal(t, http.StatusFound, r.HTTPStatus)
	require.Equal(t, 1, r.Attempts)
}

// TestRefusalOverrides: with refusal-overrides, a refusal after an attempt
// that may have reached the downstream is FAILED, as the refusal it was;
// without, it is an unknown outcome. The executor keeps its lookup and its
// capabilities.
func TestRefusalOverrides(t *testing.T) {
	withDefects(t, false)
	plain := httpExecutor(t, executor.NewDefaultRegistry(nil, nil), answering(t, http.StatusServiceUnavailable, http.StatusBadRequest).URL)
	r := plain.Send(t.Context(), call)
	require.Equal(t, executor.OutcomeUnknown, r.Outcome)

	withDefects(t, false, DefectRefusalOverrides)
	o := service.Options{}
	Install(&o)
	e := httpExecutor(t, o.Executors, answering(t, http.StatusServiceUnavailable, http.StatusBadRequest).URL)
	r = e.Send(t.Context(), call)
	require.Equal(t, executor.OutcomeFailed, r.Outcome)
	require.Equal(t, "downstream refused: 400 Bad Request", r.Detail)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, executor.CapabilitiesOf(plain), executor.CapabilitiesOf(e))
	_, looks := e.(executor.Looker)
	require.True(t, looks)

	// A first refusal is FAILED either way; a status the tool does not
	// declare definitive stays unknown.
	r = httpExecutor(t, o.Executors, answering(t, http.StatusBadRequest).URL).Send(t.Context(), call)
	require.Equal(t, executor.OutcomeFailed, r.Outcome)
	require.Equal(t, 1, r.Attempts)
	r = httpExecutor(t, o.Executors, answering(t, http.StatusServiceUnavailable, http.StatusConflict).URL).Send(t.Context(), call)
	require.Equal(t, executor.OutcomeUnknown, r.Outcome)
}

// sent records the call a decorated SendFunc passed on.
type sent struct {
	call     executor.Call
	deadline time.Time
}

func (s *sent) send(ctx context.Context, _ ledger.Operation, _ executor.Executor, c executor.Call) executor.Result {
	s.call = c
	s.deadline, _ = ctx.Deadline()
	return executor.Result{Outcome: executor.OutcomeSucceeded}
}

// TestSend: the call as each defect changes it, and as it is without any.
func TestSend(t *testing.T) {
	now := time.Now()
	op := ledger.Operation{Tool: "pay", Fence: 2, ApprovalExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(2 * time.Hour)}
	c := call
	c.SendBy = now.Add(time.Minute)
	deadline := now.Add(30 * time.Second)
	run := func(op ledger.Operation) sent {
		var s sent
		ctx, cancel := context.WithDeadline(t.Context(), deadline)
		defer cancel()
		require.Equal(t, executor.OutcomeSucceeded, send(s.send)(ctx, op, nil, c).Outcome)
		return s
	}

	withDefects(t, false)
	s := run(op)
	require.Equal(t, c, s.call)
	require.Equal(t, deadline, s.deadline)

	withDefects(t, true)
	require.Equal(t, "k.2", run(op).call.DownstreamKey)

	withDefects(t, false, DefectApprovalClaim)
	require.True(t, run(op).call.SendBy.IsZero(), "a later claim's send is not bounded by the approval")
	first := op
	first.Fence = 1
	require.Equal(t, c.SendBy, run(first).call.SendBy)

	withDefects(t, false, DefectServerClock)
	s = run(op)
	require.Equal(t, op.ApprovalExpiresAt, s.call.SendBy)
	require.Equal(t, op.LeaseExpiresAt, s.deadline)
}

// claims is a claim statement that refuses the first claim of a READY
// operation claimed and released before, and records each claim's guards.
type claims struct {
	ledger.Statements
	seen []store.Claim
}

func (c *claims) OperationClaim(_ context.Context, _, _ string, cl store.Claim, _ store.Lease) (ledger.Operation, bool, error) {
	c.seen = append(c.seen, cl)
	op := ledger.Operation{State: string(ledger.StateReady), ApprovalRequired: true, Fence: 1}
	return op, !cl.RequireApprovalInForce, nil
}

// TestClaim: with approval-claim, an operation claimed before is claimed
// again without its approval's guard; with policy-claim, without the
// policy's; without either, as the ledger asked.
func TestClaim(t *testing.T) {
	asked := store.Claim{RequireApprovalInForce: true, RequirePolicyCurrent: true, Base: ledger.Operation{ID: "op"}}
	for _, tc := range []struct {
		defect  string
		claimed bool
		want    []store.Claim
	}{
		{"", false, []store.Claim{asked}},
		{DefectApprovalClaim, true, []store.Claim{asked, {RequirePolicyCurrent: true}}},
		{DefectPolicyClaim, false, []store.Claim{{RequireApprovalInForce: true, Base: asked.Base}}},
	} {
		withDefects(t, false, tc.defect)
		inner := &claims{}
		_, claimed, err := statements{inner}.OperationClaim(t.Context(), "t", "op", asked, store.Lease{})
		require.NoError(t, err)
		require.Equal(t, tc.claimed, claimed, tc.defect)
		require.Equal(t, tc.want, inner.seen, tc.defect)
	}
}

// TestHooks: Install adds the points to the hooks a caller set, which still
// run, and a takeover only with takeover-nodedupe.
func TestHooks(t *testing.T) {
	withDefects(t, false)
	var ran int
	o := service.Options{Hooks: &ledger.Hooks{AfterCommit: func(context.Context, ledger.Operation) { ran++ }}}
	Install(&o)
	o.Hooks.AfterCommit(t.Context(), ledger.Operation{})
	o.Hooks.AfterPrepare(t.Context(), ledger.Operation{})
	require.Equal(t, 1, ran)
	require.Nil(t, o.Hooks.Statements, "no statement is decorated without a defect of theirs")
	require.Nil(t, o.Hooks.TakeOverUndeduped)
	require.Nil(t, o.Executors, "the executors are the service's own without a defect of theirs")

	withDefects(t, false, DefectTakeoverNoDedupe)
	o = service.Options{}
	Install(&o)
	require.True(t, o.Hooks.TakeOverUndeduped(ledger.Operation{}))
}
