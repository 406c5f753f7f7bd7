package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// unstorableAnswers are downstream answers that PostgreSQL cannot store as
// they are (jsonb holds no NUL character, no unpaired surrogate, no byte
// that is not UTF-8, no number beyond numeric's range; text holds no NUL),
// keyed by the invoice id whose charge gets the answer.
// cannedAnswer is what invoiceDownstream answers for one invoice.
type cannedAnswer struct {
	status int
	body   string
}

// invoiceDownstream is a downstream that answers each request with the
// canned answer of the request's invoice_id (404 for any other).
func invoiceDownstream(t *testing.T, answers map[string]cannedAnswer) *httptest.Server {
	t.Helper()
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var args struct {
			InvoiceID string `json:"invoice_id"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &args)
		a, ok := answers[args.InvoiceID]
		if !ok {
			http.Error(w, "unknown invoice", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(downstream.Close)
	return downstream
}

var unstorableAnswers = map[string]cannedAnswer{
	"nul-value": {200, `{"id":"ch_1","memo":"a\u0000b"}`},
	"nul-name":  {200, `{"id":"ch_2","a\u0000":1}`},
	"surrogate": {200, `{"id":"ch_3","memo":"\ud800x","low":"\udc00","pair":"\ud83d\ude00"}`},
	"utf8":      {200, "{\"id\":\"ch_4\",\"memo\":\"x\xff\xfey\"}"},
	"number":    {200, `{"id":"ch_5","tiny":1e-20000,"big":-1.5E+200000,"fine":1e300,"zero":0e-99999}`},
	"nul-ref":   {200, `{"id":"ch_\u00006"}`},
	"raw":       {200, "oops\x00\xff"},
	"refused":   {400, `{"error":{"message":"no\u0000"}}`},
}

// TestDownstreamAnswersPostgresCannotStoreAsSent: whatever a downstream
// answers, its outcome is recorded and replayed. An answer PostgreSQL cannot
// store as sent is stored with each character it cannot hold as U+FFFD and
// each number beyond its range as a string of the number's text
// (docs/tools.md, "What is stored of an answer"); the rest of the answer is
// kept as sent.
func TestDownstreamAnswersPostgresCannotStoreAsSent(t *testing.T) {
	t.Parallel()
	downstream := invoiceDownstream(t, unstorableAnswers)
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_odd", URL: downstream.URL})})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agent := env.Key("acme", "agent")

	want := map[string]struct {
		state  opledgerv1.State
		ref    string
		result map[string]any // the result, or for a FAILED operation the error's stored answer
	}{
		"nul-value": {opledgerv1.State_STATE_SUCCEEDED, "ch_1", map[string]any{"id": "ch_1", "memo": "a\uFFFDb"}},
		"nul-name":  {opledgerv1.State_STATE_SUCCEEDED, "ch_2", map[string]any{"id": "ch_2", "a\uFFFD": 1.0}},
		"surrogate": {opledgerv1.State_STATE_SUCCEEDED, "ch_3", map[string]any{"id": "ch_3", "memo": "\uFFFDx", "low": "\uFFFD", "pair": "😀"}},
		"utf8":      {opledgerv1.State_STATE_SUCCEEDED, "ch_4", map[string]any{"id": "ch_4", "memo": "x\uFFFD\uFFFDy"}},
		"number": {opledgerv1.State_STATE_SUCCEEDED, "ch_5", map[string]any{"id": "ch_5", "tiny": "1e-20000",
			"big": "-1.5E+200000", "fine": 1e300, "zero": "0e-99999"}},
		"nul-ref": {opledgerv1.State_STATE_SUCCEEDED, "ch_\uFFFD6", map[string]any{"id": "ch_\uFFFD6"}},
		"raw":     {opledgerv1.State_STATE_SUCCEEDED, "", map[string]any{"raw": "oops\uFFFD\uFFFD", "truncated": false}},
		"refused": {opledgerv1.State_STATE_FAILED, "", map[string]any{"error": map[string]any{"message": "no\uFFFD"}}},
	}
	for invoice, w := range want {
		args := mustStruct(t, map[string]any{"invoice_id": invoice, "amount_minor": 100, "currency": "EUR"})
		op := prepare(t, c, agent, harness.Unique(invoice), "pay_odd", args).GetOperation()
		first, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err, invoice)
		got := first.GetOperation()
		require.Equal(t, w.state, got.GetState(), invoice)
		require.Equal(t, w.ref, got.GetExternalRef(), invoice)
		stored := got.GetResult()
		if w.state == opledgerv1.State_STATE_FAILED {
			stored = errorBody(t, got)
		}
		require.Equal(t, w.result, stored.AsMap(), invoice)

		again, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err, invoice)
		require.True(t, again.GetReplayed(), invoice)
		require.True(t, proto.Equal(got, again.GetOperation()), "%s: the replay is the first answer", invoice)
		require.True(t, proto.Equal(got, get(t, c, agent, op.GetId(), false).GetOperation()), invoice)
	}
}

// errorBody is the downstream's answer stored in a FAILED operation's error.
func errorBody(t *testing.T, op *opledgerv1.Operation) *structpb.Struct {
	t.Helper()
	for _, d := range op.GetError().GetDetails() {
		var s structpb.Struct
		if d.UnmarshalTo(&s) == nil {
			return &s
		}
	}
	t.Fatalf("no stored answer in %v", op.GetError())
	return nil
}

// TestWebhookEventsPostgresCannotStoreAsSent: a signed event whose id or key
// holds the NUL character is refused as invalid (400), and one whose data or
// reference holds what PostgreSQL cannot store resolves the operation with
// the stored form TestDownstreamAnswersPostgresCannotStoreAsSent describes.
func TestWebhookEventsPostgresCannotStoreAsSent(t *testing.T) {
	t.Parallel()
	env, srv, hooks := webhookServer(t)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, harness.Unique("hook-nul"), "pay_hook")
	key := env.Fakepay.Charges()[0].IdempotencyKey

	post := func(ev map[string]any, want int) string {
		body, err := json.Marshal(ev)
		require.NoError(t, err)
		return postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, want)
	}
	post(map[string]any{"id": "evt_\x00", "type": "succeeded", "idempotency_key": key}, http.StatusBadRequest)
	post(map[string]any{"id": "evt_1", "type": "succeeded", "idempotency_key": key + "\x00"}, http.StatusBadRequest)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, get(t, srv.Client, agent, op.GetId(), false).GetOperation().GetState())

	require.Contains(t, post(map[string]any{"id": "evt_2", "type": "succeeded", "idempotency_key": key,
		"external_ref": "ch_\x00", "data": json.RawMessage(`{"id":"ch_\u0000","n":1e-20000}`)}, http.StatusOK), "SUCCEEDED")
	got := get(t, srv.Client, agent, op.GetId(), false).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Equal(t, "ch_\uFFFD", got.GetExternalRef())
	require.Equal(t, map[string]any{"id": "ch_\uFFFD", "n": "1e-20000"}, got.GetResult().AsMap())
}

// lookupFailing is a transport whose lookups (GET) fail with an error text
// holding what neither PostgreSQL's text nor a protobuf string can carry.
type lookupFailing struct{ next http.RoundTripper }

func (l lookupFailing) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		return nil, errors.New("proxy refused: \x00\xff")
	}
	return l.next.RoundTrip(r)
}

// TestLookupDetailPostgresCannotStoreAsSent: an inconclusive lookup whose
// detail holds a NUL character or bytes that are not UTF-8 is answered and
// recorded with those as U+FFFD (here an OUTCOME_UNKNOWN operation's, in
// the answer; an abandoned EXECUTING operation records the same detail in
// its event and stored error). It answered INTERNAL: a protobuf string
// holds only UTF-8.
func TestLookupDetailPostgresCannotStoreAsSent(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_lookup",
		MaxAttempts: 1, DedupesKeys: true, Lookup: true})})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true,
		HTTPClient: &http.Client{Transport: lookupFailing{next: http.DefaultTransport}}})
	agent, operator := env.Key("acme", "agent"), env.Key("acme", "operator")
	op := unknownOutcome(t, env, srv.Client, agent, harness.Unique("lookup-nul"), "pay_lookup")

	rec, err := srv.Client.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, rec.GetOperation().GetState())
	require.Equal(t, "inconclusive: lookup failed: proxy refused: \uFFFD\uFFFD", rec.GetDetail())
}
