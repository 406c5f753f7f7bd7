package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/server"
)

const hookSecret = "webhook-secret-0123456789"

// TestWebhookResolvesUnknownOnce: the processor charged but the connection
// dropped, so the operation is OUTCOME_UNKNOWN; the processor's signed
// webhook, delivered three times, resolves it exactly once.
func TestWebhookResolvesUnknownOnce(t *testing.T) {
	t.Parallel()
	env, srv, hooks := webhookServer(t)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, "hook-1", "pay_hook")

	// The webhook arrives late (after the ledger declared the outcome
	// unknown), three times.
	charge := env.Fakepay.Charges()[0]
	body, err := json.Marshal(fakepay.WebhookEvent{ID: "evt_" + charge.ID, Type: "succeeded",
		IdempotencyKey: charge.IdempotencyKey, ExternalRef: charge.ID, Data: json.RawMessage(`{"id":"` + charge.ID + `"}`)})
	require.NoError(t, err)
	results := make([]string, 3)
	for i := range results {
		results[i] = postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
	}
	require.Contains(t, results[0], "SUCCEEDED")
	require.Contains(t, results[1], "duplicate")
	require.Contains(t, results[2], "duplicate")

	got := get(t, srv.Client, agent, op.GetId(), true)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetOperation().GetState())
	require.Equal(t, charge.ID, got.GetOperation().GetExternalRef())
	reconciled := 0
	for _, e := range got.GetEvents() {
		if e.GetType() == opledgerv1.EventType_EVENT_TYPE_RECONCILED {
			reconciled++
			require.Equal(t, "webhook:pay_hook", e.GetActor())
		}
	}
	require.Equal(t, 1, reconciled)
	require.Len(t, env.Fakepay.Charges(), 1)
}

// TestWebhookFromProcessor: the fake processor itself delivers signed
// events (with duplicates) for every charge; a completed operation is left
// as it is.
func TestWebhookFromProcessor(t *testing.T) {
	t.Parallel()
	env, srv, hooks := webhookServer(t)
	env.Fakepay.SetWebhook(fakepay.Webhook{URL: hooks.URL + "/webhooks/pay_hook", Secret: hookSecret, Duplicates: 2})
	agent := env.Key("acme", "agent")
	op := prepare(t, srv.Client, agent, "hook-2", "pay_hook", invoiceArgs(t, 4900)).GetOperation()
	env.Fakepay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
	_, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 10*time.Second, 50*time.Millisecond, "the processor's webhook resolves the unknown outcome")
	require.Len(t, env.Fakepay.Charges(), 1)
}

// TestWebhookRefusesBadSignature: an unsigned, wrongly signed or stale event
// changes nothing.
func TestWebhookRefusesBadSignature(t *testing.T) {
	t.Parallel()
	_, _, hooks := webhookServer(t)
	body := []byte(`{"id":"evt_x","type":"succeeded","idempotency_key":"opk_x"}`)
	postHook(t, hooks.URL+"/webhooks/pay_hook", "", body, http.StatusUnauthorized)
	postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook("another-secret-0123456", time.Now(), body), body, http.StatusUnauthorized)
	postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now().Add(-time.Hour), body), body, http.StatusUnauthorized)
	postHook(t, hooks.URL+"/webhooks/unknown_tool", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusNotFound)
	postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), []byte(`{"id":""}`)), []byte(`{"id":""}`), http.StatusBadRequest)
}

// webhookServer starts a server whose tool pay_hook accepts the fake
// processor's signed completion events, and its webhook endpoint.
func webhookServer(t *testing.T) (*harness.Env, *harness.Server, *httptest.Server) {
	t.Helper()
	return webhookServerOn(t, "")
}

// webhookServerOn is webhookServer on database dbURL ("": a fresh one).
func webhookServerOn(t *testing.T, dbURL string) (*harness.Env, *harness.Server, *httptest.Server) {
	t.Helper()
	env := harness.New(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook",
		MaxAttempts: 1, DedupesKeys: true, WebhookSecret: hookSecret})})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	hooks := httptest.NewServer(server.WebhookHandler(srv.Ledger, slog.New(slog.DiscardHandler)))
	t.Cleanup(hooks.Close)
	return env, srv, hooks
}

// unknownOutcome prepares an operation of tool and executes it while the
// fake processor drops the connection after charging: the operation is
// OUTCOME_UNKNOWN, and the processor holds its charge.
func unknownOutcome(t *testing.T, env *harness.Env, c opledgerv1.LedgerServiceClient, agent, idem, tool string) *opledgerv1.Operation {
	t.Helper()
	op := prepare(t, c, agent, idem, tool, invoiceArgs(t, 4900)).GetOperation()
	env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}})
	r, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, r.GetOperation().GetState())
	return r.GetOperation()
}

func postHook(t *testing.T, url, sig string, body []byte, want int) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	if sig != "" {
		req.Header.Set(server.SignatureHeader, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	require.Equal(t, want, resp.StatusCode, out.String())
	return out.String()
}

// TestWebhookFreshnessOnDatabaseClock: a signature's age is judged on the
// database's clock, as every time rule, so replicas whose clocks differ
// decide alike. Here this server's clock runs 10 minutes ahead of the
// database: an event signed by a processor whose clock agrees with the
// database is fresh; one signed at this server's own time is 10 minutes
// ahead of it, and refused.
func TestWebhookFreshnessOnDatabaseClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, -10*time.Minute)
	env, srv, hooks := webhookServerOn(t, dbURL)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, "hook-clock-1", "pay_hook")
	charge := env.Fakepay.Charges()[0]
	event := func(id string) []byte {
		body, err := json.Marshal(fakepay.WebhookEvent{ID: id, Type: "succeeded", IdempotencyKey: charge.IdempotencyKey,
			ExternalRef: charge.ID, Data: json.RawMessage(`{"id":"` + charge.ID + `"}`)})
		require.NoError(t, err)
		return body
	}
	ahead := event("evt_clock_ahead")
	postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), ahead), ahead, http.StatusUnauthorized)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState())

	fresh := event("evt_clock_db")
	postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now().Add(-10*time.Minute), fresh), fresh, http.StatusOK)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState())
}

// TestWebhookContradictionIsAnError: an operator settled an unknown outcome
// as FAILED (a promise that nothing happened), then the processor's signed
// webhook says the charge succeeded. Nothing overwrites a finished
// operation, but the ledger now holds a false answer, and that must reach an
// operator: the answer says so and the line is logged at error, not at info.
// The opposite (a "failed" event for a SUCCEEDED operation) is one too.
func TestWebhookContradictionIsAnError(t *testing.T) {
	t.Parallel()
	env, srv, _ := webhookServer(t)
	var logs bytes.Buffer
	hooks := httptest.NewServer(server.WebhookHandler(srv.Ledger, slog.New(slog.NewJSONHandler(&logs, nil))))
	t.Cleanup(hooks.Close)
	agent, operator := env.Key("acme", "agent"), env.Key("acme", "operator")

	event := func(id, typ, key, ref string) []byte {
		body, err := json.Marshal(fakepay.WebhookEvent{ID: id, Type: typ, IdempotencyKey: key,
			ExternalRef: ref, Data: json.RawMessage(`{"id":"` + ref + `"}`)})
		require.NoError(t, err)
		return body
	}
	contradiction := func(body []byte) map[string]any {
		t.Helper()
		logs.Reset()
		answer := postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
		require.Contains(t, answer, "contradicts")
		var line map[string]any
		require.NoError(t, json.Unmarshal(bytes.TrimSpace(logs.Bytes()), &line), logs.String())
		return line
	}

	op := unknownOutcome(t, env, srv.Client, agent, "hook-contra-1", "pay_hook")
	charge := env.Fakepay.Charges()[0]
	_, err := srv.Client.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_FAILED, Note: "no charge found"}})
	require.NoError(t, err)
	line := contradiction(event("evt_contra_1", "succeeded", charge.IdempotencyKey, charge.ID))
	require.Equal(t, "ERROR", line["level"])
	require.Equal(t, op.GetId(), line["operation"])
	require.NotContains(t, logs.String(), charge.IdempotencyKey, "the downstream key is never logged raw")
	require.Equal(t, opledgerv1.State_STATE_FAILED, get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState(),
		"nothing overwrites a finished operation")

	done := prepare(t, srv.Client, agent, "hook-contra-2", "pay_hook", invoiceArgs(t, 5100)).GetOperation()
	r, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: done.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, r.GetOperation().GetState())
	line = contradiction(event("evt_contra_2", "failed", r.GetOperation().GetDownstreamKey(), r.GetOperation().GetExternalRef()))
	require.Equal(t, "ERROR", line["level"])

	// An event that agrees with the finished operation is not one.
	body := event("evt_agree", "succeeded", r.GetOperation().GetDownstreamKey(), r.GetOperation().GetExternalRef())
	logs.Reset()
	answer := postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
	require.NotContains(t, answer, "contradicts")
	require.Contains(t, logs.String(), `"level":"INFO"`)
}

// TestPrunerForgetsOldWebhookEvents: the pruner forgets webhook events
// received longer ago than the retention (the table grew for ever); a
// delivery after that is handled as a new event.
func TestPrunerForgetsOldWebhookEvents(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook",
		MaxAttempts: 1, DedupesKeys: true, WebhookSecret: hookSecret})})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true, Ledger: ledger.Config{Retention: 200 * time.Millisecond}})
	hooks := httptest.NewServer(server.WebhookHandler(srv.Ledger, slog.New(slog.DiscardHandler)))
	t.Cleanup(hooks.Close)
	body, err := json.Marshal(fakepay.WebhookEvent{ID: "evt_prune", Type: "succeeded", IdempotencyKey: "opk1-nobody", ExternalRef: "ch_1"})
	require.NoError(t, err)
	deliver := func() string {
		return postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
	}
	require.Contains(t, deliver(), "no operation has this key")
	require.Contains(t, deliver(), "duplicate")
	require.Eventually(t, func() bool {
		_, err := srv.Ledger.Prune(t.Context())
		require.NoError(t, err)
		return !strings.Contains(deliver(), "duplicate")
	}, 10*time.Second, 100*time.Millisecond, "once the retention has passed, the pruner forgets the event")
}
