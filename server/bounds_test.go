package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// hugeData is a JSON object of n small numbers, about 2n bytes, which a
// google.protobuf.Value carries in about 11n bytes.
func hugeData(n int) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"n":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i % 10))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// TestHostileWebhookLeavesTheOperationReadable (issue 39): a correctly
// signed "succeeded" webhook under the 1 MiB body limit whose data holds
// 520,000 small numbers settles the OUTCOME_UNKNOWN operation, and the
// operation stays readable by a client with gRPC's default 4 MiB receive
// limit through Get, an Execute replay and ListOperations: the stored
// result is bounded (the executor's truncation shape), not the whole data.
func TestHostileWebhookLeavesTheOperationReadable(t *testing.T) {
	t.Parallel()
	env, srv, hooks := webhookServer(t)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, "hook-huge-1", "pay_hook")
	charge := env.Fakepay.Charges()[0]
	body, err := json.Marshal(fakepay.WebhookEvent{ID: "evt_huge", Type: "succeeded",
		IdempotencyKey: charge.IdempotencyKey, ExternalRef: charge.ID, Data: hugeData(520_000)})
	require.NoError(t, err)
	require.Less(t, len(body), 1<<20, "the event is under the webhook listener's body limit")
	answer := postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
	require.Contains(t, answer, "SUCCEEDED")

	got, err := srv.Client.Get(harness.Ctx(agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId(), IncludeEvents: true})
	require.NoError(t, err, "Get")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetOperation().GetState())
	require.Equal(t, charge.ID, got.GetOperation().GetExternalRef())
	res := got.GetOperation().GetResult().AsMap()
	require.Equal(t, true, res["truncated"], "the result says it was cut")
	require.IsType(t, "", res["raw"])

	ex, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err, "Execute replay")
	require.True(t, ex.GetReplayed())
	list, err := srv.Client.ListOperations(harness.Ctx(agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err, "ListOperations")
	require.Len(t, list.GetOperations(), 1)
}

// TestHostileFailedWebhookIsBounded: a signed "failed" webhook's data, kept
// as the stored error's body, is bounded as a succeeded one's result is.
func TestHostileFailedWebhookIsBounded(t *testing.T) {
	t.Parallel()
	env, srv, hooks := webhookServer(t)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, "hook-huge-2", "pay_hook")
	charge := env.Fakepay.Charges()[0]
	body, err := json.Marshal(fakepay.WebhookEvent{ID: "evt_huge_failed", Type: "failed",
		IdempotencyKey: charge.IdempotencyKey, Data: hugeData(520_000)})
	require.NoError(t, err)
	answer := postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK)
	require.Contains(t, answer, "FAILED")

	got, err := srv.Client.Get(harness.Ctx(agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId(), IncludeEvents: true})
	require.NoError(t, err, "Get")
	require.Equal(t, opledgerv1.State_STATE_FAILED, got.GetOperation().GetState())
	var cut bool
	for _, d := range got.GetOperation().GetError().GetDetails() {
		var s structpb.Struct
		if d.UnmarshalTo(&s) == nil {
			cut = s.AsMap()["truncated"] == true
		}
	}
	require.True(t, cut, "the error's body is the truncation shape: %v", got.GetOperation().GetError())
}

// TestRowStoredBeforeTheBoundIsReadable: an operation whose result was
// stored whole before the bound (the 520,000 numbers of issue 39's
// webhook, a reference of 1 MB) is served as the bound would have stored
// it, its row unchanged: Get, an Execute replay and ListOperations answer.
func TestRowStoredBeforeTheBoundIsReadable(t *testing.T) {
	t.Parallel()
	env, srv, _ := webhookServer(t)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, "hook-legacy-1", "pay_hook")
	conn, err := pgx.Connect(t.Context(), env.DBURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), `UPDATE operation SET state = 'SUCCEEDED', error = NULL, result = $2::text::jsonb, external_ref = $3,
		lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`, op.GetId(), string(hugeData(520_000)), strings.Repeat("r", 1<<20))
	require.NoError(t, err)

	got, err := srv.Client.Get(harness.Ctx(agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId()})
	require.NoError(t, err, "Get")
	require.Equal(t, true, got.GetOperation().GetResult().AsMap()["truncated"])
	require.True(t, strings.HasSuffix(got.GetOperation().GetExternalRef(), "…[truncated]"))
	_, err = srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err, "Execute replay")
	list, err := srv.Client.ListOperations(harness.Ctx(agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err, "ListOperations")
	require.Len(t, list.GetOperations(), 1)
}
