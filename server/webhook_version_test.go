package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/server"
)

// TestWebhookIsVerifiedWithTheOperationsToolVersion: each version of a tool
// declares its own executor, webhook_secret included (here version 1's
// processor signs with one secret; version 2, now the current one, with
// another). An operation prepared under version 1 is settled by version 1's
// processor's signed event, and not by an event signed with version 2's
// secret, which does not speak for version 1's downstream.
func TestWebhookIsVerifiedWithTheOperationsToolVersion(t *testing.T) {
	t.Parallel()
	const v1Secret, v2Secret = "webhook-secret-v1-0123456789", "webhook-secret-v2-0123456789"
	for _, c := range []struct {
		name, secret string
		want         opledgerv1.State
	}{
		{"signed by version 1 settles it", v1Secret, opledgerv1.State_STATE_SUCCEEDED},
		{"signed by version 2 does not", v2Secret, opledgerv1.State_STATE_OUTCOME_UNKNOWN},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v1 := harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook", MaxAttempts: 1, DedupesKeys: true, WebhookSecret: v1Secret})
			v2 := harness.ToolsYAML(harness.ToolSpec{Name: "pay_hook", MaxAttempts: 1, DedupesKeys: true, WebhookSecret: v2Secret})
			v2 = bytes.Replace(bytes.TrimPrefix(v2, []byte("tools:\n")), []byte(`version: "1"`), []byte(`version: "2"`), 1)
			env := harness.New(t, harness.Options{ToolsYAML: append(v1, v2...)})
			srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
			hooks := httptest.NewServer(server.WebhookHandler(srv.Ledger, slog.New(slog.DiscardHandler)))
			t.Cleanup(hooks.Close)
			agent := env.Key("acme", "agent")

			op := unknownOutcome(t, env, srv.Client, agent, "hook-version", "pay_hook") // version "1"
			require.Equal(t, "1", op.GetToolVersion())
			charge := env.Fakepay.Charges()[0]
			body, err := json.Marshal(fakepay.WebhookEvent{ID: "evt_" + charge.ID, Type: "succeeded", IdempotencyKey: charge.IdempotencyKey,
				ExternalRef: charge.ID, Data: json.RawMessage(`{"id":"` + charge.ID + `"}`)})
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodPost, hooks.URL+"/webhooks/pay_hook", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set(server.SignatureHeader, fakepay.SignWebhook(c.secret, time.Now(), body))
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var answer bytes.Buffer
			_, _ = answer.ReadFrom(resp.Body)
			resp.Body.Close()
			require.Equal(t, c.want, get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState(),
				"HTTP %d: %s", resp.StatusCode, answer.String())
		})
	}
}
