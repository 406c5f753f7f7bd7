package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/fakepay"
)

const invoiceArgs = `{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`

// syncBuffer collects logs written from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type payEnv struct {
	pay  *fakepay.Server
	url  string
	logs *syncBuffer
}

func newPayEnv(t *testing.T) *payEnv {
	t.Helper()
	pay := fakepay.New(fakepay.Options{Seed: 7})
	ts := httptest.NewServer(pay)
	t.Cleanup(ts.Close)
	return &payEnv{pay: pay, url: ts.URL, logs: &syncBuffer{}}
}

func (e *payEnv) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// charges returns an executor for the processor's /charges, with fast backoff so that the suite
// stays quick.
func (e *payEnv) charges(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	cfg.URL = e.url + "/charges"
	if cfg.LookupURL == "" {
		cfg.LookupURL = e.url + "/charges?idempotency_key={key}"
	}
	cfg.ExternalRefField = "id"
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 10*time.Millisecond
	h, err := NewHTTP(cfg, nil, e.logger())
	require.NoError(t, err)
	return h
}

func call(key, args string) Call {
	return Call{Tenant: "t1", Tool: "pay_invoice", ToolVersion: "1", OperationID: "op-1", DownstreamKey: key, Args: json.RawMessage(args)}
}

func TestExecuteSucceedsAndReplays(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	h := env.charges(t, HTTPConfig{DedupesKeys: true})
	ctx := t.Context()
	r1 := h.Send(ctx, call("key-secret-1", invoiceArgs))
	require.Equal(t, OutcomeSucceeded, r1.Outcome, r1.Detail)
	require.Equal(t, http.StatusOK, r1.HTTPStatus)
	require.Equal(t, 1, r1.Attempts)
	require.True(t, strings.HasPrefix(r1.ExternalRef, "ch_"))
	require.Empty(t, r1.Detail)
	var c fakepay.Charge
	require.NoError(t, json.Unmarshal(r1.Body, &c))
	require.Equal(t, "key-secret-1", c.IdempotencyKey)
	require.Equal(t, int64(4900), c.AmountMinor)

	r2 := h.Send(ctx, call("key-secret-1", invoiceArgs))
	require.Equal(t, OutcomeSucceeded, r2.Outcome)
	require.Equal(t, r1.ExternalRef, r2.ExternalRef)
	require.Len(t, env.pay.Charges(), 1)
	require.NotContains(t, env.logs.String(), "key-secret-1", "keys must never be logged raw")
	require.Contains(t, env.logs.String(), keyDigest("key-secret-1"))
}

func TestExecuteChangedArgsFails(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	h := env.charges(t, HTTPConfig{DedupesKeys: true})
	require.Equal(t, OutcomeSucceeded, h.Send(t.Context(), call("k", invoiceArgs)).Outcome)
	r := h.Send(t.Context(), call("k", `{"invoice_id":"INV-2048","amount_minor":9900,"currency":"EUR"}`))
	require.Equal(t, OutcomeFailed, r.Outcome)
	require.Equal(t, http.StatusUnprocessableEntity, r.HTTPStatus)
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, string(r.Body), "idempotency_error")
	require.Len(t, env.pay.Charges(), 1)
}

func TestFailBeforeCommit(t *testing.T) {
	t.Parallel()
	t.Run("retried when the downstream dedupes", func(t *testing.T) {
		t.Parallel()
		env := newPayEnv(t)
		env.pay.SetFaults(fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 2}})
		r := env.charges(t, HTTPConfig{DedupesKeys: true, MaxAttempts: 3}).Send(t.Context(), call("k", invoiceArgs))
		require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
		require.Equal(t, 3, r.Attempts)
		charges := env.pay.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, charges[0].ID, r.ExternalRef)
	})
	t.Run("a single attempt leaves a 500 unknown", func(t *testing.T) {
		t.Parallel()
		env := newPayEnv(t)
		env.pay.SetFaults(fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 1}})
		r := env.charges(t, HTTPConfig{DedupesKeys: true, MaxAttempts: 1}).Send(t.Context(), call("k", invoiceArgs))
		require.Equal(t, OutcomeUnknown, r.Outcome)
		require.Equal(t, http.StatusInternalServerError, r.HTTPStatus)
		require.Equal(t, 1, r.Attempts)
		require.Contains(t, string(r.Body), "api_error")
		require.Empty(t, env.pay.Charges())
	})
}

func TestFailAfterCommit(t *testing.T) {
	t.Parallel()
	t.Run("single attempt", func(t *testing.T) {
		t.Parallel()
		env := newPayEnv(t)
		env.pay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
		r := env.charges(t, HTTPConfig{DedupesKeys: true, MaxAttempts: 1}).Send(t.Context(), call("k", invoiceArgs))
		require.Equal(t, OutcomeUnknown, r.Outcome)
		require.Equal(t, 1, r.Attempts)
		require.Len(t, env.pay.Charges(), 1)
	})
	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		env := newPayEnv(t)
		env.pay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
		r := env.charges(t, HTTPConfig{DedupesKeys: true, MaxAttempts: 3}).Send(t.Context(), call("k", invoiceArgs))
		require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
		require.Equal(t, 2, r.Attempts)
		charges := env.pay.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, charges[0].ID, r.ExternalRef)
	})
}

func TestDropAfterCommitThenLookup(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	env.pay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}})
	h := env.charges(t, HTTPConfig{DedupesKeys: true, MaxAttempts: 1, LookupConsistent: true})
	c := call("k", invoiceArgs)
	r := h.Send(t.Context(), c)
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 1, r.Attempts)
	require.Zero(t, r.HTTPStatus)
	require.Contains(t, r.Detail, "sent, no answer")
	charges := env.pay.Charges()
	require.Len(t, charges, 1)

	lr := h.Lookup(t.Context(), c)
	require.Equal(t, LookupFound, lr.Status, lr.Detail)
	require.Equal(t, OutcomeSucceeded, lr.Result.Outcome)
	require.Equal(t, charges[0].ID, lr.Result.ExternalRef)
	require.Contains(t, string(lr.Result.Body), charges[0].ID)

	lr = h.Lookup(t.Context(), call("other-key", invoiceArgs))
	require.Equal(t, LookupNotFound, lr.Status)
}

// TestNoHiddenResend checks that a request lost on a reused keep-alive connection is not
// re-sent behind the executor's back: net/http would do so for a POST carrying Idempotency-Key,
// and a downstream that ignores keys would then charge twice.
func TestNoHiddenResend(t *testing.T) {
	t.Parallel()
	for name, rt := range map[string]http.RoundTripper{
		"net/http": http.DefaultTransport.(*http.Transport).Clone(),
		"direct":   NewDirect(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := newPayEnv(t)
			client := &http.Client{Transport: rt}
			t.Cleanup(client.CloseIdleConnections)
			h, err := NewHTTP(HTTPConfig{URL: env.url + "/charges", MaxAttempts: 5, Timeout: 5 * time.Second}, client, nil)
			require.NoError(t, err)
			// The first call leaves a pooled connection for the second to reuse.
			require.Equal(t, OutcomeSucceeded, h.Send(t.Context(), call("k0", invoiceArgs)).Outcome)

			env.pay.SetFaults(fakepay.Faults{NoKeySupport: true, DropAfterCommit: fakepay.Trigger{Next: 1}})
			r := h.Send(t.Context(), call("k1", invoiceArgs))
			require.Equal(t, OutcomeUnknown, r.Outcome)
			require.Equal(t, 1, r.Attempts)
			require.Len(t, env.pay.Charges(), 2, "exactly one send of the dropped request")
			require.Equal(t, Capabilities{}, h.Capabilities())
		})
	}
}

func TestConnectionRefusedIsNotSubmitted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	for _, dedupes := range []bool{false, true} {
		h, err := NewHTTP(HTTPConfig{URL: "http://" + addr + "/charges", DedupesKeys: dedupes, MaxAttempts: 2,
			BackoffBase: time.Millisecond, LookupURL: "http://" + addr + "/charges?k={key}"}, nil, nil)
		require.NoError(t, err)
		r := h.Send(t.Context(), call("k", invoiceArgs))
		require.Equal(t, OutcomeNotSubmitted, r.Outcome, r.Detail)
		require.Zero(t, r.Attempts)
		require.Contains(t, r.Detail, "refused")

		lr := h.Lookup(t.Context(), call("k", invoiceArgs))
		require.Equal(t, LookupInconclusive, lr.Status)
	}
}

func TestCancelledBeforeSendIsNotSubmitted(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	h := env.charges(t, HTTPConfig{DedupesKeys: true})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := h.Send(ctx, call("k", invoiceArgs))
	require.Equal(t, OutcomeNotSubmitted, r.Outcome)
	require.Zero(t, r.Attempts)
	require.Empty(t, env.pay.Charges())
}

func TestTimeoutAfterSendIsUnknown(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	env.pay.SetFaults(fakepay.Faults{Delay: 300 * time.Millisecond})
	h := env.charges(t, HTTPConfig{Timeout: 50 * time.Millisecond})
	r := h.Send(t.Context(), call("k", invoiceArgs))
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, r.Detail, "timed out")
	// The processor carries on regardless: that is why the outcome is unknown.
	require.Eventually(t, func() bool { return len(env.pay.Charges()) == 1 }, 10*time.Second, 10*time.Millisecond)
}

func TestTimeoutThenConflictThenReplay(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	env.pay.SetFaults(fakepay.Faults{Delay: 300 * time.Millisecond})
	h := env.charges(t, HTTPConfig{Timeout: 50 * time.Millisecond, DedupesKeys: true, MaxAttempts: 1000})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// Attempt 1 times out while the processor holds the key; the next ones get 409 (or time
	// out) until the first commits, and then the stored 200 is replayed.
	r := h.Send(ctx, call("k", invoiceArgs))
	require.Equal(t, OutcomeSucceeded, r.Outcome, r.Detail)
	require.GreaterOrEqual(t, r.Attempts, 2)
	charges := env.pay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, r.ExternalRef)
}

func TestLookupLag(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	env.pay.SetFaults(fakepay.Faults{LookupLag: time.Hour})
	consistent := env.charges(t, HTTPConfig{DedupesKeys: true, LookupConsistent: true})
	eventual := env.charges(t, HTTPConfig{DedupesKeys: true})
	c := call("k", invoiceArgs)
	require.Equal(t, OutcomeSucceeded, eventual.Send(t.Context(), c).Outcome)

	lr := eventual.Lookup(t.Context(), c)
	require.Equal(t, LookupInconclusive, lr.Status)
	require.Contains(t, lr.Detail, "lookup is eventually consistent")
	// A configuration that declares the lookup consistent trusts the 404: the lag fault makes
	// that declaration a lie, which is what the chaos suite uses it to show.
	require.Equal(t, LookupNotFound, consistent.Lookup(t.Context(), c).Status)
}

func TestLookupWithoutURL(t *testing.T) {
	t.Parallel()
	h, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1/emails"}, nil, nil)
	require.NoError(t, err)
	lr := h.Lookup(t.Context(), call("k", invoiceArgs))
	require.Equal(t, LookupInconclusive, lr.Status)
	require.Equal(t, "downstream has no lookup", lr.Detail)
	require.Equal(t, Capabilities{}, h.Capabilities())
}

func TestEmailsAreNeverRetried(t *testing.T) {
	t.Parallel()
	env := newPayEnv(t)
	h, err := NewHTTP(HTTPConfig{URL: env.url + "/emails", ExternalRefField: "id", MaxAttempts: 3,
		BackoffBase: time.Millisecond}, nil, env.logger())
	require.NoError(t, err)
	require.Equal(t, Capabilities{}, h.Capabilities())
	c := call("k", `{"to":"a@example.com","subject":"Hi","body":"Hello"}`)
	r1 := h.Send(t.Context(), c)
	r2 := h.Send(t.Context(), c)
	require.Equal(t, OutcomeSucceeded, r1.Outcome)
	require.Equal(t, OutcomeSucceeded, r2.Outcome)
	require.NotEqual(t, r1.ExternalRef, r2.ExternalRef)
	require.Len(t, env.pay.Emails(), 2, "the e-mail endpoint does not dedupe keys")

	env.pay.SetFaults(fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 1}})
	r := h.Send(t.Context(), c)
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 1, r.Attempts)
	require.Len(t, env.pay.Emails(), 2)

	env.pay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
	r = h.Send(t.Context(), c)
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 1, r.Attempts)
	require.Len(t, env.pay.Emails(), 3)
}

// stub serves canned answers and records what it received.
type stub struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
	answer   func(n int, w http.ResponseWriter)
}

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.bodies = append(s.bodies, string(b))
	n := len(s.requests)
	s.mu.Unlock()
	s.answer(n, w)
}

func (s *stub) req(i int) *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i]
}

func (s *stub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func newStub(t *testing.T, answer func(n int, w http.ResponseWriter)) (*stub, string) {
	t.Helper()
	s := &stub{answer: answer}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func reply(status int, body string) func(int, http.ResponseWriter) {
	return func(_ int, w http.ResponseWriter) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		want   Outcome
	}{
		{200, OutcomeSucceeded}, {201, OutcomeSucceeded}, {204, OutcomeSucceeded},
		{301, OutcomeUnknown}, {302, OutcomeUnknown}, {303, OutcomeUnknown}, {307, OutcomeUnknown}, {308, OutcomeUnknown},
		{400, OutcomeFailed}, {401, OutcomeFailed}, {403, OutcomeFailed}, {404, OutcomeFailed}, {422, OutcomeFailed},
		{408, OutcomeUnknown}, {409, OutcomeUnknown}, {425, OutcomeUnknown}, {429, OutcomeUnknown},
		{500, OutcomeUnknown}, {502, OutcomeUnknown}, {503, OutcomeUnknown}, {504, OutcomeUnknown},
	}
	for _, tc := range cases {
		s, url := newStub(t, func(_ int, w http.ResponseWriter) {
			if tc.status/100 == 3 {
				w.Header().Set("Location", "/elsewhere")
			}
			w.WriteHeader(tc.status)
		})
		h, err := NewHTTP(HTTPConfig{URL: url, MaxAttempts: 3}, nil, nil)
		require.NoError(t, err)
		r := h.Send(t.Context(), call("k", `{}`))
		require.Equal(t, tc.want, r.Outcome, "status %d", tc.status)
		require.Equal(t, tc.status, r.HTTPStatus)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, 1, s.count(), "status %d: redirects are not followed and nothing is retried", tc.status)
	}
}

// TestRedirectAfterSendIsNeverFailed (issue 11, defect 1): a downstream that
// acts and then redirects (to a receipt, a login page) has taken effect; an
// agent told FAILED would retry under a new key and pay twice.
func TestRedirectAfterSendIsNeverFailed(t *testing.T) {
	t.Parallel()
	for _, code := range []int{301, 302, 303, 307, 308} {
		_, url := newStub(t, func(_ int, w http.ResponseWriter) {
			w.Header().Set("Location", "/receipt")
			w.WriteHeader(code)
		})
		h, err := NewHTTP(HTTPConfig{URL: url}, nil, nil)
		require.NoError(t, err)
		r := h.Send(t.Context(), call("k", `{}`))
		require.Equal(t, OutcomeUnknown, r.Outcome, "status %d", code)
		require.Contains(t, r.Detail, "redirect")
	}
}

// TestDeclaredDefinitiveStatuses: a tool that declares which statuses are
// definitive refusals gets exactly those as FAILED; every other non-2xx
// status is an unknown outcome.
func TestDeclaredDefinitiveStatuses(t *testing.T) {
	t.Parallel()
	cl := Classification{DefinitiveStatuses: []int{400, 422, 501}}
	cases := []struct {
		status int
		want   Outcome
	}{
		{400, OutcomeFailed}, {422, OutcomeFailed}, {501, OutcomeFailed},
		{401, OutcomeUnknown}, {404, OutcomeUnknown}, {410, OutcomeUnknown}, {500, OutcomeUnknown}, {302, OutcomeUnknown},
	}
	for _, tc := range cases {
		_, url := newStub(t, reply(tc.status, `{}`))
		h, err := NewHTTP(HTTPConfig{URL: url, Classification: cl}, nil, nil)
		require.NoError(t, err)
		require.Equal(t, tc.want, h.Send(t.Context(), call("k", `{}`)).Outcome, "status %d", tc.status)
	}
	for _, bad := range []Classification{{DefinitiveStatuses: []int{302}}, {DefinitiveStatuses: []int{200}},
		{LookupSucceeded: []string{"done"}, LookupFailed: []string{"DONE"}}, {LookupPending: []string{""}}} {
		_, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1", Classification: bad}, nil, nil)
		require.Error(t, err, "%+v", bad)
	}
}

// TestLaterRefusalAfterAmbiguousSendIsUnknown (issue 11, defect 2): attempt 1
// reaches the downstream, which charges and answers 502; attempt 2, under the
// same key, is refused with 404. The charge exists: the outcome is unknown,
// never FAILED.
func TestLaterRefusalAfterAmbiguousSendIsUnknown(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	})
	h, err := NewHTTP(HTTPConfig{URL: url, DedupesKeys: true, MaxAttempts: 3, BackoffBase: time.Millisecond}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome, r.Detail)
	require.Equal(t, 404, r.HTTPStatus)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, 2, s.count(), "the refusal ends the retries")
	require.Contains(t, r.Detail, "earlier attempt")

	// A refusal of the first attempt, with nothing sent before, is definitive.
	s2, url2 := newStub(t, reply(http.StatusNotFound, `{}`))
	h2, err := NewHTTP(HTTPConfig{URL: url2, DedupesKeys: true, MaxAttempts: 3}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, OutcomeFailed, h2.Send(t.Context(), call("k", `{}`)).Outcome)
	require.Equal(t, 1, s2.count())
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, reply(200, `{"id":"x"}`))
	h, err := NewHTTP(HTTPConfig{URL: url + "/pay", Headers: map[string]string{"authorization": "Bearer s3cret", "X-Extra": "1"}}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("the-key", `{"a": 1}`))
	require.Equal(t, OutcomeSucceeded, r.Outcome)
	require.Empty(t, r.Detail, "no external ref field configured: nothing to say")
	req := s.req(0)
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, "/pay", req.URL.Path)
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, "the-key", req.Header.Get("Idempotency-Key"))
	require.Equal(t, "Bearer s3cret", req.Header.Get("Authorization"))
	require.Equal(t, "1", req.Header.Get("X-Extra"))
	// Exactly the headers docs/tools.md lists ("What it sends"), no more.
	var names []string
	for name := range req.Header {
		names = append(names, name)
	}
	require.ElementsMatch(t, []string{"Accept", "Authorization", "Content-Length", "Content-Type",
		"Idempotency-Key", "User-Agent", "X-Extra"}, names)
	require.Equal(t, "application/json", req.Header.Get("Accept"))
	s.mu.Lock()
	require.Equal(t, `{"a": 1}`, s.bodies[0])
	s.mu.Unlock()
}

func TestBodiesAndExternalRefs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body, field string
		wantRef           string
		wantBody          string
		wantDetail        string
	}{
		{name: "nested", body: `{"data": {"charge": {"id": "ch_1"}}}`, field: "data.charge.id", wantRef: "ch_1",
			wantBody: `{"data":{"charge":{"id":"ch_1"}}}`},
		{name: "number", body: `{"id": 12345678901234567890}`, field: "id", wantRef: "12345678901234567890",
			wantBody: `{"id":12345678901234567890}`},
		{name: "missing", body: `{"other": 1}`, field: "id", wantBody: `{"other":1}`,
			wantDetail: `succeeded, but the answer has no external reference at "id"`},
		{name: "not JSON", body: "<html>ok</html>", field: "id", wantBody: `{"raw":"<html>ok</html>","truncated":false}`,
			wantDetail: `succeeded, but the answer has no external reference at "id"`},
		{name: "empty", body: "", field: "id", wantDetail: `succeeded, but the answer has no external reference at "id"`},
		{name: "array", body: ` [1, {"id": "x"}] `, field: "id", wantBody: `{"value":[1,{"id":"x"}]}`,
			wantDetail: `succeeded, but the answer has no external reference at "id"`},
		{name: "string", body: `"ok"`, field: "id", wantBody: `{"value":"ok"}`,
			wantDetail: `succeeded, but the answer has no external reference at "id"`},
		{name: "trailing data", body: `{"id":"a"} {"id":"b"}`, field: "id", wantBody: `{"raw":"{\"id\":\"a\"} {\"id\":\"b\"}","truncated":false}`,
			wantDetail: `succeeded, but the answer has no external reference at "id"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, url := newStub(t, reply(200, tc.body))
			h, err := NewHTTP(HTTPConfig{URL: url, ExternalRefField: tc.field}, nil, nil)
			require.NoError(t, err)
			r := h.Send(t.Context(), call("k", `{}`))
			require.Equal(t, OutcomeSucceeded, r.Outcome)
			require.Equal(t, tc.wantRef, r.ExternalRef)
			require.Equal(t, tc.wantDetail, r.Detail)
			if tc.wantBody == "" {
				require.Nil(t, r.Body)
			} else {
				require.Equal(t, tc.wantBody, string(r.Body))
			}
		})
	}
}

// TestObject: the one rule by which any answer becomes a stored JSON object.
func TestObject(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a": 1}`: `{"a": 1}`, ` [1,2] `: `{"value":[1,2]}`, `7`: `{"value":7}`, `null`: `{"value":null}`,
		`<b>x</b>`: `{"raw":"<b>x</b>","truncated":false}`, `{"a":`: `{"raw":"{\"a\":","truncated":false}`,
	} {
		require.Equal(t, want, string(Object([]byte(in))), in)
	}
	require.Nil(t, Object(nil))
	require.Nil(t, Object([]byte("  ")))
}

func TestLargeBodiesAreBounded(t *testing.T) {
	t.Parallel()
	big := `{"id":"ch_1","pad":"` + strings.Repeat("x", 100<<10) + `"}`
	_, url := newStub(t, reply(400, big))
	h, err := NewHTTP(HTTPConfig{URL: url, MaxBodyBytes: 1024}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeFailed, r.Outcome)
	var wrapped struct {
		Raw       string `json:"raw"`
		Truncated bool   `json:"truncated"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &wrapped))
	require.True(t, wrapped.Truncated)
	require.Len(t, wrapped.Raw, 1024)

	_, url = newStub(t, reply(500, strings.Repeat("é", 10<<10)))
	h, err = NewHTTP(HTTPConfig{URL: url}, nil, nil)
	require.NoError(t, err)
	r = h.Send(t.Context(), call("k", `{}`))
	require.NoError(t, json.Unmarshal(r.Body, &wrapped))
	require.True(t, wrapped.Truncated)
	require.LessOrEqual(t, len(wrapped.Raw), maxRawBytes+2)
}

func TestRetriesConflictWhenDeduping(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusConflict)
			return
		}
		_, _ = io.WriteString(w, `{"id":"ch_9"}`)
	})
	h, err := NewHTTP(HTTPConfig{URL: url, DedupesKeys: true, MaxAttempts: 3, ExternalRefField: "id", BackoffBase: time.Millisecond}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeSucceeded, r.Outcome)
	require.Equal(t, "ch_9", r.ExternalRef)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, 2, s.count())
	for i := range s.count() {
		require.Equal(t, "k", s.req(i).Header.Get("Idempotency-Key"), "the same key on every attempt")
	}
}

func TestRetriesStopAtMaxAttempts(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, reply(503, `{"error":"busy"}`))
	h, err := NewHTTP(HTTPConfig{URL: url, DedupesKeys: true, MaxAttempts: 4, BackoffBase: time.Millisecond}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 4, r.Attempts)
	require.Equal(t, 4, s.count())
	require.Equal(t, `{"error":"busy"}`, string(r.Body))
}

func TestRetriesStopAtDeadline(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, reply(500, ""))
	h, err := NewHTTP(HTTPConfig{URL: url, DedupesKeys: true, MaxAttempts: 1_000_000,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	r := h.Send(ctx, call("k", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Less(t, r.Attempts, 1_000_000)
	require.Equal(t, s.count(), r.Attempts)
}

func TestNoKeyMeansNoRetry(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, reply(500, ""))
	h, err := NewHTTP(HTTPConfig{URL: url, DedupesKeys: true, MaxAttempts: 5, BackoffBase: time.Millisecond}, nil, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 1, s.count())
	require.Empty(t, s.req(0).Header.Values("Idempotency-Key"))
}

// failingTransport lets its first n round trips through and fails the rest before sending.
type failingTransport struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (f *failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.n.Add(-1) >= 0 {
		return f.next.RoundTrip(r)
	}
	return nil, errors.New("dial tcp: connect: connection refused")
}

func TestEarlierSendMakesLaterNotSubmittedUnknown(t *testing.T) {
	t.Parallel()
	_, url := newStub(t, reply(502, ""))
	ft := &failingTransport{next: http.DefaultTransport}
	ft.n.Store(1)
	h, err := NewHTTP(HTTPConfig{URL: url, DedupesKeys: true, MaxAttempts: 2, BackoffBase: time.Millisecond},
		&http.Client{Transport: ft}, nil)
	require.NoError(t, err)
	r := h.Send(t.Context(), call("k", `{}`))
	require.Equal(t, OutcomeUnknown, r.Outcome)
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, r.Detail, "an earlier attempt may have reached the downstream")
}

func TestInvalidCalls(t *testing.T) {
	t.Parallel()
	s, url := newStub(t, reply(200, `{}`))
	h, err := NewHTTP(HTTPConfig{URL: url}, nil, nil)
	require.NoError(t, err)
	for _, args := range []string{``, `[]`, `"x"`, `{`} {
		r := h.Send(t.Context(), call("k", args))
		require.Equal(t, OutcomeFailed, r.Outcome, args)
		require.Zero(t, r.Attempts)
	}
	r := h.Send(t.Context(), call("bad\nkey", `{}`))
	require.Equal(t, OutcomeFailed, r.Outcome)
	require.Zero(t, s.count())
}

func TestLookupAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status  int
		body    string
		want    LookupStatus
		outcome Outcome
		ref     string
	}{
		{200, `{"id":"ch_1","status":"succeeded"}`, LookupFound, OutcomeSucceeded, "ch_1"},
		{200, `{"id":"ch_1","status":"failed"}`, LookupFound, OutcomeFailed, ""},
		{200, `{"id":"ch_1","status":"pending"}`, LookupInconclusive, 0, ""},
		{200, `{"id":"ch_1","status":"requires_action"}`, LookupInconclusive, 0, ""},
		// Issue 11, defect 8: unknown is not success.
		{200, `{"id":"ch_1","status":"on_hold"}`, LookupInconclusive, 0, ""},
		{200, `{"id":"ch_1"}`, LookupInconclusive, 0, ""},
		{200, `{"id":"ch_1","status":7}`, LookupInconclusive, 0, ""},
		{200, `OK`, LookupInconclusive, 0, ""},
		{200, `["succeeded"]`, LookupInconclusive, 0, ""},
		{200, ``, LookupInconclusive, 0, ""},
		{404, `{}`, LookupNotFound, 0, ""},
		{500, `{}`, LookupInconclusive, 0, ""},
		{429, `{}`, LookupInconclusive, 0, ""},
	}
	for _, tc := range cases {
		s, url := newStub(t, reply(tc.status, tc.body))
		h, err := NewHTTP(HTTPConfig{URL: url, LookupURL: url + "/lookup/{key}?x=1", LookupConsistent: true,
			ExternalRefField: "id", DedupesKeys: true}, nil, nil)
		require.NoError(t, err)
		require.Equal(t, Capabilities{DedupesKeys: true, HasLookup: true, LookupConsistent: true}, h.Capabilities())
		lr := h.Lookup(t.Context(), call("a b/c&d", `{}`))
		require.Equal(t, tc.want, lr.Status, "%d %s", tc.status, tc.body)
		require.Equal(t, tc.outcome, lr.Result.Outcome)
		require.Equal(t, tc.ref, lr.Result.ExternalRef)
		require.Equal(t, tc.status, lr.HTTPStatus, "the answer's status is kept, whatever it proves")
		require.Equal(t, http.MethodGet, s.req(0).Method)
		require.Equal(t, "/lookup/a+b%2Fc%26d", s.req(0).URL.EscapedPath())
		require.Equal(t, "x=1", s.req(0).URL.RawQuery)
	}
}

// TestLookupDeclaredStatuses: a tool declares its downstream's vocabulary
// (and where the status sits); only those values settle an outcome.
func TestLookupDeclaredStatuses(t *testing.T) {
	t.Parallel()
	cl := Classification{LookupStatusField: "data.state", LookupSucceeded: []string{"paid"},
		LookupFailed: []string{"voided"}, LookupPending: []string{"open"}}
	cases := []struct {
		body    string
		want    LookupStatus
		outcome Outcome
	}{
		{`{"data":{"id":"in_1","state":"paid"}}`, LookupFound, OutcomeSucceeded},
		{`{"data":{"id":"in_1","state":"PAID"}}`, LookupFound, OutcomeSucceeded},
		{`{"data":{"id":"in_1","state":"voided"}}`, LookupFound, OutcomeFailed},
		{`{"data":{"id":"in_1","state":"open"}}`, LookupInconclusive, 0},
		{`{"data":{"id":"in_1","state":"succeeded"}}`, LookupInconclusive, 0},
		{`{"status":"succeeded"}`, LookupInconclusive, 0},
	}
	for _, tc := range cases {
		_, url := newStub(t, reply(200, tc.body))
		h, err := NewHTTP(HTTPConfig{URL: url, LookupURL: url + "/?k={key}", LookupConsistent: true,
			ExternalRefField: "data.id", Classification: cl}, nil, nil)
		require.NoError(t, err)
		lr := h.Lookup(t.Context(), call("k", `{}`))
		require.Equal(t, tc.want, lr.Status, tc.body)
		require.Equal(t, tc.outcome, lr.Result.Outcome, tc.body)
	}
}

func TestLookupTimeoutIsInconclusive(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	_, url := newStub(t, func(_ int, w http.ResponseWriter) { <-release })
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for handlers
	h, err := NewHTTP(HTTPConfig{URL: url, LookupURL: url + "/?k={key}", LookupConsistent: true, Timeout: 50 * time.Millisecond}, nil, nil)
	require.NoError(t, err)
	lr := h.Lookup(t.Context(), call("k", `{}`))
	require.Equal(t, LookupInconclusive, lr.Status)
	require.Contains(t, lr.Detail, "timed out")
	require.Zero(t, lr.HTTPStatus, "no answer came")
}

func TestNewHTTPValidates(t *testing.T) {
	t.Parallel()
	bad := []HTTPConfig{
		{},
		{URL: "ftp://x/y"},
		{URL: "http:///nohost"},
		{URL: "http://x", LookupURL: "http://x/no-placeholder"},
		{URL: "http://x", Timeout: -1},
		{URL: "http://x", MaxAttempts: -1},
		{URL: "http://x", MaxBodyBytes: -1},
		{URL: "http://x", Headers: map[string]string{"idempotency-key": "fixed"}},
		{URL: "http://x", Headers: map[string]string{"Content-Type": "text/plain"}},
		{URL: "http://x", Headers: map[string]string{"X-Bad": "a\r\nInjected: 1"}},
		{URL: "http://x", Headers: map[string]string{"Bad Name": "1"}},
	}
	for _, cfg := range bad {
		_, err := NewHTTP(cfg, nil, nil)
		require.Error(t, err, "%+v", cfg)
	}
	h, err := NewHTTP(HTTPConfig{URL: "http://x", MaxAttempts: 7}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, h.cfg.MaxAttempts, "never retried without dedupe")
	require.Equal(t, DefaultTimeout, h.cfg.Timeout)
	require.Equal(t, int64(DefaultMaxBodyBytes), h.cfg.MaxBodyBytes)
	h, err = NewHTTP(HTTPConfig{URL: "http://x", DedupesKeys: true}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, DefaultMaxAttempts, h.cfg.MaxAttempts)
}

func TestBackoffIsBounded(t *testing.T) {
	t.Parallel()
	h, err := NewHTTP(HTTPConfig{URL: "http://x", DedupesKeys: true}, nil, nil)
	require.NoError(t, err)
	for attempt := 1; attempt < 100; attempt++ {
		d := h.backoff(attempt, 0)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, min(DefaultBackoffMax, DefaultBackoffBase<<min(attempt-1, 20)))
	}
	require.Equal(t, DefaultBackoffMax, h.backoff(1, time.Hour), "Retry-After is honoured up to the cap")
}

func TestStringers(t *testing.T) {
	t.Parallel()
	require.Equal(t, "succeeded", OutcomeSucceeded.String())
	require.Equal(t, "not_submitted", OutcomeNotSubmitted.String())
	require.Equal(t, "Outcome(0)", Outcome(0).String())
	require.Equal(t, "inconclusive", LookupInconclusive.String())
}

// decodedPath is how the executor once read a path: the whole answer
// decoded into maps, numbers kept as written.
func decodedPath(body []byte, path string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	for part := range strings.SplitSeq(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[part]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, x != ""
	case json.Number:
		return x.String(), true
	}
	return "", false
}

// TestExtractPathReadsWhatADecodeReads: reading a path from the answer's
// undecoded members finds exactly what decoding the whole answer found.
func TestExtractPathReadsWhatADecodeReads(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{"id":"ch_1","status":"succeeded","amount":4900,"neg":-1.5e3,"empty":"","nul":null,"t":true,"arr":["x"],
		  "data":{"id":"in_2","object":{"id":7,"deep":{"ref":"r\u00e9f"}},"s":"a\"b"},"dup":"first","dup":"last",
		  "k\u0065y":"escaped name","a\"q":{"b":"quoted name"},"last":{"x":[{"y":"}"}],"z":"]"}}`,
		`{"arr":[1,{"id":"not me"}],"id":"me"}`, `{"data":{"data":{"id":"in"}},"id":"out"}`,
		"{\"a\xff\":\"x\",\"b\xff\":\"y\",\"b\\ufffd\":\"z\",\"c\\ufffd\":\"v\",\"c\xfe\":\"w\"}",
		`{"data":null}`, `{"data":"x"}`, `{}`,
	}
	paths := []string{"id", "status", "amount", "neg", "empty", "nul", "t", "arr", "missing", "data", "data.id", "data.object.id",
		"data.object.deep.ref", "data.s", "data.missing", "id.x", "dup", "data.object.deep", "",
		"key", `a"q.b`, "last.z", "last.x", "data.data.id", "value", "a\ufffd", "a\xff", "b\ufffd", "c\ufffd", "c\xfe"}
	for _, b := range bodies {
		ans, err := readBody(strings.NewReader(b), DefaultMaxBodyBytes)
		require.NoError(t, err)
		require.NotNil(t, ans.object, b)
		for _, p := range paths {
			wantV, wantOK := decodedPath(ans.body, p)
			gotV, gotOK := extractPath(ans.object, p)
			require.Equal(t, wantOK, gotOK, "%s in %s", p, b)
			require.Equal(t, wantV, gotV, "%s in %s", p, b)
		}
	}
}

// TestExtractPathNeedsAnObject: an answer that is not a JSON object is kept wrapped
// ({"value": …} or {"raw": …}), and no path reads the wrapper.
func TestExtractPathNeedsAnObject(t *testing.T) {
	t.Parallel()
	for _, b := range []string{`["x"]`, `"x"`, `5`, `null`, `not json`, `{"value":`} {
		ans, err := readBody(strings.NewReader(b), DefaultMaxBodyBytes)
		require.NoError(t, err)
		require.Nil(t, ans.object, b)
		require.NotNil(t, ans.body, b)
		for _, p := range []string{"value", "raw", ""} {
			_, ok := extractPath(ans.object, p)
			require.False(t, ok, "%s in %s", p, b)
		}
	}
}

// FuzzExtractPath: on any JSON object, reading a path from the compact text finds what
// decoding the whole answer finds (go test -fuzz FuzzExtractPath ./executor).
func FuzzExtractPath(f *testing.F) {
	f.Add(`{"a":{"b":"c"},"a":{"b":"d"}}`, "a.b")
	f.Add(`{"x":[{"y":"}"}],"y" : "\"]"}`, "y")
	f.Add(`{"k\u0065y":1e3}`, "key")
	f.Add(`{"s":"a\\","t":-0.5}`, "t")
	f.Add("{\"a\xff\":1,\"a\\ufffd\":2}", "a\ufffd")
	f.Fuzz(func(t *testing.T, body, path string) {
		ans, err := readBody(strings.NewReader(body), DefaultMaxBodyBytes)
		if err != nil || ans.object == nil {
			return
		}
		wantV, wantOK := decodedPath(ans.body, path)
		gotV, gotOK := extractPath(ans.object, path)
		require.Equal(t, wantOK, gotOK, "%q in %s", path, ans.body)
		require.Equal(t, wantV, gotV, "%q in %s", path, ans.body)
	})
}

// BenchmarkExecute measures one successful call through the executor to a
// real local HTTP server, as a new tool call makes it.
func BenchmarkExecute(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"ch_1","object":"charge","amount_minor":4900,"currency":"EUR","status":"succeeded"}`)
	}))
	b.Cleanup(srv.Close)
	h, err := NewHTTP(HTTPConfig{URL: srv.URL + "/charges", ExternalRefField: "id", Headers: map[string]string{"Authorization": "Bearer x"}}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	call := Call{Tenant: "acme", Tool: "pay_invoice", OperationID: "op_1", DownstreamKey: "opk_0123456789",
		Args: []byte(`{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"}`)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if res := h.Send(ctx, call); res.Outcome != OutcomeSucceeded {
			b.Fatal(res.Detail)
		}
	}
}
