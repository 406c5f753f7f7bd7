package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// The nesting tests below send JSON 60 levels deep (the top-level object is
// level 1): Go's protobuf runtime decodes it (it allows 10000 message
// levels), but Java's and Python's refuse it (100 by default, and each JSON
// level costs two or three message levels), so an operation storing it as
// it is could not be read by those clients. 9000 levels break Go's too.
const deepLevels = 60

// deepArrays is a JSON object of levels levels: id, then arrays in x.
func deepArrays(id string, levels int) string {
	return `{"id":"` + id + `","x":` + strings.Repeat("[", levels-1) + `"end"` + strings.Repeat("]", levels-1) + `}`
}

// deepObjects is a JSON object of levels levels: id, then objects in x,
// the dearest nesting in protobuf message levels.
func deepObjects(id string, levels int) string {
	return `{"id":"` + id + `","x":` + strings.Repeat(`{"a":`, levels-2) + `{"end":true}` + strings.Repeat("}", levels-2) + `}`
}

// requireReadable requires that every client runtime can decode m: that it
// decodes under a protobuf recursion limit of 100 (Java's and Python's
// default), as Go's is 10000.
func requireReadable(t *testing.T, m proto.Message) {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, proto.UnmarshalOptions{RecursionLimit: 100}.Unmarshal(b, m.ProtoReflect().New().Interface()),
		"a client whose protobuf runtime allows 100 levels cannot read the answer")
}

// requireCut requires that the stored x of an answer built by deepArrays or
// deepObjects keeps executor.MaxStoredDepth levels, and holds the rest as a
// string of its JSON text.
func requireCut(t *testing.T, stored *structpb.Struct, sent string) {
	t.Helper()
	v := stored.GetFields()["x"]
	level := 2
	for ; level <= executor.MaxStoredDepth; level++ {
		switch {
		case v.GetListValue() != nil:
			require.Len(t, v.GetListValue().GetValues(), 1)
			v = v.GetListValue().GetValues()[0]
		case v.GetStructValue() != nil:
			v = v.GetStructValue().GetFields()["a"]
		default:
			t.Fatalf("level %d of x is %v, not an object or array", level, v)
		}
	}
	text := v.GetStringValue()
	require.NotEmpty(t, text, "the part deeper than %d levels is a string: %v", executor.MaxStoredDepth, v)
	var rest any
	require.NoError(t, json.Unmarshal([]byte(text), &rest), "the string is the part's JSON text: %q", text)
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, []byte(text)))
	require.Equal(t, compact.String(), text)
	require.True(t, strings.HasSuffix(sent, text+strings.Repeat("}", executor.MaxStoredDepth)) ||
		strings.HasSuffix(sent, text+strings.Repeat("]", executor.MaxStoredDepth-1)+"}"),
		"the string is the text sent below level %d: %q", executor.MaxStoredDepth, text)
}

// TestDownstreamAnswerNestedTooDeep: a downstream answer nested deeper than
// executor.MaxStoredDepth levels is recorded with its deeper part as a
// string of its JSON text (docs/tools.md, "What is stored of an answer"),
// so that the Execute answer, its replays and every Get can be decoded by
// every client. Stored as sent, 60 levels made the operation unreadable to
// a client allowing 100 protobuf levels, and 9000 to every client: INTERNAL,
// "grpc: failed to unmarshal the received message: proto: exceeded maximum
// recursion depth", on each Get and replay, forever.
func TestDownstreamAnswerNestedTooDeep(t *testing.T) {
	t.Parallel()
	answers := map[string]cannedAnswer{
		"arrays":      {200, deepArrays("ch_1", deepLevels)},
		"objects":     {200, deepObjects("ch_2", deepLevels)},
		"very-deep":   {200, deepArrays("ch_3", 9000)},
		"refused":     {400, deepObjects("err_1", deepLevels)},
		"at-the-edge": {200, deepObjects("ch_4", executor.MaxStoredDepth)},
	}
	downstream := invoiceDownstream(t, answers)
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_deep", URL: downstream.URL})})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agent := env.Key("acme", "agent")

	for _, invoice := range slices.Sorted(maps.Keys(answers)) { // "very-deep" last
		a := answers[invoice]
		args := mustStruct(t, map[string]any{"invoice_id": invoice, "amount_minor": 100, "currency": "EUR"})
		op := prepare(t, c, agent, harness.Unique(invoice), "pay_deep", args).GetOperation()
		first, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err, invoice)
		requireReadable(t, first)
		got := first.GetOperation()
		stored := got.GetResult()
		if a.status == 200 {
			require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState(), invoice)
		} else {
			require.Equal(t, opledgerv1.State_STATE_FAILED, got.GetState(), invoice)
			stored = errorBody(t, got)
			requireReadable(t, stored) // a client unpacks it from the error's Any
		}
		if invoice == "at-the-edge" {
			require.JSONEq(t, a.body, string(mustJSON(t, stored)), "an answer within the limit is kept as sent")
		} else {
			requireCut(t, stored, a.body)
		}

		again, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err, invoice)
		require.True(t, again.GetReplayed(), invoice)
		require.True(t, proto.Equal(got, again.GetOperation()), "%s: the replay is the first answer", invoice)
		read := get(t, c, agent, op.GetId(), true)
		require.True(t, proto.Equal(got, read.GetOperation()), invoice)
		requireReadable(t, read)
	}
}

// TestWebhookDataNestedTooDeep: a webhook event whose data is nested deeper
// than executor.MaxStoredDepth levels resolves the operation with the
// deeper part stored as a string of its JSON text, and the operation stays
// readable by every client.
func TestWebhookDataNestedTooDeep(t *testing.T) {
	t.Parallel()
	env, srv, hooks := webhookServer(t)
	agent := env.Key("acme", "agent")
	op := unknownOutcome(t, env, srv.Client, agent, harness.Unique("hook-deep"), "pay_hook")
	key := env.Fakepay.Charges()[0].IdempotencyKey

	data := deepArrays("ch_1", deepLevels)
	body, err := json.Marshal(map[string]any{"id": "evt_deep", "type": "succeeded", "idempotency_key": key,
		"external_ref": "ch_1", "data": json.RawMessage(data)})
	require.NoError(t, err)
	require.Contains(t, postHook(t, hooks.URL+"/webhooks/pay_hook", fakepay.SignWebhook(hookSecret, time.Now(), body), body, http.StatusOK), "SUCCEEDED")

	read := get(t, srv.Client, agent, op.GetId(), true)
	requireReadable(t, read)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, read.GetOperation().GetState())
	require.Equal(t, "ch_1", read.GetOperation().GetExternalRef())
	requireCut(t, read.GetOperation().GetResult(), data)
}

// deepLookups answers every lookup (GET) with a charge found succeeded whose
// answer is nested deepLevels levels deep.
type deepLookups struct{ next http.RoundTripper }

func (d deepLookups) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet {
		return d.next.RoundTrip(r)
	}
	body := deepObjects("ch_1", deepLevels)
	body = `{"status":"succeeded",` + body[1:]
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
}

// TestLookupAnswerNestedTooDeep: a lookup that finds the operation's effect
// with an answer nested deeper than executor.MaxStoredDepth levels resolves
// it with the deeper part stored as a string, readable by every client.
func TestLookupAnswerNestedTooDeep(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_lookup",
		MaxAttempts: 1, DedupesKeys: true, Lookup: true})})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true,
		HTTPClient: &http.Client{Transport: deepLookups{next: http.DefaultTransport}}})
	agent, operator := env.Key("acme", "agent"), env.Key("acme", "operator")
	op := unknownOutcome(t, env, srv.Client, agent, harness.Unique("lookup-deep"), "pay_lookup")

	rec, err := srv.Client.Reconcile(harness.Ctx(operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	requireReadable(t, rec)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, rec.GetOperation().GetState(), rec.GetDetail())
	read := get(t, srv.Client, agent, op.GetId(), true)
	requireReadable(t, read)
	requireCut(t, read.GetOperation().GetResult(), deepObjects("ch_1", deepLevels))
}

// TestPrepareArgsNestedTooDeep: args nested deeper than
// executor.MaxStoredDepth levels are refused at Prepare as ARGS_INVALID,
// before anything is stored, even by a tool whose schema takes any object:
// stored, they would be returned in every Get, which clients allowing 100
// protobuf levels could not decode. Args of exactly that depth are taken.
func TestPrepareArgsNestedTooDeep(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: []byte(`tools:
  - name: store_any
    version: "1"
    effect: side_effect
    args_schema:
      type: object
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
`)})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agent := env.Key("acme", "agent")
	deepArgs := func(levels int) *structpb.Struct {
		var s structpb.Struct
		require.NoError(t, s.UnmarshalJSON([]byte(deepArrays("a", levels))))
		return &s
	}

	for _, levels := range []int{executor.MaxStoredDepth + 1, deepLevels} {
		idem := harness.Unique("deep-args")
		_, err := c.Prepare(harness.Ctx(agent, idem), &opledgerv1.PrepareRequest{Tool: "store_any", Args: deepArgs(levels)})
		st := requireReason(t, err, codes.InvalidArgument, "ARGS_INVALID")
		violations := fieldViolations(st)
		require.Len(t, violations, 1, "%v", st)
		field := "args/x" + strings.Repeat("/0", executor.MaxStoredDepth-1)
		require.Equal(t, field, violations[0].GetField())
		require.Equal(t, "nested deeper than 20 levels", violations[0].GetDescription())

		// Nothing was stored: the key is free, and no operation was made.
		r := prepare(t, c, agent, idem, "store_any", mustStruct(t, map[string]any{"id": "a"}))
		require.False(t, r.GetReplayed(), "the refused Prepare must not have reserved the key")
	}
	list, err := c.ListOperations(harness.Ctx(agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetOperations(), 2, "only the two shallow Prepares are stored")

	r := prepare(t, c, agent, harness.Unique("edge-args"), "store_any", deepArgs(executor.MaxStoredDepth))
	read := get(t, c, agent, r.GetOperation().GetId(), false)
	requireReadable(t, read)
	require.JSONEq(t, deepArrays("a", executor.MaxStoredDepth), string(mustJSON(t, read.GetOperation().GetArgs())))
}

// fieldViolations are the BadRequest field violations of st.
func fieldViolations(st *status.Status) []*errdetails.BadRequest_FieldViolation {
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}

func mustJSON(t *testing.T, s *structpb.Struct) []byte {
	t.Helper()
	b, err := s.MarshalJSON()
	require.NoError(t, err)
	return b
}
