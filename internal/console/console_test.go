package console_test

import (
	"bytes"
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/console"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// world is a real server (gRPC for the agent) and the console over the
// same ledger on a real HTTP port, with keys for the demo tenant.
type world struct {
	env                       *harness.Env
	srv                       *harness.Server
	url                       string
	agent, approver, operator string
	logs                      *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newWorld(t *testing.T, opts harness.Options) *world {
	t.Helper()
	return newWorldWith(t, opts, console.Options{})
}

func newWorldWith(t *testing.T, opts harness.Options, copts console.Options) *world {
	t.Helper()
	env := harness.New(t, opts)
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	logs := &lockedBuffer{}
	copts.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hs := httptest.NewServer(console.New(srv.Ledger, copts))
	t.Cleanup(hs.Close)
	return &world{env: env, srv: srv, url: hs.URL, logs: logs,
		agent: namedKey(t, env, "invoice-agent", ledger.RoleAgent), approver: namedKey(t, env, "alice", ledger.RoleApprover),
		operator: namedKey(t, env, "oscar", ledger.RoleOperator)}
}

// namedKey creates a principal of the demo tenant with a name people read
// in the event log and the page header.
func namedKey(t *testing.T, env *harness.Env, name, role string) string {
	t.Helper()
	key, _, err := ledger.CreatePrincipal(context.Background(), env.Store, "demo", name, []string{role})
	require.NoError(t, err)
	return key
}

// prepare has the agent prepare pay_invoice for invoice.
func (w *world) prepare(t *testing.T, invoice string, amount int) *opledgerv1.Operation {
	t.Helper()
	return w.prepareAs(t, w.agent, "pay_invoice", invoice, amount)
}

func (w *world) prepareAs(t *testing.T, key, tool, invoice string, amount int) *opledgerv1.Operation {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"invoice_id": invoice, "amount_minor": amount, "currency": "EUR"})
	require.NoError(t, err)
	resp, err := w.srv.Client.Prepare(harness.Ctx(key, "key-"+invoice), &opledgerv1.PrepareRequest{Tool: tool, Args: args})
	require.NoError(t, err)
	return resp.GetOperation()
}

func (w *world) get(t *testing.T, id string) *opledgerv1.Operation {
	t.Helper()
	resp, err := w.srv.Client.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: id, IncludeEvents: true})
	require.NoError(t, err)
	return resp.GetOperation()
}

func (w *world) requireState(t *testing.T, id string, want opledgerv1.State) {
	t.Helper()
	require.Equal(t, want, w.get(t, id).GetState())
}

func (w *world) charges(invoice string) int {
	n := 0
	for _, c := range w.env.Fakepay.Charges() {
		if c.InvoiceID == invoice {
			n++
		}
	}
	return n
}

// requireLogsClean: the console's log lines name routes, statuses and
// principals, never keys, session tokens or arguments.
func (w *world) requireLogsClean(t *testing.T, secrets ...string) {
	t.Helper()
	logs := w.logs.String()
	require.Contains(t, logs, `"msg":"console request"`)
	for _, s := range append([]string{w.agent, w.approver, w.operator, "ops_", "INV-", "amount_minor"}, secrets...) {
		require.NotContains(t, logs, s)
	}
}

// browser is an HTTP client with a cookie jar, as a browser without
// JavaScript would use the console.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	last *http.Response
}

func (w *world) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: w.url, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

func (b *browser) do(req *http.Request) (int, string) {
	b.t.Helper()
	resp, err := b.c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	b.last = resp
	return resp.StatusCode, string(body)
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+path, nil)
	require.NoError(b.t, err)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var hidden = regexp.MustCompile(`<input type="hidden" name="(\w+)" value="([^"]*)">`)

// field returns the value of the first hidden input named name in page.
func field(t *testing.T, page, name string) string {
	t.Helper()
	for _, m := range hidden.FindAllStringSubmatch(page, -1) {
		if m[1] == name {
			return m[2]
		}
	}
	t.Fatalf("no hidden field %q in the page", name)
	return ""
}

// signIn signs in with key and returns the front page.
func (b *browser) signIn(key string) (int, string) {
	b.t.Helper()
	status, page := b.get("/login")
	require.Equal(b.t, http.StatusOK, status)
	return b.post("/login", url.Values{"csrf": {field(b.t, page, "csrf")}, "key": {key}})
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	w.prepare(t, "INV-1", 4900)

	t.Run("pages need a session", func(t *testing.T) {
		b := w.browser(t)
		status, page := b.get("/")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "/login", b.last.Request.URL.Path)
		require.Contains(t, page, `type="password"`)
		status, _ = b.post("/operations/op_00000000000000000000000000/decision", url.Values{"decision": {"approve"}})
		require.Equal(t, http.StatusUnauthorized, status)
	})
	t.Run("a wrong key, an agent key, a stale form", func(t *testing.T) {
		b := w.browser(t)
		status, page := b.signIn("opl_not-a-real-key")
		require.Equal(t, http.StatusUnauthorized, status)
		require.Contains(t, page, "That key was not accepted")
		require.NotContains(t, page, "opl_not-a-real-key")
		status, page = b.signIn(w.agent)
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, page, "neither approve nor resolve")
		require.NotContains(t, page, w.agent)
		status, _ = b.post("/login", url.Values{"csrf": {"made-up"}, "key": {w.approver}})
		require.Equal(t, http.StatusForbidden, status)
		status, _ = b.get("/")
		require.Equal(t, "/login", b.last.Request.URL.Path, "no session came of it: %d", status)
	})
	t.Run("an approver key opens a session; signing out ends it", func(t *testing.T) {
		b := w.browser(t)
		status, page := b.signIn(w.approver)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "/", b.last.Request.URL.Path)
		require.Contains(t, page, "INV-1")
		require.NotContains(t, page, w.approver)
		u, _ := url.Parse(w.url)
		cookies := b.c.Jar.Cookies(u)
		require.Len(t, cookies, 1)
		session := cookies[0].Value
		require.NotContains(t, session, w.approver)

		status, _ = b.post("/logout", url.Values{"csrf": {field(t, page, "csrf")}})
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "/login", b.last.Request.URL.Path)
		// The old cookie, replayed, is worth nothing.
		req, _ := http.NewRequest(http.MethodGet, w.url+"/", nil)
		req.AddCookie(&http.Cookie{Name: "opledger_session", Value: session})
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/login", resp.Header.Get("Location"))
		w.requireLogsClean(t, session)
	})
	t.Run("headers and cookie flags", func(t *testing.T) {
		resp, err := http.PostForm(w.url+"/login", url.Values{})
		require.NoError(t, err)
		resp.Body.Close()
		b := w.browser(t)
		_, page := b.get("/login")
		login := b.last
		req, _ := http.NewRequest(http.MethodPost, w.url+"/login", strings.NewReader(url.Values{"csrf": {field(t, page, "csrf")}, "key": {w.approver}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range login.Cookies() {
			req.AddCookie(c)
		}
		resp, err = (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		var set string
		for _, v := range resp.Header.Values("Set-Cookie") {
			if strings.HasPrefix(v, "opledger_session=") {
				set = v
			}
		}
		require.Contains(t, set, "HttpOnly")
		require.Contains(t, set, "SameSite=Strict")
		require.Contains(t, set, "Path=/")
		require.NotContains(t, set, "Secure", "plain HTTP on loopback: a Secure cookie would not come back")
		for _, r := range []*http.Response{login, resp} {
			require.Equal(t, console.ContentSecurityPolicy, r.Header.Get("Content-Security-Policy"))
			require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
			require.Equal(t, "DENY", r.Header.Get("X-Frame-Options"))
			require.Equal(t, "no-referrer", r.Header.Get("Referrer-Policy"))
		}
		require.Equal(t, "no-store", login.Header.Get("Cache-Control"))
		require.Contains(t, console.ContentSecurityPolicy, "default-src 'none'")
		require.NotContains(t, console.ContentSecurityPolicy, "script-src")
		require.NotContains(t, page, "<script")
		require.NotContains(t, page, "http://", "nothing is loaded from elsewhere")
		require.NotContains(t, page, "https://")
	})
}

// TestSecureCookies: behind HTTPS the cookies are Secure, __Host- prefixed,
// and HSTS is sent.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, harness.Options{}, console.Options{Secure: true})
	resp, err := http.Get(w.url + "/login")
	require.NoError(t, err)
	resp.Body.Close()
	set := resp.Header.Get("Set-Cookie")
	require.True(t, strings.HasPrefix(set, "__Host-opledger_login="), set)
	require.Contains(t, set, "Secure")
	require.Contains(t, set, "HttpOnly")
	require.Contains(t, set, "SameSite=Strict")
	require.NotEmpty(t, resp.Header.Get("Strict-Transport-Security"))
}

// decisionForm reads the decision form of an operation page.
func (b *browser) decisionForm(id string) url.Values {
	b.t.Helper()
	status, page := b.get("/operations/" + id)
	require.Equal(b.t, http.StatusOK, status)
	return url.Values{"csrf": {field(b.t, page, "csrf")}, "fingerprint": {field(b.t, page, "fingerprint")}}
}

func TestDecisions(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})

	t.Run("deny, and the page says so", func(t *testing.T) {
		op := w.prepare(t, "INV-deny", 100)
		b := w.browser(t)
		b.signIn(w.approver)
		form := b.decisionForm(op.GetId())
		require.Equal(t, op.GetFingerprint(), form.Get("fingerprint"))
		form.Set("decision", "deny")
		form.Set("reason", "duplicate invoice")
		status, page := b.post("/operations/"+op.GetId()+"/decision", form)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, "Denied.")
		require.Contains(t, page, "duplicate invoice")
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_REJECTED)
	})
	t.Run("no decision chosen", func(t *testing.T) {
		op := w.prepare(t, "INV-none", 100)
		b := w.browser(t)
		b.signIn(w.approver)
		status, page := b.post("/operations/"+op.GetId()+"/decision", b.decisionForm(op.GetId()))
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, page, "Choose Approve or Deny")
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	})
	t.Run("self-approval is refused", func(t *testing.T) {
		both := w.env.Key("demo", "agent", "approver")
		op := w.prepareAs(t, both, "pay_invoice", "INV-self", 100)
		b := w.browser(t)
		b.signIn(both)
		status, page := b.get("/operations/" + op.GetId())
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, "You prepared this operation")
		require.NotContains(t, page, `class="decision"`)
		form := url.Values{"csrf": {field(t, page, "csrf")}, "fingerprint": {op.GetFingerprint()}, "decision": {"approve"}}
		status, page = b.post("/operations/"+op.GetId()+"/decision", form)
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, page, "SELF_APPROVAL_FORBIDDEN")
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	})
	t.Run("a reason PostgreSQL cannot store is refused", func(t *testing.T) {
		op := w.prepare(t, "INV-bytes", 100)
		b := w.browser(t)
		b.signIn(w.approver)
		for _, c := range []struct {
			field, value string
			status       int
			reason       string
		}{
			{"reason", "ok\x00", http.StatusBadRequest, "FIELD_INVALID"},
			{"reason", "ok\xff", http.StatusBadRequest, "FIELD_INVALID"},
			{"fingerprint", "v1:\x00", http.StatusConflict, "APPROVAL_FINGERPRINT_MISMATCH"},
			{"fingerprint", "v1:\xff", http.StatusConflict, "APPROVAL_FINGERPRINT_MISMATCH"},
			{"fingerprint", "v1:" + strings.Repeat("0", 64), http.StatusConflict, "APPROVAL_FINGERPRINT_MISMATCH"},
		} {
			form := b.decisionForm(op.GetId())
			form.Set("decision", "approve")
			form.Set(c.field, c.value)
			status, page := b.post("/operations/"+op.GetId()+"/decision", form)
			require.Equal(t, c.status, status, "%s %q", c.field, c.value)
			require.Contains(t, page, c.reason, "%s %q", c.field, c.value)
		}
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	})
	t.Run("a form posted to an id that cannot exist is not found", func(t *testing.T) {
		op := w.prepare(t, "INV-path", 100)
		b := w.browser(t)
		b.signIn(w.env.Key("demo", "approver", "operator"))
		form := b.decisionForm(op.GetId())
		form.Set("decision", "approve")
		for _, id := range []string{"op_%00", "%FF", "op_" + strings.Repeat("z", 5000)} {
			for _, action := range []string{"decision", "edit", "resolution", "reconcile"} {
				status, page := b.post("/operations/"+id+"/"+action, form)
				require.Equal(t, http.StatusNotFound, status, "%s %s", id, action)
				require.Less(t, len(page), 20000, "the page does not echo the whole id")
			}
		}
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	})
	t.Run("a decision taken meanwhile is a conflict", func(t *testing.T) {
		op := w.prepare(t, "INV-race", 100)
		b := w.browser(t)
		b.signIn(w.approver)
		form := b.decisionForm(op.GetId())
		// Another approver denies it over gRPC while the page is open.
		other := w.env.Key("demo", "approver")
		_, err := w.srv.Client.Approve(harness.Ctx(other, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
			Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_DENY, Reason: "no"})
		require.NoError(t, err)
		form.Set("decision", "approve")
		status, page := b.post("/operations/"+op.GetId()+"/decision", form)
		require.Equal(t, http.StatusConflict, status)
		require.Contains(t, page, "Another decision was taken first")
		require.Contains(t, page, "APPROVAL_CONFLICT")
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_REJECTED)
	})
	t.Run("a cross-site form post is refused", func(t *testing.T) {
		op := w.prepare(t, "INV-csrf", 100)
		b := w.browser(t)
		b.signIn(w.approver)
		form := b.decisionForm(op.GetId())
		form.Set("decision", "approve")
		req, _ := http.NewRequest(http.MethodPost, w.url+"/operations/"+op.GetId()+"/decision", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		status, page := b.do(req)
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, page, "sent from another site")
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	})
	t.Run("another tenant's operation does not exist", func(t *testing.T) {
		op := w.prepare(t, "INV-mine", 100)
		b := w.browser(t)
		b.signIn(w.env.Key("globex", "approver", "operator"))
		status, page := b.get("/")
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, page, op.GetId())
		require.Contains(t, page, "Nothing awaits approval.")
		status, _ = b.get("/operations/" + op.GetId())
		require.Equal(t, http.StatusNotFound, status)
		status, _ = b.get("/operations/not-an-id")
		require.Equal(t, http.StatusNotFound, status)
	})
	w.requireLogsClean(t)
}

// TestExpiryShown: an approval that lapsed before anyone executed it is
// listed as awaiting a decision again, and may be approved again.
func TestExpiryShown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_quick", ApprovalTTL: 2 * time.Second})})
	op := w.prepareAs(t, w.agent, "pay_quick", "INV-quick", 700)
	b := w.browser(t)
	b.signIn(w.approver)
	form := b.decisionForm(op.GetId())
	form.Set("decision", "approve")
	status, page := b.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Approved.")

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, page = b.get("/")
		if strings.Contains(page, "approval expired") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the list never showed the approval as expired:\n%s", page)
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, page, "decide again")
	status, page = b.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `class="decision"`)
	form = url.Values{"csrf": {field(t, page, "csrf")}, "fingerprint": {field(t, page, "fingerprint")}, "decision": {"approve"}}
	status, page = b.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Approved.")
	require.Contains(t, page, "approved again after the approval expired")
}

// TestOperatorResolvesUnknown: an operator sees an operation whose outcome
// is unknown and records what the downstream says, with a note.
func TestOperatorResolvesUnknown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_direct", MaxAttempts: 1, DedupesKeys: true})})
	op := w.prepareAs(t, w.agent, "pay_direct", "INV-lost", 4900)
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}})
	res, err := w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, res.GetOperation().GetState())
	charge := w.env.Fakepay.Charges()[0]

	approver := w.browser(t)
	_, page := approver.signIn(w.approver)
	require.NotContains(t, page, "Outcome unknown")
	form := approver.decisionFormless(op.GetId())
	status, _ := approver.post("/operations/"+op.GetId()+"/resolution", url.Values{"csrf": {form}, "outcome": {"succeeded"}, "note": {"x"}})
	require.Equal(t, http.StatusForbidden, status)

	b := w.browser(t)
	_, page = b.signIn(w.operator)
	require.Contains(t, page, "Outcome unknown")
	require.Contains(t, page, op.GetId())
	require.NotContains(t, page, "Awaiting approval", "an operator key without the approver role decides nothing")
	status, page = b.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `class="resolution"`)
	require.Contains(t, page, op.GetDownstreamKey())
	csrf, fence := field(t, page, "csrf"), field(t, page, "fence")
	require.Equal(t, "1", fence, "the attempt the page shows")

	status, page = b.post("/operations/"+op.GetId()+"/resolution", url.Values{"csrf": {csrf}, "fence": {fence}, "outcome": {"succeeded"}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "write a note")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_OUTCOME_UNKNOWN)

	status, page = b.post("/operations/"+op.GetId()+"/resolution", url.Values{"csrf": {csrf}, "outcome": {"succeeded"},
		"external_ref": {charge.ID}, "note": {"found in the processor's dashboard"}})
	require.Equal(t, http.StatusBadRequest, status, "a form that does not say which attempt it is about")
	require.Contains(t, page, "which attempt")
	status, page = b.post("/operations/"+op.GetId()+"/resolution", url.Values{"csrf": {csrf}, "fence": {fence}, "outcome": {"succeeded"},
		"external_ref": {charge.ID}, "note": {"found in the processor's dashboard"}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Resolved.")
	got := w.get(t, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Equal(t, charge.ID, got.GetExternalRef())
	events, err := w.srv.Client.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId(), IncludeEvents: true})
	require.NoError(t, err)
	last := events.GetEvents()[len(events.GetEvents())-1]
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_RESOLVED_MANUALLY, last.GetType())
	require.Contains(t, last.GetDetail(), "found in the processor's dashboard")
	require.Equal(t, 1, w.charges("INV-lost"))

	// Resolving it again is not applicable, and says so.
	status, page = b.post("/operations/"+op.GetId()+"/resolution", url.Values{"csrf": {csrf}, "fence": {fence}, "outcome": {"failed"}, "note": {"again"}})
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, page, "RESOLUTION_NOT_APPLICABLE")
	w.requireLogsClean(t)
}

// decisionFormless returns the CSRF token of the operation page (which has
// no decision form).
func (b *browser) decisionFormless(id string) string {
	b.t.Helper()
	status, page := b.get("/operations/" + id)
	require.Equal(b.t, http.StatusOK, status)
	return field(b.t, page, "csrf")
}

// TestRevocationEndsSessions: revoking the principal ends its console
// sessions at once (no cache in between), and its pending form is refused.
func TestRevocationEndsSessions(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	op := w.prepare(t, "INV-revoke", 100)
	key, p, err := ledger.CreatePrincipal(context.Background(), w.env.Store, "demo", "bob", []string{ledger.RoleApprover})
	require.NoError(t, err)
	b := w.browser(t)
	status, _ := b.signIn(key)
	require.Equal(t, http.StatusOK, status)
	form := b.decisionForm(op.GetId())

	_, _, err = ledger.RevokePrincipal(context.Background(), w.env.Store, "demo", store.PrincipalRef{ID: p.ID})
	require.NoError(t, err)
	form.Set("decision", "approve")
	status, page := b.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, page, "Your session ended")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	_, _ = b.get("/")
	require.Equal(t, "/login", b.last.Request.URL.Path)
}

// TestNamesShownVisibly: a principal's name stored before names were
// checked (keys create now refuses control and format characters) may hold
// a right-to-left override, which would reorder what an approver reads
// after it. Every place the console shows a name shows such a character as
// its escape instead.
func TestNamesShownVisibly(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	for _, name := range []string{"invoice-agent", "alice"} {
		out, err := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", w.env.DBURL, "-c",
			"UPDATE principal SET name = name || E'\\u202Eredivorp-tset' WHERE name = '"+name+"'").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	op := w.prepare(t, "INV-bidi", 100)
	b := w.browser(t)
	_, page := b.signIn(w.approver)
	for _, p := range []string{"/", "/operations/" + op.GetId()} {
		_, page = b.get(p)
		require.NotContains(t, page, "\u202E", p)
		require.Contains(t, page, `alice\u202Eredivorp-tset`, p)
	}
	require.Contains(t, page, `invoice-agent\u202Eredivorp-tset`)
}

// TestApprovedListOutlastsOtherReadyOperations: operations of tools that need
// no approval, prepared and never executed, stay READY (open operations are
// never pruned). However many there are, the approver's list still shows
// the approval waiting to be executed (it used to read the newest 200 READY
// operations of every tool and keep the approved ones among them), and it
// pages.
func TestApprovedListOutlastsOtherReadyOperations(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	approved := w.prepare(t, "INV-approved-early", 1200)
	_, err := w.srv.Client.Approve(harness.Ctx(w.approver, ""), &opledgerv1.ApproveRequest{OperationId: approved.GetId(),
		Fingerprint: approved.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
	require.NoError(t, err)
	for i := range ledger.MaxPageSize + 1 {
		args, err := structpb.NewStruct(map[string]any{"to": "a@example.com", "subject": "s", "body": strconv.Itoa(i)})
		require.NoError(t, err)
		_, err = w.srv.Client.Prepare(harness.Ctx(w.agent, "mail-"+strconv.Itoa(i)), &opledgerv1.PrepareRequest{Tool: "send_email", Args: args})
		require.NoError(t, err)
	}
	b := w.browser(t)
	b.signIn(w.approver)
	status, page := b.get("/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, approved.GetId(), "the approval waiting to be executed is listed")

	// More approvals than a page: the list links to the next one.
	ids := map[string]bool{approved.GetId(): true}
	for i := range 50 {
		op := w.prepare(t, "INV-approved-"+strconv.Itoa(i), 1300+i)
		_, err := w.srv.Client.Approve(harness.Ctx(w.approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
			Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
		require.NoError(t, err)
		ids[op.GetId()] = true
	}
	seen := map[string]bool{}
	path := "/"
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 5)
		status, page = b.get(path)
		require.Equal(t, http.StatusOK, status)
		for id := range ids {
			if strings.Contains(page, id) {
				seen[id] = true
			}
		}
		path = ""
		if m := regexp.MustCompile(`href="(/\?ready=[^"]+)"`).FindStringSubmatch(page); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	require.Len(t, seen, len(ids), "every approval waiting to be executed is on some page")
}

// TestResolutionIsBoundToTheAttemptShown: an operator's verdict is about
// the attempt the page showed. Here operator A looks at attempt 1 (a 500
// before the processor charged: nothing there), another operator makes it
// READY meanwhile, attempt 2 charges and its answer is lost; A's form must
// not record FAILED over attempt 2's charge (the agent would then retry
// under a new key: a second charge).
func TestResolutionIsBoundToTheAttemptShown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_direct", MaxAttempts: 1, DedupesKeys: true})})
	op := w.prepareAs(t, w.agent, "pay_direct", "INV-stale", 4900)
	execute := func() {
		t.Helper()
		res, err := w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, res.GetOperation().GetState())
	}
	w.env.Fakepay.SetFaults(fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 1}})
	execute() // attempt 1: nothing charged
	a := w.browser(t)
	a.signIn(w.operator)
	status, page := a.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	form := url.Values{"csrf": {field(t, page, "csrf")}, "fence": {field(t, page, "fence")}, "outcome": {"failed"}, "note": {"no charge at the processor"}}

	b := w.browser(t)
	b.signIn(w.operator)
	_, page = b.get("/operations/" + op.GetId())
	status, _ = b.post("/operations/"+op.GetId()+"/resolution", url.Values{"csrf": {field(t, page, "csrf")}, "fence": {field(t, page, "fence")},
		"outcome": {"ready"}, "note": {"never arrived"}})
	require.Equal(t, http.StatusOK, status)
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}})
	execute() // attempt 2: charged, answer lost
	require.Equal(t, 1, w.charges("INV-stale"))

	status, page = a.post("/operations/"+op.GetId()+"/resolution", form)
	require.Equal(t, http.StatusConflict, status, page)
	require.Contains(t, page, "changed since")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_OUTCOME_UNKNOWN)
}

// TestFlashOnlyForWhatHappened: the banner after a decision is shown only
// when the operation's last event is that decision, by the reader: a link
// with ?done=denied to an operation nobody decided says nothing.
func TestFlashOnlyForWhatHappened(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	op := w.prepare(t, "INV-flash", 1000)
	b := w.browser(t)
	b.signIn(w.approver)
	status, page := b.get("/operations/" + op.GetId() + "?done=denied")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, page, "Denied.")
	require.NotContains(t, page, `class="flash"`)

	form := b.decisionForm(op.GetId())
	form.Set("decision", "approve")
	status, page = b.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Approved.")
	_, page = b.get("/operations/" + op.GetId() + "?done=denied")
	require.NotContains(t, page, "Denied.")

	// The agent executes between the decision's redirect and the page's
	// load: the banner still says what the reader did.
	other := w.prepare(t, "INV-flash-2", 1000)
	form = b.decisionForm(other.GetId())
	form.Set("decision", "approve")
	b.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	status, _ = b.post("/operations/"+other.GetId()+"/decision", form)
	b.c.CheckRedirect = nil
	require.Equal(t, http.StatusSeeOther, status)
	loc := b.last.Header.Get("Location")
	_, err := w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: other.GetId()})
	require.NoError(t, err)
	_, page = b.get(loc)
	require.Contains(t, page, "Approved.")
}

// TestSelfReloadDoesNotKeepTheSessionAlive: the list reloads itself every
// minute (to ?auto=1); that is nobody's use, so an unattended page still
// signs out after the idle time, while a person's requests keep it alive.
func TestSelfReloadDoesNotKeepTheSessionAlive(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, harness.Options{}, console.Options{Session: ledger.SessionLifetime{Idle: 2 * time.Second, Max: time.Hour}})
	person, unattended := w.browser(t), w.browser(t)
	person.signIn(w.approver)
	unattended.signIn(w.approver)
	_, page := unattended.get("/")
	require.Contains(t, page, `url=/?auto=1`, "the page reloads itself marked as automatic")
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, _ := person.get("/")
		require.Equal(t, http.StatusOK, status, "a person's requests keep the session alive")
		status, page = unattended.get("/?auto=1")
		require.Equal(t, http.StatusOK, status)
		if strings.Contains(page, `name="key"`) { // the sign-in form: signed out
			break
		}
		require.True(t, time.Now().Before(deadline), "the self-reloading page never signed out")
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFormLimitsAreInCharacters: the reason box allows 1000 characters and
// the refusal speaks of characters, but the form counted bytes, so a
// 600-character reason in French (1200 bytes) was refused, and the
// decision with it; so were a resolution's note and external reference.
func TestFormLimitsAreInCharacters(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	op := w.prepare(t, "INV-reason", 100)
	b := w.browser(t)
	b.signIn(w.approver)
	form := b.decisionForm(op.GetId())
	form.Set("decision", "approve")
	form.Set("reason", strings.Repeat("\u00e9", 600))
	status, page := b.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "Approved.")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_READY)
	form.Set("reason", strings.Repeat("\u00e9", 1001))
	status, _ = b.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusBadRequest, status, "1001 characters are too many")
}

// TestDecidedByIsNamed: "Decided by" names the principal that decided, as
// "Prepared by" does (the decision event's actor), with the principal id
// beside it; it used to show the id alone.
func TestDecidedByIsNamed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	op := w.prepare(t, "INV-named", 100)
	bob := namedKey(t, w.env, "bob", ledger.RoleApprover)
	_, err := w.srv.Client.Approve(harness.Ctx(bob, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
		Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "ok"})
	require.NoError(t, err)
	decidedBy := w.get(t, op.GetId()).GetApproval().GetDecidedBy()
	require.NotEmpty(t, decidedBy)
	b := w.browser(t)
	b.signIn(w.approver)
	status, page := b.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	require.Regexp(t, `<dt>Decided by</dt><dd>bob <code class="muted">`+regexp.QuoteMeta(decidedBy)+`</code> at `, page)
	require.Regexp(t, `<dt>Prepared by</dt><dd>invoice-agent <code class="muted">`, page)
}
