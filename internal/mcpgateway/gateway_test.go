package mcpgateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// TestListTools: tools/list over streamable HTTP shows every current tool of
// ListTools with its JSON Schema as the input schema, annotations from its
// effect, and check_operation.
func TestListTools(t *testing.T) {
	t.Parallel()
	w := newWorld(t, append(demoTools(), extraTools...))
	cs := connectHTTP(t, w.httpGateway(""), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tl := range listed.Tools {
		byName[tl.Name] = tl
	}
	require.Len(t, byName, 5, "four ledger tools and check_operation")

	lt, err := w.srv.Client.ListTools(harness.Ctx(w.agent, ""), &opledgerv1.ListToolsRequest{})
	require.NoError(t, err)
	for _, want := range lt.GetTools() {
		got := byName[want.GetName()]
		require.NotNil(t, got, want.GetName())
		wantSchema, err := protojson.Marshal(want.GetArgsSchema())
		require.NoError(t, err)
		gotSchema, err := json.Marshal(got.InputSchema)
		require.NoError(t, err)
		require.JSONEq(t, string(wantSchema), string(gotSchema), "%s: the ledger's schema, unchanged", want.GetName())
		require.True(t, strings.HasPrefix(got.Description, want.GetDescription()), got.Description)
		require.Equal(t, want.GetVersion(), got.Meta["opledger/tool_version"])
		require.Equal(t, want.GetApprovalRequired(), got.Meta["opledger/approval_required"])
	}
	require.Contains(t, byName["pay_invoice"].Description, "awaiting_approval", "the model is told how approval works")
	require.NotContains(t, byName["send_email"].Description, "awaiting_approval")

	hints := func(name string) (readOnly, idempotent bool, destructive *bool) {
		a := byName[name].Annotations
		require.NotNil(t, a, name)
		require.NotNil(t, a.OpenWorldHint, name)
		require.True(t, *a.OpenWorldHint, name)
		return a.ReadOnlyHint, a.IdempotentHint, a.DestructiveHint
	}
	ro, idem, destr := hints("pay_invoice")
	require.False(t, ro)
	require.False(t, idem)
	require.True(t, *destr, "side_effect → destructiveHint")
	ro, _, _ = hints("lookup_invoice")
	require.True(t, ro, "read_only → readOnlyHint")
	ro, idem, destr = hints("set_limit")
	require.False(t, ro)
	require.True(t, idem, "idempotent → idempotentHint")
	require.False(t, *destr)
	ro, idem, destr = hints(mcpgateway.CheckOperationTool)
	require.False(t, ro, "check_operation may run an approved operation")
	require.True(t, idem)
	require.True(t, *destr)
	require.Equal(t, []any{"operation_id"}, byName[mcpgateway.CheckOperationTool].InputSchema.(map[string]any)["required"])
}

// TestCallExecutesOnceAndRetryIsOneEffect: a call of a tool without approval
// executes once (one e-mail at the processor); the client's retry of the
// same call in the session (a new JSON-RPC id, the same tool and
// arguments) is the same operation, replayed, with no second e-mail; other
// arguments are another operation.
func TestCallExecutesOnceAndRetryIsOneEffect(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	url := w.httpGateway("")
	cs := connectHTTP(t, url, nil)
	args := map[string]any{"to": "ada@example.com", "subject": "Invoice INV-1", "body": "Paid."}

	res, first := call(t, cs, "send_email", args, nil)
	require.False(t, res.IsError, text(res))
	require.Equal(t, mcpgateway.StatusSucceeded, first.Status, text(res))
	require.False(t, first.Replayed)
	require.NotEmpty(t, first.OperationID)
	emails := w.env.Fakepay.Emails()
	require.Len(t, emails, 1, "one call, one e-mail")
	require.Equal(t, emails[0].ID, first.ExternalRef)
	require.Equal(t, emails[0].ID, first.Result["id"], "the downstream's answer is the structured result")
	require.Contains(t, text(res), emails[0].ID)

	res, again := call(t, cs, "send_email", args, nil)
	require.False(t, res.IsError, text(res))
	require.Equal(t, mcpgateway.StatusSucceeded, again.Status)
	require.Equal(t, first.OperationID, again.OperationID, "the retry is the same operation")
	require.True(t, again.Replayed)
	require.Contains(t, text(res), "nothing was done again")
	require.Len(t, w.env.Fakepay.Emails(), 1, "the retry sent nothing")

	other := map[string]any{"to": "ada@example.com", "subject": "Invoice INV-2", "body": "Paid."}
	_, third := call(t, cs, "send_email", other, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, third.Status)
	require.NotEqual(t, first.OperationID, third.OperationID, "other arguments are another call")
	require.Len(t, w.env.Fakepay.Emails(), 2)

	// The derived key belongs to the session: the same arguments in a new
	// session are a new call (docs/mcp.md); a key the host passes in _meta
	// is the call's identity across sessions.
	cs2 := connectHTTP(t, url, nil)
	_, fresh := call(t, cs2, "send_email", args, nil)
	require.NotEqual(t, first.OperationID, fresh.OperationID)
	require.Len(t, w.env.Fakepay.Emails(), 3)

	meta := mcp.Meta{mcpgateway.MetaIdempotencyKey: harness.Unique("host-call")}
	_, k1 := call(t, cs, "send_email", other, meta)
	_, k2 := call(t, cs2, "send_email", other, meta)
	require.Equal(t, mcpgateway.StatusSucceeded, k1.Status)
	require.NotEqual(t, third.OperationID, k1.OperationID, "an explicit key is its own call")
	require.Equal(t, k1.OperationID, k2.OperationID, "the host's key makes the call the same one in any session")
	require.True(t, k2.Replayed)
	require.Len(t, w.env.Fakepay.Emails(), 4)

	// The same host key with other arguments is refused and changes
	// nothing; the answer names the key's earlier call, which took effect.
	res, reused := call(t, cs2, "send_email", args, meta)
	require.True(t, res.IsError)
	require.Equal(t, mcpgateway.StatusError, reused.Status)
	require.Equal(t, string(client.ReasonIdempotencyKeyReused), reused.Error.Reason)
	require.Equal(t, "ALREADY_EXISTS", reused.Error.Code)
	require.Equal(t, k1.OperationID, reused.OperationID)
	require.Contains(t, reused.Next, "which is succeeded and may have taken effect")
	require.Len(t, w.env.Fakepay.Emails(), 4)
}

// TestAwaitingApprovalThenApproved: a tool that needs approval answers
// "awaiting_approval" (not an error) and charges nothing; after an approver
// approves it, check_operation runs it: one charge; a repeat of the call and
// of check_operation replay it.
func TestAwaitingApprovalThenApproved(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	cs := connectHTTP(t, w.httpGateway(""), nil)
	args := map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"}

	res, a := call(t, cs, "pay_invoice", args, nil)
	require.False(t, res.IsError, "awaiting approval is no error the model would retry: %s", text(res))
	require.Equal(t, mcpgateway.StatusAwaitingApproval, a.Status)
	require.Contains(t, text(res), a.OperationID)
	require.Contains(t, text(res), "check_operation")
	require.Empty(t, w.env.Fakepay.Charges())

	// Checking before the decision changes nothing.
	_, early := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.Equal(t, mcpgateway.StatusAwaitingApproval, early.Status)
	// Repeating the call is the same operation, still waiting.
	_, rep := call(t, cs, "pay_invoice", args, nil)
	require.Equal(t, a.OperationID, rep.OperationID)
	require.Equal(t, mcpgateway.StatusAwaitingApproval, rep.Status)
	require.Empty(t, w.env.Fakepay.Charges())

	w.approve(a.OperationID, a.Fingerprint)

	res, done := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.False(t, res.IsError, text(res))
	require.Equal(t, mcpgateway.StatusSucceeded, done.Status, text(res))
	require.False(t, done.Replayed, "this check ran it")
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, done.ExternalRef)
	require.EqualValues(t, 4900, charges[0].AmountMinor)

	_, again := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, again.Status)
	require.True(t, again.Replayed)
	_, repeat := call(t, cs, "pay_invoice", args, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, repeat.Status)
	require.Equal(t, a.OperationID, repeat.OperationID)
	require.Len(t, w.env.Fakepay.Charges(), 1, "one approved operation, one charge")
}

// TestOutcomeUnknownIsReportedAsSuch: the processor sends the e-mail and
// then answers 500, so the ledger cannot know the outcome. The answer says
// so, with the operation id and check_operation, and is not an error the
// model would retry; a repeat and a check send nothing.
func TestOutcomeUnknownIsReportedAsSuch(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	cs := connectHTTP(t, w.httpGateway(""), nil)
	w.env.Fakepay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
	args := map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thanks."}

	res, a := call(t, cs, "send_email", args, nil)
	require.False(t, res.IsError, "an unknown outcome is not an error to retry: %s", text(res))
	require.Equal(t, mcpgateway.StatusOutcomeUnknown, a.Status)
	require.Equal(t, string(client.ReasonDownstreamOutcomeUnknown), a.Error.Reason)
	require.Contains(t, text(res), a.OperationID)
	require.Contains(t, text(res), "Do NOT retry")
	require.Contains(t, a.Next, "check_operation")
	require.Len(t, w.env.Fakepay.Emails(), 1, "the processor did send it")

	_, rep := call(t, cs, "send_email", args, nil)
	require.Equal(t, a.OperationID, rep.OperationID)
	require.Equal(t, mcpgateway.StatusOutcomeUnknown, rep.Status)
	res, chk := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.False(t, res.IsError)
	require.Equal(t, mcpgateway.StatusOutcomeUnknown, chk.Status, "the e-mail service has no lookup: it stays unknown")
	require.Len(t, w.env.Fakepay.Emails(), 1, "never a second send")
}

// TestFailedSaysNothingHappened: a definitive refusal by the downstream is
// an error result saying that nothing happened.
func TestFailedSaysNothingHappened(t *testing.T) {
	t.Parallel()
	declined := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(`{"error":{"type":"card_error","message":"card declined"}}`))
	}))
	t.Cleanup(declined.Close)
	w := newWorld(t, harness.ToolsYAML(harness.ToolSpec{Name: "charge", URL: declined.URL}))
	cs := connectHTTP(t, w.httpGateway(""), nil)
	res, a := call(t, cs, "charge", map[string]any{"invoice_id": "INV-9", "amount_minor": 100, "currency": "EUR"}, nil)
	require.True(t, res.IsError)
	require.Equal(t, mcpgateway.StatusFailed, a.Status, text(res))
	require.Equal(t, string(client.ReasonDownstreamRejected), a.Error.Reason)
	require.Contains(t, text(res), "Nothing happened")
	require.NotEmpty(t, a.OperationID)
}

// TestRefusalsAreToolErrorsWithTheReason: bad arguments and an unknown
// operation come back as tool errors carrying the gRPC code and ErrorInfo
// reason (and the schema violations), and nothing is recorded.
func TestRefusalsAreToolErrorsWithTheReason(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	cs := connectHTTP(t, w.httpGateway(""), nil)

	res, a := call(t, cs, "pay_invoice", map[string]any{"invoice_id": "INV-1", "amount_minor": -5, "currency": "euro"}, nil)
	require.True(t, res.IsError)
	require.Equal(t, mcpgateway.StatusError, a.Status)
	require.Equal(t, "INVALID_ARGUMENT", a.Error.Code)
	require.Equal(t, string(client.ReasonArgsInvalid), a.Error.Reason)
	require.NotEmpty(t, a.Error.Violations)
	require.Contains(t, text(res), "ARGS_INVALID")
	require.Empty(t, a.OperationID)
	ops, err := w.srv.Client.ListOperations(harness.Ctx(w.agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err)
	require.Empty(t, ops.GetOperations(), "a refused call records nothing")

	// Arguments too large for the ledger's transport (1 MiB) are refused
	// with the ledger's own reason, not the transport's bare refusal.
	res, a = call(t, cs, "send_email", map[string]any{"to": "ap@example.com", "subject": "big", "body": strings.Repeat("x", 2<<20)}, nil)
	require.True(t, res.IsError)
	require.Equal(t, "RESOURCE_EXHAUSTED", a.Error.Code)
	require.Equal(t, string(client.ReasonArgsTooLarge), a.Error.Reason)
	require.Contains(t, a.Next, "Fix the arguments")
	ops, err = w.srv.Client.ListOperations(harness.Ctx(w.agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err)
	require.Empty(t, ops.GetOperations(), "a refused call records nothing")

	// JSON that names half of a UTF-16 surrogate pair is not Unicode text:
	// the refusal says so and where, rather than the decoder's "unexpected
	// EOF".
	for _, raw := range []string{
		`{"invoice_id":"INV-\ud800","amount_minor":5,"currency":"EUR"}`,
		`{"invoice_id":"INV-1","amount_minor":5,"currency":"EUR","note":"\uDC00\ud83d\ude00"}`,
	} {
		res, a = call(t, cs, "pay_invoice", json.RawMessage(raw), nil)
		require.True(t, res.IsError, raw)
		require.Equal(t, "INVALID_ARGUMENT", a.Error.Code, raw)
		require.Equal(t, string(client.ReasonArgsInvalid), a.Error.Reason, raw)
		require.Contains(t, a.Error.Message, "unpaired UTF-16 surrogate", raw)
		require.NotContains(t, a.Error.Message, "EOF", raw)
	}
	ops, err = w.srv.Client.ListOperations(harness.Ctx(w.agent, ""), &opledgerv1.ListOperationsRequest{})
	require.NoError(t, err)
	require.Empty(t, ops.GetOperations(), "a refused call records nothing")

	res, a = call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": "op_nope"}, nil)
	require.True(t, res.IsError)
	require.Equal(t, string(client.ReasonOperationNotFound), a.Error.Reason)

	res, a = call(t, cs, "send_email", map[string]any{"to": "a@example.com", "subject": "s", "body": "b"},
		mcp.Meta{mcpgateway.MetaIdempotencyKey: "bad key\twith a tab"})
	require.True(t, res.IsError)
	require.Equal(t, string(client.ReasonIdempotencyKeyInvalid), a.Error.Reason)
	res, a = call(t, cs, "send_email", map[string]any{"to": "a@example.com", "subject": "s", "body": "b"},
		mcp.Meta{mcpgateway.MetaIdempotencyKey: 42})
	require.True(t, res.IsError)
	require.Equal(t, string(client.ReasonIdempotencyKeyInvalid), a.Error.Reason)
	require.Empty(t, w.env.Fakepay.Emails())
}

// TestStartRefusesAKeyTheLedgerRefuses: a gateway whose key the ledger does
// not accept stops at start, naming the reason.
func TestStartRefusesAKeyTheLedgerRefuses(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	c, err := mcpgateway.Dial(mcpgateway.ConnConfig{Target: w.srv.Addr, APIKey: "opk_not_a_key"})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = mcpgateway.New(ctx, c, mcpgateway.Options{})
	require.ErrorIs(t, err, client.ReasonAPIKeyInvalid)
}

// TestHTTPToken: with a token, a request without it is refused 401 and a
// client that sends it works.
func TestHTTPToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	url := w.httpGateway("s3cret-token")

	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	c := mcp.NewClient(&mcp.Implementation{Name: "opledger-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	require.Error(t, err, "no token, no session")

	hc := &http.Client{Transport: bearer{token: "s3cret-token"}}
	cs := connectHTTP(t, url, hc)
	listed, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, listed.Tools, 3)
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestConcurrentSameCallsAreOneEffect: a client that fires the same call
// several times at once (a retry racing the original) gets one operation and
// one e-mail; every answer is that operation's success.
func TestConcurrentSameCallsAreOneEffect(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	cs := connectHTTP(t, w.httpGateway(""), nil)
	w.env.Fakepay.SetFaults(fakepay.Faults{Delay: 300 * time.Millisecond})
	args := map[string]any{"to": "race@example.com", "subject": "Once", "body": "Only once."}
	const n = 6
	answers := make(chan mcpgateway.Answer, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_email", Arguments: args})
			if err != nil {
				answers <- mcpgateway.Answer{Status: "protocol error: " + err.Error()}
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			var a mcpgateway.Answer
			_ = json.Unmarshal(b, &a)
			answers <- a
		}()
	}
	ids := map[string]bool{}
	for range n {
		a := <-answers
		require.Equal(t, mcpgateway.StatusSucceeded, a.Status, "%+v", a)
		ids[a.OperationID] = true
	}
	require.Len(t, ids, 1, "one operation")
	require.Len(t, w.env.Fakepay.Emails(), 1, "one e-mail")
}

// TestCutShortOneCallIsPending: the call's deadline ends while the one-call
// Prepare (which also executes) is in flight. The error carries no
// operation, yet the ledger recorded one and runs it to its end, since the
// downstream call never follows the caller's cancellation: the answer is
// pending ("may be running; call again with the same arguments"), never an
// error saying nothing was recorded, after which a model retries with other
// arguments and sends a second e-mail.
func TestCutShortOneCallIsPending(t *testing.T) {
	t.Parallel()
	w, cs := slowDownstream(t)

	args := map[string]any{"to": "slow@example.com", "subject": "Slow", "body": "A slow downstream."}
	res, a := call(t, cs, "send_email", args, nil)
	require.False(t, res.IsError, text(res))
	require.Equal(t, mcpgateway.StatusPending, a.Status, text(res))
	require.Equal(t, "DEADLINE_EXCEEDED", a.Error.Code)
	require.Contains(t, a.Next, "same arguments")
	require.NotContains(t, text(res), "Nothing was recorded")

	w.env.Fakepay.SetFaults(fakepay.Faults{})
	require.Eventually(t, func() bool {
		_, again := call(t, cs, "send_email", args, nil)
		return again.Status == mcpgateway.StatusSucceeded
	}, 30*time.Second, 200*time.Millisecond, "the same call again answers the operation's outcome")
	require.Len(t, w.env.Fakepay.Emails(), 1, "sent once")
}

// TestCutShortHostKeyedCallNamesItsOperation: as above, but the host gives
// each tools/call its own idempotency key (_meta), so "call again with the
// same arguments" would be a new key and a second e-mail. The gateway asks
// the ledger under the call's key which operation it recorded, and answers
// with it; check_operation then gives its outcome, and nothing is sent twice.
func TestCutShortHostKeyedCallNamesItsOperation(t *testing.T) {
	t.Parallel()
	w, cs := slowDownstream(t)

	args := map[string]any{"to": "slow@example.com", "subject": "Slow", "body": "A slow downstream."}
	res, a := call(t, cs, "send_email", args, mcp.Meta{mcpgateway.MetaIdempotencyKey: "host-toolcall-1"})
	require.False(t, res.IsError, text(res))
	require.NotEmpty(t, a.OperationID, "the operation the call's key names: %s", text(res))
	require.NotContains(t, text(res), "Call this tool again", "a new call would carry a new key")
	require.NotEqual(t, mcpgateway.StatusSucceeded, a.Status, "the e-mail is still on its way")

	w.env.Fakepay.SetFaults(fakepay.Faults{})
	require.Eventually(t, func() bool {
		_, done := call(t, cs, "check_operation", map[string]any{"operation_id": a.OperationID}, nil)
		return done.Status == mcpgateway.StatusSucceeded
	}, 30*time.Second, 200*time.Millisecond, "check_operation answers the operation's outcome")
	require.Len(t, w.env.Fakepay.Emails(), 1, "sent once")
}

// slowDownstream is a world whose processor answers after 4 s, and an MCP
// session over HTTP with a gateway whose calls end after 2 s.
func slowDownstream(t *testing.T) (*world, *mcp.ClientSession) {
	t.Helper()
	w := newWorld(t, demoTools())
	mux := http.NewServeMux()
	mux.Handle("/mcp", w.gateway(mcpgateway.Options{CallTimeout: 2 * time.Second}).HTTPHandler(""))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	cs := connectHTTP(t, hs.URL+"/mcp", nil)
	w.env.Fakepay.SetFaults(fakepay.Faults{Delay: 4 * time.Second})
	return w, cs
}
