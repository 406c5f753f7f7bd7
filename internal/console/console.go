// Package console is opledger's approval console: a small server-rendered
// web application where an approver signs in with an approver key, sees
// the tenant's operations awaiting approval with their arguments and
// fingerprints, and approves or denies exactly what the page showed; an
// operator sees operations whose outcome is unknown and resolves them.
//
// It calls the same ledger functions as the gRPC service, so the same rules
// hold (the fingerprint binds the decision, no self-approval, expiry,
// conflicts). It needs no JavaScript: plain HTML forms, one embedded style
// sheet, and a Content-Security-Policy that allows nothing else.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configures the console.
type Options struct {
	// Logger receives one line per request: method, route, status,
	// principal. Never form values, keys or cookies.
	Logger *slog.Logger
	// Secure says the browser reaches the console over HTTPS (served with
	// TLS, or behind a TLS-terminating proxy): cookies are then marked
	// Secure and named with the __Host- prefix, and HSTS is sent.
	Secure bool
	// Session bounds sessions (default: 30 minutes idle, 8 hours in all).
	Session ledger.SessionLifetime
}

// Console serves the approval console.
type Console struct {
	l      *ledger.Ledger
	opts   Options
	pages  map[string]*template.Template
	mux    *http.ServeMux
	cookie string
	// crossOrigin refuses cross-site form posts by their Sec-Fetch-Site
	// and Origin headers.
	crossOrigin *http.CrossOriginProtection
}

const (
	// csrfField is the hidden form field carrying the session's CSRF token.
	csrfField = "csrf"
	// loginCookie carries the sign-in form's CSRF token (double submit).
	loginCookie = "opledger_login"
	pageSize    = 50
)

// ContentSecurityPolicy is sent with every response: nothing but this
// origin's style sheet, no scripts at all, forms only to this origin, and
// no framing.
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// New returns the console over l.
func New(l *ledger.Ledger, opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Session.Idle == 0 {
		opts.Session.Idle = 30 * time.Minute
	}
	if opts.Session.Max == 0 {
		opts.Session.Max = 8 * time.Hour
	}
	c := &Console{l: l, opts: opts, pages: map[string]*template.Template{}, mux: http.NewServeMux(), cookie: "opledger_session",
		crossOrigin: http.NewCrossOriginProtection()}
	if opts.Secure {
		c.cookie = "__Host-opledger_session"
	}
	funcs := template.FuncMap{
		"stamp": stamp,
		"state": func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", " ") },
		"join":  func(s []string) string { return strings.Join(s, ", ") },
		"vis":   func(s string) string { v, _ := visible(s); return v },
	}
	for _, name := range []string{"login", "list", "operation", "message"} {
		c.pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /login", c.loginForm)
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.withSession(c.logout))
	c.mux.HandleFunc("GET /{$}", c.withSession(c.list))
	c.mux.HandleFunc("GET /operations/{id}", c.withSession(c.operation))
	c.mux.HandleFunc("POST /operations/{id}/decision", c.withSession(c.decide))
	c.mux.HandleFunc("POST /operations/{id}/edit", c.withSession(c.edit))
	c.mux.HandleFunc("POST /operations/{id}/resolution", c.withSession(c.resolve))
	c.mux.HandleFunc("POST /operations/{id}/reconcile", c.withSession(c.reconcile))
	return c
}

// ServeHTTP adds the security headers, refuses cross-origin form posts,
// and logs the request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if c.opts.Secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	ctx := context.WithValue(r.Context(), reqInfoKey{}, &reqInfo{})
	r = r.WithContext(ctx)
	if err := c.crossOrigin.Check(r); err != nil {
		c.message(rec, r, http.StatusForbidden, "Request refused", "This form was sent from another site. Nothing changed.")
	} else {
		c.mux.ServeHTTP(rec, r)
	}
	info := ctx.Value(reqInfoKey{}).(*reqInfo)
	attrs := []any{"method", r.Method, "route", r.Pattern, "status", rec.status, "ms", time.Since(start).Milliseconds()}
	if info.actor.ID != "" {
		attrs = append(attrs, "tenant", info.actor.Tenant, "principal", info.actor.Name)
	}
	if info.outcome != "" {
		attrs = append(attrs, "outcome", info.outcome)
	}
	lvl := slog.LevelInfo
	if rec.status >= 500 {
		lvl = slog.LevelError
	}
	c.opts.Logger.Log(r.Context(), lvl, "console request", attrs...)
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

type reqInfoKey struct{}

// reqInfo is what handlers learn for the request's log line.
type reqInfo struct {
	actor   ledger.Actor
	outcome string
}

func infoOf(r *http.Request) *reqInfo {
	if i, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

// session is a signed-in request's principal and CSRF token.
type session struct {
	actor ledger.Actor
	csrf  string
}

func (s session) approver() bool { return s.actor.Has(ledger.RoleApprover) }
func (s session) operator() bool { return s.actor.Has(ledger.RoleOperator) }

// withSession runs h for a signed-in request. Pages without a session go
// to the sign-in form; a form post must carry the session's CSRF token.
func (c *Console) withSession(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(c.cookie)
		var s session
		if err == nil {
			// The list reloading itself (?auto=1) is nobody's use: it
			// reads the session without keeping it alive.
			auto := r.Method == http.MethodGet && r.URL.Query().Get("auto") == "1"
			s.actor, s.csrf, _, err = c.l.Session(r.Context(), ck.Value, c.opts.Session, !auto)
		}
		if err != nil {
			if !errors.Is(err, ledger.ErrNoSession) && !errors.Is(err, http.ErrNoCookie) {
				c.failed(w, r, err)
				return
			}
			if r.Method == http.MethodGet {
				// A link to an operation (an approval notification's) is
				// opened once the visitor signed in.
				to := "/login"
				if next := returnTo(r.URL.Path); next != "" {
					to += "?next=" + url.QueryEscape(next)
				}
				http.Redirect(w, r, to, http.StatusSeeOther)
				return
			}
			c.message(w, r, http.StatusUnauthorized, "Signed out", "Your session ended. Sign in again; nothing changed.")
			return
		}
		infoOf(r).actor = s.actor
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if err := r.ParseForm(); err != nil {
				c.message(w, r, http.StatusBadRequest, "Bad request", "The form could not be read. Nothing changed.")
				return
			}
			if got := r.PostForm.Get(csrfField); got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
				infoOf(r).outcome = "csrf_refused"
				c.message(w, r, http.StatusForbidden, "Request refused",
					"The form's security token is missing or stale, so it was not accepted. Nothing changed. Reload the page and try again.")
				return
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		h(w, r, s)
	}
}

// page data common to every template.
type page struct {
	Title    string
	Actor    ledger.Actor
	CSRF     string
	SignedIn bool
	Flash    string
	Problem  *problem
	Data     any
	// Refresh is where the page reloads itself to, marked as automatic.
	Refresh string
	// AsOf is the database's clock the list's times were measured against.
	AsOf string
}

type problem struct {
	Title, Detail, Reason string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	if err := c.pages[name].Execute(&b, p); err != nil {
		c.opts.Logger.Error("console: template failed", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

func (c *Console) message(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	c.render(w, r, status, "message", page{Title: title, Problem: &problem{Title: title, Detail: detail}})
}

// failed answers a ledger error: the reason decides the status and what the
// person reads.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, err error) {
	status, p := explain(err)
	infoOf(r).outcome = strings.ToLower(p.Reason)
	if status >= 500 {
		c.opts.Logger.Error("console: ledger call failed", "error", err)
	}
	c.render(w, r, status, "message", page{Title: p.Title, Problem: &p})
}

// explain maps a ledger error to an HTTP status and words for a person.
func explain(err error) (int, problem) {
	var le *ledger.Error
	if !errors.As(err, &le) {
		return http.StatusInternalServerError, problem{Title: "Something went wrong", Detail: "Internal error; nothing may have changed. Reload the page to see the operation as it is.", Reason: "INTERNAL"}
	}
	reason := strings.TrimPrefix(le.Reason.String(), "ERROR_REASON_")
	p := problem{Reason: reason, Detail: le.Message}
	status := http.StatusConflict
	switch le.Reason {
	case opledgerv1.ErrorReason_ERROR_REASON_SELF_APPROVAL_FORBIDDEN:
		status, p.Title = http.StatusForbidden, "You cannot decide on your own operation"
		p.Detail = "You prepared this operation, so another approver must decide it. Nothing changed."
	case opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH:
		p.Title = "The arguments are not the ones you reviewed"
		p.Detail = "The fingerprint sent with your decision is not this operation's: what you approved is not what would run. Nothing changed. Open the operation again and review what it shows now."
	case opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT:
		p.Title = "Another decision was taken first"
		p.Detail = le.Message + ". Nothing changed."
	case opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED:
		p.Title = "The operation was cancelled"
	case opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_NOT_APPLICABLE, opledgerv1.ErrorReason_ERROR_REASON_RESOLUTION_NOT_APPLICABLE:
		p.Title = "Not possible in the operation's current state"
	case opledgerv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND:
		status, p.Title = http.StatusNotFound, "No such operation"
		p.Detail = "There is no such operation in your tenant."
	case opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, opledgerv1.ErrorReason_ERROR_REASON_OPERATOR_REQUIRED:
		status, p.Title = http.StatusBadRequest, "The form was not accepted"
	case opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID:
		status, p.Title = http.StatusBadRequest, "The edited arguments were not accepted"
		p.Detail = strings.ReplaceAll(p.Detail, "edited_args", "the edited arguments")
		for _, v := range le.Violations {
			p.Detail += "; " + strings.TrimPrefix(v.Field, "edited_args/") + ": " + v.Description
		}
		p.Detail += ". Nothing changed."
	case opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED:
		status, p.Title = http.StatusForbidden, "The tool's policy refuses it"
		p.Detail = le.Message + "."
		if !strings.Contains(le.Message, "REJECTED") {
			p.Detail += " Nothing changed."
		}
	case opledgerv1.ErrorReason_ERROR_REASON_TOOL_VERSION_UNKNOWN:
		p.Title = "The tool version is no longer configured"
		p.Detail = le.Message + ". Nothing changed."
	case opledgerv1.ErrorReason_ERROR_REASON_LEDGER_UNAVAILABLE:
		status, p.Title = http.StatusServiceUnavailable, "The ledger is unavailable"
		p.Detail = "The database could not be reached; try again in a moment."
	case opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS:
		p.Title = "The operation is changing"
		p.Detail = le.Message + ". Nothing changed; reload it and try again in a moment."
	default:
		status, p.Title = http.StatusInternalServerError, "Something went wrong"
	}
	return status, p
}

// loginForm shows the sign-in form with a fresh double-submit CSRF token.
func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.renderLogin(w, r, http.StatusOK, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, problemText string) {
	token := randomToken()
	http.SetCookie(w, &http.Cookie{Name: c.loginCookieName(), Value: token, Path: "/", HttpOnly: true,
		Secure: c.opts.Secure, SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	p := page{Title: "Sign in", CSRF: token, Data: returnTo(r.FormValue("next"))}
	if problemText != "" {
		p.Problem = &problem{Title: "Not signed in", Detail: problemText}
	}
	c.render(w, r, status, "login", p)
}

func (c *Console) loginCookieName() string {
	if c.opts.Secure {
		return "__Host-" + loginCookie
	}
	return loginCookie
}

// login exchanges an approver's or operator's API key, posted in the form
// body, for a server-side session. The key goes no further than
// Authenticate: it is not stored, logged or echoed.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		c.renderLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	ck, err := r.Cookie(c.loginCookieName())
	if got := r.PostForm.Get(csrfField); err != nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(ck.Value)) != 1 {
		infoOf(r).outcome = "csrf_refused"
		c.renderLogin(w, r, http.StatusForbidden, "The sign-in form expired. Enter your key again.")
		return
	}
	key := strings.TrimSpace(r.PostForm.Get("key"))
	a, err := c.l.Authenticate(r.Context(), key)
	switch {
	case errors.Is(err, ledger.ErrBadKey), err == nil && key == "":
		infoOf(r).outcome = "bad_key"
		c.renderLogin(w, r, http.StatusUnauthorized, "That key was not accepted.")
		return
	case err != nil:
		c.failed(w, r, err)
		return
	}
	if !a.Has(ledger.RoleApprover) && !a.Has(ledger.RoleOperator) {
		infoOf(r).outcome = "role_refused"
		c.renderLogin(w, r, http.StatusForbidden, "That key can neither approve nor resolve operations: sign in with an approver or operator key.")
		return
	}
	token, _, err := c.l.OpenSession(r.Context(), a, c.opts.Session)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	infoOf(r).actor = a
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: token, Path: "/", HttpOnly: true, Secure: c.opts.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(c.opts.Session.Max.Seconds())})
	http.SetCookie(w, &http.Cookie{Name: c.loginCookieName(), Value: "", Path: "/", HttpOnly: true, Secure: c.opts.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	to := "/"
	if next := returnTo(r.PostForm.Get("next")); next != "" {
		to = next
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// returnTo is path if it is an operation's page (where a notification
// links), which signing in returns to; "" for anything else, so that the
// sign-in form never redirects elsewhere.
func returnTo(path string) string {
	id, ok := strings.CutPrefix(path, "/operations/")
	if !ok || !ledger.ValidOperationID(id) {
		return ""
	}
	return "/operations/" + id
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s session) {
	if ck, err := r.Cookie(c.cookie); err == nil {
		if err := c.l.CloseSession(r.Context(), ck.Value); err != nil {
			c.failed(w, r, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: "", Path: "/", HttpOnly: true, Secure: c.opts.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// section is one list on the front page.
type section struct {
	Title, Empty string
	Ops          []opView
	Next         string
}

// list shows what the principal can act on: operations awaiting approval
// and approvals not yet executed (approvers), and operations whose outcome
// is unknown (operators).
func (c *Console) list(w http.ResponseWriter, r *http.Request, s session) {
	// An approval's end and a lease's are the database's: so is the clock
	// they are shown against (a replica's own clock may be off).
	now, err := c.l.DatabaseNow(r.Context())
	if err != nil {
		c.failed(w, r, err)
		return
	}
	var sections []section
	q := r.URL.Query()
	view := func(op ledger.Operation) opView {
		v := viewOf(op, now)
		v.Quorum = quorumOf(op, s.actor.ID)
		return v
	}
	if s.approver() {
		pending, next, err := c.l.ListOperations(r.Context(), s.actor, ledger.ListInput{
			States: []ledger.State{ledger.StateAwaitingApproval}, PageSize: pageSize, PageToken: q.Get("pending")})
		if err != nil {
			c.failed(w, r, err)
			return
		}
		sec := section{Title: "Awaiting approval", Empty: "Nothing awaits approval."}
		for _, op := range pending {
			sec.Ops = append(sec.Ops, view(op))
		}
		if next != "" {
			sec.Next = "/?pending=" + url.QueryEscape(next)
		}
		ready, nextReady, err := c.l.ListOperations(r.Context(), s.actor, ledger.ListInput{
			States: []ledger.State{ledger.StateReady}, ApprovedUnsent: true, PageSize: pageSize, PageToken: q.Get("ready")})
		if err != nil {
			c.failed(w, r, err)
			return
		}
		approved := section{Title: "Approved, not executed yet", Empty: "No approval is waiting to be executed."}
		if nextReady != "" {
			approved.Next = "/?ready=" + url.QueryEscape(nextReady)
		}
		for _, op := range ready {
			v := view(op)
			if v.Decidable { // the approval lapsed: it needs a decision again
				sec.Ops = append(sec.Ops, v)
			} else {
				approved.Ops = append(approved.Ops, v)
			}
		}
		sections = append(sections, sec, approved)
	}
	if s.operator() {
		unknown, next, err := c.l.ListOperations(r.Context(), s.actor, ledger.ListInput{
			States: []ledger.State{ledger.StateOutcomeUnknown}, PageSize: pageSize, PageToken: q.Get("unknown")})
		if err != nil {
			c.failed(w, r, err)
			return
		}
		sec := section{Title: "Outcome unknown", Empty: "No operation has an unknown outcome."}
		for _, op := range unknown {
			sec.Ops = append(sec.Ops, view(op))
		}
		if next != "" {
			sec.Next = "/?unknown=" + url.QueryEscape(next)
		}
		sections = append(sections, sec)
	}
	auto := url.Values{}
	for k, v := range q {
		auto[k] = v
	}
	auto.Set("auto", "1")
	c.render(w, r, http.StatusOK, "list", page{Title: "Operations", Actor: s.actor, CSRF: s.csrf, SignedIn: true, Data: sections,
		Refresh: "/?" + auto.Encode(), AsOf: stamp(now)})
}

// detail is the operation page's data.
type detail struct {
	Op         opView
	Events     []ledger.OperationEvent
	CanDecide  bool
	SelfMade   bool
	CanResolve bool
	TTL        string
	Expires    string
	// Policy is why it needs approval and the policy it was judged under.
	Policy policyView
	// Links are the supersede links of an approve-with-edit (an edit's
	// PreparedBy is its first original's preparer: its own PREPARED event
	// names its editor).
	Links linksView
	// Edit is the approve-with-edit form, when the reader may use it.
	Edit *editView
	// PreparedBy names the principal that prepared it (the PREPARED
	// event's actor).
	PreparedBy string
	// DecidedBy names the principal of the operation's decision (the
	// last APPROVED or DENIED event's actor): the operation carries only
	// its id, which people do not read.
	DecidedBy string
	// Budgets are the limits it counts against, as used now.
	Budgets []budgetView
}

// budgetView is one budget an operation counts against, for people.
type budgetView struct {
	Name, Scope, Used, Window, Frees, Over string
}

// budgetsOf says how much of each budget is used, in words.
func budgetsOf(states []ledger.BudgetState, now time.Time) []budgetView {
	out := make([]budgetView, len(states))
	for i, s := range states {
		l := s.Limit
		var used []string
		if l.Count > 0 {
			used = append(used, fmt.Sprintf("%d of %d operations", s.Count, l.Count))
		}
		if l.Sum != "" {
			used = append(used, fmt.Sprintf("%s of %s (%s)", strconv.FormatFloat(s.Sum, 'f', -1, 64), strconv.FormatFloat(l.Max, 'f', -1, 64), l.Sum))
		}
		out[i] = budgetView{Name: l.Name, Scope: s.Scope, Used: strings.Join(used, "; "), Window: span(l.Window), Over: string(l.Over)}
		if !s.FreesAt.IsZero() {
			out[i].Frees = "the oldest leaves the window in " + span(s.FreesAt.Sub(now))
		}
	}
	return out
}

// flashes are what the page says after a decision or a resolution, and the
// event that must be the operation's last decision (approval, denial,
// expiry or resolution; an execution may follow it), recorded by the
// reader, for it to be said: the "done" query of the redirect is only a
// hint, and a link with ?done=denied on an operation nobody decided says
// nothing.
var flashes = map[string]struct {
	text  string
	event ledger.EventKind
}{
	"approved": {"Approved. The agent may now execute it, until the approval expires.", ledger.EventApproved},
	// "edited" is said on the new operation, whose PREPARED event names
	// its editor.
	"edited":   {"Approved with your edits: this is the new operation, with the arguments you entered. The original was superseded: it is rejected and will never run.", ledger.EventPrepared},
	"denied":   {"Denied. The operation is rejected and will never run.", ledger.EventDenied},
	"resolved": {"Resolved. The outcome is recorded in the event log.", ledger.EventResolved},
}

func (c *Console) operation(w http.ResponseWriter, r *http.Request, s session) {
	c.showOperation(w, r, s, http.StatusOK, "", nil)
}

// showOperation renders the operation page, with a problem from a refused
// form post when there is one.
func (c *Console) showOperation(w http.ResponseWriter, r *http.Request, s session, status int, flash string, p *problem) {
	id := r.PathValue("id")
	if !ledger.ValidOperationID(id) {
		c.message(w, r, http.StatusNotFound, "No such operation", "There is no such operation in your tenant.")
		return
	}
	op, evs, err := c.l.Get(r.Context(), s.actor, id, true)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	v := viewOf(op, op.DBNow) // the database's clock when it was read, as its times are
	v.Quorum = quorumOf(op, s.actor.ID)
	d := detail{Op: v, Events: evs, SelfMade: op.PreparedBy == s.actor.ID}
	for _, e := range evs {
		switch ledger.EventKind(e.Type) {
		case ledger.EventPrepared:
			d.PreparedBy = e.Actor
		case ledger.EventApproved, ledger.EventDenied:
			d.DecidedBy = e.Actor
		}
	}
	var preparedBy string
	d.Links, preparedBy, err = c.links(r, s, op, evs, v.Fields)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if op.Supersedes != "" {
		d.PreparedBy = preparedBy
	}
	t, _ := c.l.ResolveTool(op.Tool, op.ToolVersion) // nil: no longer configured here
	d.Policy = policyOf(op, t)
	if len(op.BudgetNames) > 0 {
		states, err := c.l.Budgets(r.Context(), op)
		if err != nil {
			c.failed(w, r, err)
			return
		}
		d.Budgets = budgetsOf(states, op.DBNow)
	}
	if flash == "" && p == nil {
		flash = doneFlash(r.URL.Query().Get("done"), op, evs, s.actor, d.Links, v.Quorum)
	}
	d.CanDecide = v.Decidable && s.approver() && !d.SelfMade && !v.Quorum.Mine
	if d.CanDecide && ledger.State(op.State) == ledger.StateAwaitingApproval {
		d.Edit = editFormOf(op, t, v.Fields)
	}
	d.CanResolve = v.Resolvable && s.operator()
	if op.ApprovalRequired {
		d.TTL = span(op.ApprovalTTL)
	}
	if !op.ApprovalExpiresAt.IsZero() {
		d.Expires = stamp(op.ApprovalExpiresAt)
	}
	c.render(w, r, status, "operation", page{Title: op.Tool + " " + op.ID, Actor: s.actor, CSRF: s.csrf, SignedIn: true,
		Flash: flash, Problem: p, Data: d})
}

// doneFlash is what the page says after the reader's decision (the
// redirect's done), if the operation shows that the reader took it: the
// last decision event for a decision or a resolution, the edit's own
// PREPARED event for an approve-with-edit. With a quorum, an approval may
// leave the operation awaiting others, and the flash says so.
func doneFlash(done string, op ledger.Operation, evs []ledger.OperationEvent, a ledger.Actor, l linksView, q quorumView) string {
	f, ok := flashes[done]
	if !ok {
		return ""
	}
	flash := ""
	if done == "edited" {
		if op.Supersedes != "" && l.EditedBy == a.Name {
			flash = f.text
		}
	} else {
		for i := len(evs) - 1; i >= 0; i-- {
			e := evs[i]
			switch ledger.EventKind(e.Type) {
			case ledger.EventApproved, ledger.EventDenied, ledger.EventApprovalExpired, ledger.EventResolved:
				if e.Type == string(f.event) && e.Actor == a.Name {
					flash = f.text
				}
			default:
				continue
			}
			break
		}
	}
	switch awaiting := ledger.State(op.State) == ledger.StateAwaitingApproval; {
	case flash == "" || done != "approved" && done != "edited":
	case awaiting && done == "approved":
		flash = "Approved: your approval is recorded. " + q.Remaining()
	case awaiting:
		flash += " " + q.Remaining()
	case done == "edited":
		flash += " The agent may now execute it, until the approval expires."
	}
	return flash
}

// decide applies an approver's decision, bound to the fingerprint the page
// displayed (the form's hidden field), through ledger.Approve.
func (c *Console) decide(w http.ResponseWriter, r *http.Request, s session) {
	if !s.approver() {
		c.message(w, r, http.StatusForbidden, "Approvers only", "Your key does not hold the approver role. Nothing changed.")
		return
	}
	f := r.PostForm
	decision := map[string]string{"approve": ledger.DecisionApprove, "deny": ledger.DecisionDeny}[f.Get("decision")]
	if decision == "" || utf8.RuneCountInString(f.Get("reason")) > 1000 {
		c.showOperation(w, r, s, http.StatusBadRequest, "", &problem{Title: "The form was not accepted",
			Detail: "Choose Approve or Deny, with a reason of at most 1000 characters."})
		return
	}
	_, _, err := c.l.Approve(r.Context(), s.actor, ledger.ApproveInput{OperationID: r.PathValue("id"),
		Fingerprint: f.Get("fingerprint"), Decision: decision, Reason: f.Get("reason")})
	if err != nil {
		c.refused(w, r, s, err)
		return
	}
	done := map[string]string{ledger.DecisionApprove: "approved", ledger.DecisionDeny: "denied"}[decision]
	infoOf(r).outcome = done
	http.Redirect(w, r, "/operations/"+r.PathValue("id")+"?done="+done, http.StatusSeeOther)
}

// refused shows the operation again, as it is now, with why the form was
// refused.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, s session, err error) {
	status, p := explain(err)
	infoOf(r).outcome = strings.ToLower(p.Reason)
	if status == http.StatusNotFound || status >= 500 {
		c.failed(w, r, err)
		return
	}
	c.showOperation(w, r, s, status, "", &p)
}

// resolve records an operator's verdict on an operation whose outcome is
// unknown, through ledger.Reconcile with a resolution.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request, s session) {
	if !s.operator() {
		c.message(w, r, http.StatusForbidden, "Operators only", "Your key does not hold the operator role. Nothing changed.")
		return
	}
	f := r.PostForm
	outcome := map[string]ledger.State{"succeeded": ledger.StateSucceeded, "failed": ledger.StateFailed, "ready": ledger.StateReady}[f.Get("outcome")]
	note := strings.TrimSpace(f.Get("note"))
	if outcome == "" || note == "" || utf8.RuneCountInString(note) > 1000 || utf8.RuneCountInString(f.Get("external_ref")) > 255 {
		c.showOperation(w, r, s, http.StatusBadRequest, "", &problem{Title: "The form was not accepted",
			Detail: "Choose an outcome and write a note (at most 1000 characters) saying how you established it."})
		return
	}
	// The verdict is about the attempt the page showed.
	fence, ferr := strconv.ParseInt(f.Get("fence"), 10, 64)
	if ferr != nil || fence <= 0 {
		c.showOperation(w, r, s, http.StatusBadRequest, "", &problem{Title: "The form was not accepted",
			Detail: "The form does not say which attempt it is about. Reload the page and record the outcome again."})
		return
	}
	_, _, err := c.l.Reconcile(r.Context(), s.actor, r.PathValue("id"), &ledger.Resolution{Outcome: outcome,
		ExternalRef: strings.TrimSpace(f.Get("external_ref")), Note: note, Fence: fence})
	if err != nil {
		c.refused(w, r, s, err)
		return
	}
	infoOf(r).outcome = "resolved"
	http.Redirect(w, r, "/operations/"+r.PathValue("id")+"?done=resolved", http.StatusSeeOther)
}

// reconcile asks the downstream about an operation whose outcome is
// unknown (a lookup by its downstream key), as Reconcile without a
// resolution does.
func (c *Console) reconcile(w http.ResponseWriter, r *http.Request, s session) {
	if !s.operator() {
		c.message(w, r, http.StatusForbidden, "Operators only", "Your key does not hold the operator role. Nothing changed.")
		return
	}
	_, found, err := c.l.Reconcile(r.Context(), s.actor, r.PathValue("id"), nil)
	if err != nil {
		c.refused(w, r, s, err)
		return
	}
	infoOf(r).outcome = "reconciled"
	c.showOperation(w, r, s, http.StatusOK, "Checked with the downstream: "+found, nil)
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
