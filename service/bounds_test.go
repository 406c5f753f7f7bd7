package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/service"
)

// numbers is a JSON object of exactly size bytes (at least 16) holding
// small numbers, the JSON that costs the most as a google.protobuf.Struct:
// {"a":"","n":[0,0,…]} ("a" holds one character when size is odd).
func numbers(size int) json.RawMessage {
	pad := (size - 14) % 2
	k := (size - 14 - pad) / 2
	var b bytes.Buffer
	b.WriteString(`{"a":"` + strings.Repeat("x", pad) + `","n":[`)
	for i := range k {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('0')
	}
	b.WriteString(`]}`)
	if b.Len() != size {
		panic(fmt.Sprintf("numbers(%d) is %d bytes", size, b.Len()))
	}
	return b.Bytes()
}

// filler is a registered executor whose downstream answers with body and
// text in every field: a success (reference and detail), a refusal
// (status 422) or an unknown outcome, as the operation's args say in "mode";
// its lookup finds a success.
type filler struct {
	body json.RawMessage
	text string
}

func (f filler) Send(_ context.Context, c executor.Call) executor.Result {
	var a struct {
		Mode string `json:"mode"`
	}
	_ = json.Unmarshal(c.Args, &a)
	switch a.Mode {
	case "fail":
		return executor.Result{Outcome: executor.OutcomeFailed, HTTPStatus: 422, Body: f.body, Detail: f.text, Attempts: 1}
	case "unknown":
		return executor.Result{Outcome: executor.OutcomeUnknown, HTTPStatus: 503, Body: f.body, Detail: f.text, Attempts: 1}
	}
	return executor.Result{Outcome: executor.OutcomeSucceeded, HTTPStatus: 200, Body: f.body, ExternalRef: f.text, Detail: f.text, Attempts: 1}
}

func (f filler) Lookup(context.Context, executor.Call) executor.LookupResult {
	return executor.LookupResult{Status: executor.LookupFound, Detail: f.text, Result: executor.Result{
		Outcome: executor.OutcomeSucceeded, HTTPStatus: 200, Body: f.body, ExternalRef: f.text, Detail: f.text}}
}

// fillerTools: "filled" (approval required) and "filled_now" (none), both
// run by the executor registered as "filler".
const fillerTools = `
tools:
  - name: filled
    version: "1"
    effect: side_effect
    approval: {required: true, ttl: 15m}
    args_schema: {type: object}
    executor: {type: filler}
  - name: filled_now
    version: "1"
    effect: side_effect
    approval: {required: false}
    args_schema: {type: object}
    executor: {type: filler}
`

// boundWorld is a service with the filler executor, its console and an MCP
// gateway, and keys of every role.
type boundWorld struct {
	client                    opledgerv1.LedgerServiceClient
	addr, consoleURL          string
	agent, approver, operator string
	env                       *harness.Env
}

func newBoundWorld(t *testing.T, f filler) *boundWorld {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	reg := executor.NewDefaultRegistry(nil, logger)
	require.NoError(t, reg.Register("filler", func(executor.Settings) (executor.Executor, error) { return f, nil }))
	env := harness.New(t, harness.Options{ToolsYAML: []byte(fillerTools)})
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, service.Config{DatabaseURL: env.DBURL, DownstreamSecret: env.Secret, Drain: time.Second,
		ConsoleListen: "127.0.0.1:0"},
		service.Options{Logger: logger, Tools: env.Tools(), Executors: reg, NoReconciler: true,
			Ledger: func(c *ledger.Config) { c.DownstreamSecret = env.Secret }})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ready := make(chan service.Ready, 1)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, lis, func(r service.Ready) { ready <- r }) }()
	t.Cleanup(func() { cancel(); <-done })
	r := <-ready
	return &boundWorld{client: harness.Dial(t, r.Addr), addr: r.Addr, consoleURL: r.ConsoleURL, env: env,
		agent: env.Key("acme", "agent"), approver: env.Key("acme", "approver"), operator: env.Key("acme", "operator")}
}

// args are the tool's arguments: mode and as many numbers as make them
// size bytes in canonical form.
func args(t *testing.T, mode string, size int) *structpb.Struct {
	t.Helper()
	b := numbers(size - len(`"mode":"",`) - len(mode))
	b = append([]byte(`{"mode":"`+mode+`",`), b[1:]...)
	var s structpb.Struct
	require.NoError(t, s.UnmarshalJSON(b))
	return &s
}

// run prepares, approves (with reason) and executes an operation of the
// "filled" tool.
func (w *boundWorld) run(t *testing.T, mode string, size int, reason string) *opledgerv1.Operation {
	t.Helper()
	p, err := w.client.Prepare(harness.Ctx(w.agent, harness.Unique("k")), &opledgerv1.PrepareRequest{Tool: "filled", Args: args(t, mode, size)})
	require.NoError(t, err)
	_, err = w.client.Approve(harness.Ctx(w.approver, ""), &opledgerv1.ApproveRequest{OperationId: p.GetOperation().GetId(),
		Fingerprint: p.GetOperation().GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: reason})
	require.NoError(t, err)
	e, err := w.client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: p.GetOperation().GetId()})
	require.NoError(t, err)
	return e.GetOperation()
}

// requireCut checks a stored body that was cut: the executor's truncation
// shape, within the bound.
func requireCut(t *testing.T, s *structpb.Struct) {
	t.Helper()
	b, err := s.MarshalJSON()
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), executor.MaxStoredBytes+64, "%.200s", b)
	m := s.AsMap()
	require.Equal(t, true, m["truncated"], "%.200s", b)
	require.IsType(t, "", m["raw"])
}

func requireCutText(t *testing.T, s string) {
	t.Helper()
	require.LessOrEqual(t, len(s), executor.MaxStoredText+64)
	require.True(t, strings.HasSuffix(s, "…[truncated]"), "%.100s", s)
}

// errorBody is the downstream's body in a stored error.
func errorBody(t *testing.T, op *opledgerv1.Operation) *structpb.Struct {
	t.Helper()
	for _, d := range op.GetError().GetDetails() {
		var s structpb.Struct
		if d.MessageIs(&s) {
			require.NoError(t, d.UnmarshalTo(&s))
			return &s
		}
	}
	t.Fatalf("no body in %v", op.GetError())
	return nil
}

func requireFieldInvalid(t *testing.T, err error, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	var reasons []string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reasons = append(reasons, info.GetReason())
		}
	}
	require.Equal(t, []string{"FIELD_INVALID"}, reasons, "%v", err)
	require.Contains(t, st.Message(), field)
}

// TestWhatComesFromOutsideIsBounded (issue 39): every entry point of a
// value from outside the ledger stores it within the bound
// (executor.Bound): an executor's success (body, reference, detail), its
// refusal and its unknown outcome (error body and message), a lookup's
// answer; and a caller's text over the bound (an approval's and a
// cancellation's reason, an operator's note and reference) is refused with
// FIELD_INVALID, nothing stored. (Webhooks: server's
// TestHostileWebhookLeavesTheOperationReadable and
// TestHostileFailedWebhookIsBounded.)
func TestWhatComesFromOutsideIsBounded(t *testing.T) {
	t.Parallel()
	w := newBoundWorld(t, filler{body: numbers(520_000 * 2), text: strings.Repeat("é", 1<<19)})

	ok := w.run(t, "ok", 1024, "fine")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, ok.GetState())
	requireCut(t, ok.GetResult())
	requireCutText(t, ok.GetExternalRef())

	failed := w.run(t, "fail", 1024, "fine")
	require.Equal(t, opledgerv1.State_STATE_FAILED, failed.GetState())
	requireCut(t, errorBody(t, failed))
	requireCutText(t, failed.GetError().GetMessage())

	unknown := w.run(t, "unknown", 1024, "fine")
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, unknown.GetState())
	requireCut(t, errorBody(t, unknown))
	rec, err := w.client.Reconcile(harness.Ctx(w.agent, ""), &opledgerv1.ReconcileRequest{OperationId: unknown.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, rec.GetOperation().GetState(), "the lookup found it")
	requireCut(t, rec.GetOperation().GetResult())
	requireCutText(t, rec.GetOperation().GetExternalRef())
	for _, op := range []*opledgerv1.Operation{ok, failed, unknown} {
		_, err := w.client.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId(), IncludeEvents: true})
		require.NoError(t, err)
	}

	// A caller's text: at the bound it is stored as written, one byte over
	// it is refused, and nothing changed.
	over := strings.Repeat("x", executor.MaxStoredText+1)
	p, err := w.client.Prepare(harness.Ctx(w.agent, harness.Unique("k")), &opledgerv1.PrepareRequest{Tool: "filled", Args: args(t, "ok", 64)})
	require.NoError(t, err)
	id, fp := p.GetOperation().GetId(), p.GetOperation().GetFingerprint()
	_, err = w.client.Approve(harness.Ctx(w.approver, ""), &opledgerv1.ApproveRequest{OperationId: id, Fingerprint: fp,
		Decision: opledgerv1.Decision_DECISION_DENY, Reason: over})
	requireFieldInvalid(t, err, "reason")
	_, err = w.client.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: id, Reason: over})
	requireFieldInvalid(t, err, "reason")
	got, err := w.client.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: id, IncludeEvents: true})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetOperation().GetState())
	require.Len(t, got.GetEvents(), 1, "nothing was recorded")
	atBound := strings.Repeat("y", executor.MaxStoredText)
	_, err = w.client.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: id, Reason: atBound})
	require.NoError(t, err)

	unknown2 := w.run(t, "unknown", 1024, atBound)
	require.Equal(t, atBound, unknown2.GetApproval().GetReason(), "a reason at the bound is kept as written")
	for _, res := range []*opledgerv1.Resolution{
		{Outcome: opledgerv1.State_STATE_FAILED, Note: over},
		{Outcome: opledgerv1.State_STATE_SUCCEEDED, Note: "paid", ExternalRef: over},
	} {
		_, err = w.client.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: unknown2.GetId(), Resolution: res})
		requireFieldInvalid(t, err, "resolution.")
	}
	got, err = w.client.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: unknown2.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, got.GetOperation().GetState())
}

// TestEveryStoredFieldAtItsBoundIsReadable (issue 39): operations whose
// every stored field is at its bound (args of 64 KiB of small numbers, the
// JSON a Struct costs the most for; a result and an error body of 64 KiB of
// them; a reference, a detail, a reason and an operator's note of
// executor.MaxStoredText bytes) are read back through Get with its events,
// an Execute replay, ListOperations (a full page of them, walked to its
// end), the console and the MCP gateway, each a client with gRPC's default
// 4 MiB receive limit.
func TestEveryStoredFieldAtItsBoundIsReadable(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("é", executor.MaxStoredText/2)
	w := newBoundWorld(t, filler{body: numbers(executor.MaxStoredBytes), text: text})
	const argsBytes = 64 << 10

	ok := w.run(t, "ok", argsBytes, text)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, ok.GetState())
	require.Equal(t, text, ok.GetExternalRef(), "at the bound, kept as it is")
	require.Len(t, ok.GetResult().GetFields()["n"].GetListValue().GetValues(), (executor.MaxStoredBytes-14)/2)
	failed := w.run(t, "fail", argsBytes, text)
	require.Equal(t, opledgerv1.State_STATE_FAILED, failed.GetState())
	require.Equal(t, text, failed.GetError().GetMessage())
	unknown := w.run(t, "unknown", argsBytes, text)
	resolved, err := w.client.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: unknown.GetId(),
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_FAILED, Note: text}})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_FAILED, resolved.GetOperation().GetState())
	p, err := w.client.Prepare(harness.Ctx(w.agent, harness.Unique("k")), &opledgerv1.PrepareRequest{Tool: "filled", Args: args(t, "ok", argsBytes)})
	require.NoError(t, err)
	cancelled, err := w.client.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: p.GetOperation().GetId(), Reason: text})
	require.NoError(t, err)
	// The rest of a full page: successes, the largest answers.
	ids := []string{ok.GetId(), failed.GetId(), unknown.GetId(), cancelled.GetOperation().GetId()}
	for len(ids) < ledger.DefaultPageSize {
		ids = append(ids, w.run(t, "ok", argsBytes, text).GetId())
	}

	largest := 0
	for _, id := range ids {
		g, err := w.client.Get(harness.Ctx(w.operator, ""), &opledgerv1.GetRequest{OperationId: id, IncludeEvents: true})
		require.NoError(t, err, "Get %s", id)
		largest = max(largest, proto.Size(g))
		_, err = w.client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: id})
		if g.GetOperation().GetState() == opledgerv1.State_STATE_CANCELLED {
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		} else {
			require.NoError(t, err, "Execute replay %s", id)
		}
	}
	t.Logf("largest Get answer: %d bytes", largest)

	seen, pages, token := map[string]bool{}, 0, ""
	for {
		l, err := w.client.ListOperations(harness.Ctx(w.approver, ""), &opledgerv1.ListOperationsRequest{
			PageSize: ledger.DefaultPageSize, PageToken: token})
		require.NoError(t, err, "ListOperations page %d", pages+1)
		require.NotEmpty(t, l.GetOperations())
		pages++
		t.Logf("page %d: %d operations, %d bytes", pages, len(l.GetOperations()), proto.Size(l))
		for _, op := range l.GetOperations() {
			require.False(t, seen[op.GetId()], "%s listed twice", op.GetId())
			seen[op.GetId()] = true
		}
		if token = l.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Len(t, seen, len(ids), "every operation is listed once")
	require.Greater(t, pages, 1, "a page of them does not fit in one answer")

	// The console: the list and each operation's page.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	fetch := func(req *http.Request) string {
		t.Helper()
		resp, err := browser.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %.300s", req.URL.Path, b)
		return string(b)
	}
	page := func(path string) string {
		req, err := http.NewRequest(http.MethodGet, w.consoleURL+path, nil)
		require.NoError(t, err)
		return fetch(req)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindStringSubmatch(page("/login"))
	require.Len(t, csrf, 2)
	req, err := http.NewRequest(http.MethodPost, w.consoleURL+"/login",
		strings.NewReader(url.Values{"csrf": {csrf[1]}, "key": {w.operator}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	fetch(req)
	page("/")
	for _, id := range ids[:4] {
		require.Contains(t, page("/operations/"+id), id)
	}

	// The MCP gateway, over streamable HTTP.
	c, err := mcpgateway.Dial(mcpgateway.ConnConfig{Target: w.addr, APIKey: w.agent})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := mcpgateway.New(ctx, c, mcpgateway.Options{})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", gw.HTTPHandler(""))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "opledger-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	for _, id := range ids[:4] {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "check_operation", Arguments: map[string]any{"operation_id": id}})
		require.NoError(t, err)
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		var a mcpgateway.Answer
		require.NoError(t, json.Unmarshal(b, &a))
		require.Equal(t, id, a.OperationID, "%.300s", b)
		require.NotEmpty(t, a.State, "%.300s", b)
	}
}
