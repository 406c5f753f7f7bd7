// Package probe checks what a tools file declares about a downstream (dedupes_keys, lookup_url,
// lookup_consistent, the lookup status values, definitive_statuses, key_retention) against the
// downstream itself, because every guarantee the ledger gives rests on those lines and nothing
// else verifies them: a downstream that checks keys with a read-then-insert race, or answers a
// lookup from a replica a second behind, makes the ledger send twice with every test green.
//
// It backs `opledger probe` (docs/tools.md, "Probing a downstream"). It sends real requests,
// through the product's own HTTP executor (the same request, the same classification, the same
// lookup), under fresh keys of its own ("probe-" and a random run id: never a key the ledger
// derives, which all start "opk_"), and reports one Check per declaration and case.
package probe

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/tool"
)

// Verdict is what a check found.
type Verdict string

// The verdicts.
const (
	// OK: the downstream behaved as declared.
	OK Verdict = "ok"
	// Contradicted: an answer proves the declaration false; the check's detail and evidence say
	// which (keys, statuses, references).
	Contradicted Verdict = "CONTRADICTED"
	// NotVerifiable: the probe cannot settle it here (a 24 h retention, a timeout, a refusal it was
	// given nothing to provoke); the detail says what was seen.
	NotVerifiable Verdict = "not verifiable here"
	// NotDeclared: the tool does not declare it, so the ledger does not rely on it.
	NotDeclared Verdict = "not declared"
)

// Defaults of Options.
const (
	DefaultLookups       = 20
	DefaultTwins         = 5
	DefaultLookupWait    = 5 * time.Second
	DefaultRetentionWait = time.Minute
)

// KeyPrefix starts every key the probe sends; the ledger's keys start "opk_".
const KeyPrefix = "probe-"

// Options say what to probe.
type Options struct {
	// Tool is the tool version to probe; its executor must be "http".
	Tool *tool.Tool
	// Args is a JSON object the downstream accepts (and the tool's schema too); every effect the
	// probe makes is made with it.
	Args json.RawMessage
	// InvalidArgs, optional, is a JSON object the downstream must refuse; without it the
	// definitive_statuses refusal check is not verifiable.
	InvalidArgs json.RawMessage
	// Lookups is how many lookups are sent back to back right after an effect (DefaultLookups
	// when 0): one lagging replica among several is caught by repetition, not by one lookup.
	Lookups int
	// Twins is how many requests with one key are started together (DefaultTwins when 0).
	Twins int
	// LookupWait is how long a lookup that has not found an effect yet is retried before the
	// probe calls it missing (DefaultLookupWait when 0).
	LookupWait time.Duration
	// RetentionWait is the longest the probe waits to check a declared key_retention: a
	// retention no longer than it is checked at 90% of its length (DefaultRetentionWait when 0;
	// negative: never).
	RetentionWait time.Duration
	// Client is the HTTP client; nil is the executor's own (executor.NewHTTP).
	Client *http.Client
}

// Exchange is one request the probe sent and what came back.
type Exchange struct {
	// Method is POST (a send) or GET (a lookup).
	Method string `json:"method"`
	Key    string `json:"key"`
	// Status is the HTTP status answered; 0 when no answer came.
	Status int `json:"status"`
	// Outcome is the executor's reading of it: succeeded, failed, unknown or not_submitted for a
	// send; found, not_found or inconclusive for a lookup.
	Outcome string `json:"outcome"`
	// Ref is the reference the answer names (external_ref_field), if any.
	Ref    string `json:"ref,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Millis is how long the exchange took.
	Millis int64 `json:"millis"`
}

func (x Exchange) String() string {
	s := fmt.Sprintf("%s %s → ", x.Method, x.Key)
	if x.Status == 0 {
		s += "no answer"
	} else {
		s += strconv.Itoa(x.Status)
	}
	if x.Ref != "" {
		s += " " + x.Ref
	}
	return s
}

// Check is one line of the report: what a declaration claims in one case, and what was seen.
type Check struct {
	// Declaration is the tools file's field ("dedupes_keys"), or what is checked where no field
	// declares it ("rate_limits").
	Declaration string `json:"declaration"`
	// Declared is its value as the probe read it, defaults applied ("true", "24h", "[400 402]").
	Declared string  `json:"declared"`
	Case     string  `json:"case"`
	Verdict  Verdict `json:"verdict"`
	Detail   string  `json:"detail"`
	// Evidence is the exchanges the verdict rests on.
	Evidence []Exchange `json:"evidence,omitempty"`
}

// Effect is one effect the probe made at the downstream.
type Effect struct {
	Key string `json:"key"`
	// Ref is the downstream's reference; "" when the tool declares no external_ref_field.
	Ref string `json:"ref"`
}

// Report is a probe run.
type Report struct {
	Tool      string `json:"tool"`
	Version   string `json:"version"`
	URL       string `json:"url"`
	LookupURL string `json:"lookup_url,omitempty"`
	// Run is the run's id: every key is KeyPrefix + Run + "-" + a number.
	Run    string  `json:"run"`
	Checks []Check `json:"checks"`
	// Effects lists every effect the probe made (or found it had made), in the order seen.
	Effects []Effect `json:"effects"`
	// Requests counts the requests sent, lookups included.
	Requests int `json:"requests"`
	// Error, when set, is why the probe stopped before its verdict (Run's error): the checks
	// listed are the ones it finished, and the run is no pass.
	Error string `json:"error,omitempty"`
}

// Count returns how many checks have verdict v.
func (r *Report) Count(v Verdict) int {
	n := 0
	for _, c := range r.Checks {
		if c.Verdict == v {
			n++
		}
	}
	return n
}

// WriteText writes the report for people: a header, one line per check, the summary.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "probe %s version %s: POST %s", r.Tool, r.Version, r.URL)
	if r.LookupURL != "" {
		fmt.Fprintf(w, ", lookup GET %s", r.LookupURL)
	}
	fmt.Fprintf(w, "; keys %s%s-N\n", KeyPrefix, r.Run)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-19s  %s: %s: %s: %s\n", c.Verdict, c.Declaration, c.Declared, c.Case, c.Detail)
	}
	var refs []string
	for _, e := range r.Effects {
		ref := e.Ref
		if ref == "" {
			ref = "(no reference)"
		}
		refs = append(refs, e.Key+" "+ref)
	}
	effects := "none"
	if len(refs) > 0 {
		effects = strings.Join(refs, ", ")
	}
	if r.Error != "" {
		fmt.Fprintf(w, "ABORTED: %s\n", r.Error)
		fmt.Fprintf(w, "summary: no verdict (the run did not finish); %d requests; effects made: %d (%s)\n",
			r.Requests, len(r.Effects), effects)
		return
	}
	fmt.Fprintf(w, "summary: %d ok, %d CONTRADICTED, %d not verifiable here, %d not declared; %d requests; effects made: %d (%s)\n",
		r.Count(OK), r.Count(Contradicted), r.Count(NotVerifiable), r.Count(NotDeclared), r.Requests, len(r.Effects), effects)
}

// InputError is a probe that cannot start: a tool or arguments it cannot use. Nothing was sent.
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

func inputErr(format string, a ...any) error { return &InputError{msg: fmt.Sprintf(format, a...)} }

// Run probes opts.Tool's downstream. It returns the report and, when the probe could not finish
// (bad input: an *InputError, before anything is sent; a downstream that is down or stopped
// answering; ctx ended), an error, also in Report.Error: such a run is no verdict, whatever
// its checks so far say.
func Run(ctx context.Context, opts Options) (*Report, error) {
	r, err := newRun(opts)
	if err != nil {
		return nil, err
	}
	if err := r.all(ctx); err != nil {
		r.rep.Error = err.Error()
		return r.rep, err
	}
	return r.rep, nil
}

type run struct {
	opts Options
	t    *tool.Tool
	cfg  executor.Settings // the tool's, defaults applied
	x    *executor.HTTP
	rep  *Report
	keys int

	mu sync.Mutex
	// effects maps a key to the references seen of effects under it.
	effects map[string][]string
	// refusals are the answers the tool declares definitive, by key (the other-body case
	// left out: a refusal is its expected answer).
	refusals []Exchange
	statuses map[int]int
	slowest  time.Duration
	// firstSent is when each key was first sent.
	firstSent map[string]time.Time
}

func newRun(opts Options) (*run, error) {
	t := opts.Tool
	if t == nil {
		return nil, inputErr("no tool to probe")
	}
	if t.Executor.Type != executor.TypeHTTP {
		return nil, inputErr("tool %q version %q: its executor is %q; the probe runs the built-in http executor only", t.Name, t.Version, t.Executor.Type)
	}
	if err := checkObject("--args", opts.Args); err != nil {
		return nil, err
	}
	if err := t.ValidateArgs(opts.Args); err != nil {
		return nil, inputErr("--args: the tool's args_schema refuses them, so the ledger would never send them: %v", err)
	}
	if opts.InvalidArgs != nil {
		if err := checkObject("--invalid-args", opts.InvalidArgs); err != nil {
			return nil, err
		}
	}
	opts.Lookups = cmp.Or(opts.Lookups, DefaultLookups)
	opts.Twins = cmp.Or(opts.Twins, DefaultTwins)
	opts.LookupWait = cmp.Or(opts.LookupWait, DefaultLookupWait)
	opts.RetentionWait = cmp.Or(opts.RetentionWait, DefaultRetentionWait)
	if opts.Lookups < 1 {
		return nil, inputErr("lookups: %d; at least 1", opts.Lookups)
	}
	if opts.Twins < 2 {
		return nil, inputErr("twins: %d; at least 2 make a race", opts.Twins)
	}
	// Each probe request is one send, so that what it counts is what the downstream got; the
	// rest of the tool's settings are used as declared.
	s := t.Executor
	s.MaxAttempts = 1
	x, err := executor.NewHTTP(s, opts.Client, nil)
	if err != nil {
		return nil, inputErr("tool %q version %q: %v", t.Name, t.Version, err)
	}
	runID := strings.ToLower(rand.Text()[:16])
	return &run{opts: opts, t: t, cfg: t.Executor.WithDefaults(), x: x,
		rep: &Report{Tool: t.Name, Version: t.Version, URL: ShownURL(t.Executor.URL), LookupURL: ShownURL(t.Executor.LookupURL),
			Run: runID, Checks: []Check{}, Effects: []Effect{}},
		effects: map[string][]string{}, statuses: map[int]int{}, firstSent: map[string]time.Time{}}, nil
}

// ShownURL is a tools file's URL as the report shows it: a URL may carry credentials (a user and
// password, a token in the query), which the executor never logs either, so the user
// information and every query value but the {key} placeholder become "…".
func ShownURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("…")
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			if name, value, ok := strings.Cut(p, "="); ok && value != "{key}" {
				parts[i] = name + "=…"
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	return u.String()
}

func checkObject(name string, b json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return inputErr("%s: not a JSON object", name)
	}
	return nil
}

// key returns a fresh key of this run.
func (r *run) key() string {
	r.keys++
	return fmt.Sprintf("%s%s-%d", KeyPrefix, r.rep.Run, r.keys)
}

func (r *run) add(c Check) { r.rep.Checks = append(r.rep.Checks, c) }

func (r *run) call(key string, args json.RawMessage) executor.Call {
	return executor.Call{Tenant: "probe", Tool: r.t.Name, ToolVersion: r.t.Version, OperationID: "probe", DownstreamKey: key, Args: args}
}

// errDown is a downstream that did not answer where an answer was needed.
type errDown struct{ what, detail string }

func (e *errDown) Error() string {
	return fmt.Sprintf("the downstream did not answer %s (%s): is it up, and is the tools file's URL the sandbox's?", e.what, e.detail)
}

// send POSTs args under key once. A request that was not sent (connection refused, DNS) is an
// error: the probe stops rather than read silence as an answer.
func (r *run) send(ctx context.Context, key string, args json.RawMessage) (Exchange, executor.Result, error) {
	r.mu.Lock()
	if _, ok := r.firstSent[key]; !ok {
		r.firstSent[key] = time.Now()
	}
	r.mu.Unlock()
	start := time.Now()
	res := r.x.Send(ctx, r.call(key, args))
	x := Exchange{Method: http.MethodPost, Key: key, Status: res.HTTPStatus, Outcome: res.Outcome.String(), Ref: res.ExternalRef,
		Detail: res.Detail, Millis: time.Since(start).Milliseconds()}
	r.note(x, time.Since(start), res.Attempts > 0)
	if res.Outcome == executor.OutcomeNotSubmitted {
		return x, res, &errDown{what: "POST " + ShownURL(r.cfg.URL), detail: res.Detail}
	}
	if res.Outcome == executor.OutcomeSucceeded {
		r.effect(key, res.ExternalRef)
	}
	return x, res, nil
}

// lookup GETs the lookup under key once; no answer at all is an error.
func (r *run) lookup(ctx context.Context, key string) (Exchange, executor.LookupResult, error) {
	start := time.Now()
	lr := r.x.Lookup(ctx, r.call(key, nil))
	x := Exchange{Method: http.MethodGet, Key: key, Status: lr.HTTPStatus, Outcome: lr.Status.String(), Detail: lr.Detail,
		Millis: time.Since(start).Milliseconds()}
	if lr.Status == executor.LookupFound {
		x.Outcome += " " + lr.Result.Outcome.String()
		x.Ref = lr.Result.ExternalRef
	}
	r.note(x, time.Since(start), true)
	if lr.HTTPStatus == 0 {
		return x, lr, &errDown{what: "the lookup " + ShownURL(r.cfg.LookupURL), detail: lr.Detail}
	}
	if foundSucceeded(lr) {
		r.effect(key, lr.Result.ExternalRef)
	}
	return x, lr, nil
}

func foundSucceeded(lr executor.LookupResult) bool {
	return lr.Status == executor.LookupFound && lr.Result.Outcome == executor.OutcomeSucceeded
}

func (r *run) note(x Exchange, took time.Duration, sent bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sent {
		r.rep.Requests++
	}
	if x.Status != 0 {
		r.statuses[x.Status]++
	}
	r.slowest = max(r.slowest, took)
}

// effect records an effect under key with reference ref ("" when none is declared).
func (r *run) effect(key, ref string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seen := r.effects[key]; slices.Contains(seen, ref) || (ref == "" && len(seen) > 0) {
		return
	}
	r.effects[key] = append(r.effects[key], ref)
	r.rep.Effects = append(r.rep.Effects, Effect{Key: key, Ref: ref})
}

// refused records a send answered with a status the tool declares definitive.
func (r *run) refused(x Exchange, res executor.Result) {
	if res.Outcome == executor.OutcomeFailed && res.HTTPStatus != 0 {
		r.mu.Lock()
		r.refusals = append(r.refusals, x)
		r.mu.Unlock()
	}
}

func (r *run) hasLookup() bool { return r.cfg.LookupURL != "" }

// all runs the checks in order; see docs/tools.md for what each one sends.
func (r *run) all(ctx context.Context) error {
	k1 := r.key()
	first, ref, lookups, err := r.checkEffect(ctx, k1)
	if err != nil {
		return err
	}
	if err := r.checkLookups(ctx, k1, first, ref, lookups); err != nil {
		return err
	}
	if err := r.checkDedupe(ctx, k1, ref); err != nil {
		return err
	}
	if err := r.checkNeverUsed(ctx); err != nil {
		return err
	}
	if err := r.checkInvalid(ctx); err != nil {
		return err
	}
	if err := r.checkRetention(ctx, k1, ref); err != nil {
		return err
	}
	r.checkRefusalsAfterEffects()
	r.checkUnverifiable()
	return nil
}

// checkEffect makes the probe's first effect under k1 and looks it up at once. It returns the
// send, the effect's reference and that first lookup (nil without lookup_url).
func (r *run) checkEffect(ctx context.Context, k1 string) (Exchange, string, []lookupSeen, error) {
	x, res, err := r.send(ctx, k1, r.opts.Args)
	if err != nil {
		return x, "", nil, err
	}
	r.refused(x, res)
	var seen []lookupSeen
	if r.hasLookup() {
		lx, lr, err := r.lookup(ctx, k1)
		if err != nil {
			return x, "", nil, err
		}
		seen = append(seen, lookupSeen{lx, lr})
	}
	ref := res.ExternalRef
	if res.Outcome != executor.OutcomeSucceeded {
		if len(seen) == 0 || !foundSucceeded(seen[0].lr) {
			return x, "", nil, fmt.Errorf("the downstream did not take --args: %s (%s); the probe needs args the downstream accepts",
				x, res.Detail)
		}
		// Not a 2xx, and yet the lookup finds the effect (a refusal or an error after it):
		// the checks go on with the effect the lookup names.
		ref = seen[0].lr.Result.ExternalRef
	}
	field := r.cfg.ExternalRefField
	c := Check{Declaration: "external_ref_field", Declared: strconv.Quote(field), Case: "a 2xx answer names its effect", Evidence: []Exchange{x}}
	switch {
	case field == "":
		c.Verdict, c.Detail = NotDeclared, "the ledger records no reference, and the probe tells effects apart by their answers only"
	case res.Outcome != executor.OutcomeSucceeded:
		c.Verdict, c.Detail = NotVerifiable, fmt.Sprintf("%s was not a 2xx", x)
	case res.ExternalRef == "":
		c.Verdict, c.Detail = Contradicted, fmt.Sprintf("%s: no reference at %q (%s)", x, field, res.Detail)
	default:
		c.Verdict, c.Detail = OK, fmt.Sprintf("%s names %s at %q", x, res.ExternalRef, field)
	}
	r.add(c)
	return x, ref, seen, nil
}

type lookupSeen struct {
	x  Exchange
	lr executor.LookupResult
}

// checkLookups: right after the effect, Lookups lookups back to back must each find it (a
// lagging replica among several is caught by repetition); one that never finds it is a 404 for
// a known key; the status field must map to lookup_succeeded.
func (r *run) checkLookups(ctx context.Context, k1 string, sent Exchange, ref string, seen []lookupSeen) error {
	if !r.hasLookup() {
		for _, d := range []string{"lookup_url", "lookup_status_field", "lookup_consistent"} {
			r.add(Check{Declaration: d, Declared: "(none)", Case: "a lookup by key", Verdict: NotDeclared,
				Detail: "no lookup_url: an unknown outcome is settled by a retry under the same key or by an operator"})
		}
		return nil
	}
	for len(seen) < r.opts.Lookups {
		x, lr, err := r.lookup(ctx, k1)
		if err != nil {
			return err
		}
		seen = append(seen, lookupSeen{x, lr})
	}
	quick := len(seen)
	// Never found yet: ask again until LookupWait, so that a lookup that lags is told from one
	// that never finds what was made.
	deadline := time.Now().Add(r.opts.LookupWait)
	for !slices.ContainsFunc(seen, func(s lookupSeen) bool { return foundSucceeded(s.lr) }) && time.Now().Before(deadline) {
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
		x, lr, err := r.lookup(ctx, k1)
		if err != nil {
			return err
		}
		seen = append(seen, lookupSeen{x, lr})
	}

	var found, misses, other []Exchange
	firstFound := -1
	for i, s := range seen {
		switch {
		case foundSucceeded(s.lr):
			found = append(found, s.x)
			if firstFound < 0 {
				firstFound = i
			}
		case s.x.Status == http.StatusNotFound:
			if i < quick {
				misses = append(misses, s.x)
			}
		default:
			other = append(other, s.x)
		}
	}
	var wrongRef []Exchange
	for _, x := range found {
		if ref != "" && x.Ref != ref {
			wrongRef = append(wrongRef, x)
		}
	}
	effect := sent.String()
	if ref != "" && sent.Ref == "" {
		effect += " (the lookup names " + ref + ")"
	}

	c := Check{Declaration: "lookup_url", Declared: ShownURL(r.cfg.LookupURL), Case: "a lookup right after the effect finds it"}
	switch {
	case len(wrongRef) > 0:
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("after %s, the lookup names another effect: %s", effect, wrongRef[0])
		c.Evidence = []Exchange{sent, wrongRef[0]}
	case len(found) == 0:
		c.Verdict = Contradicted
		c.Detail = fmt.Sprintf("after %s, %d lookups in %s never found it (a 404 for a key the downstream knows): %s",
			effect, len(seen), r.opts.LookupWait, summarize(seen))
		c.Evidence = append([]Exchange{sent}, seen[0].x, seen[len(seen)-1].x)
	case firstFound == 0:
		c.Verdict, c.Detail = OK, fmt.Sprintf("after %s, the first lookup found it", effect)
		c.Evidence = []Exchange{sent, seen[0].x}
	default:
		c.Verdict = OK
		c.Detail = fmt.Sprintf("after %s, lookup %d of %d found it first (%s)", effect, firstFound+1, len(seen), summarize(seen[:firstFound+1]))
		c.Evidence = []Exchange{sent, seen[0].x, seen[firstFound].x}
	}
	r.add(c)

	cl := r.cfg.Classification
	sc := Check{Declaration: "lookup_status_field", Declared: fmt.Sprintf("%s, lookup_succeeded %v", cl.LookupStatusField, cl.LookupSucceeded),
		Case: "the lookup's status maps to lookup_succeeded"}
	var last200 *lookupSeen
	for i := range seen {
		if seen[i].x.Status == http.StatusOK {
			last200 = &seen[i]
		}
	}
	switch {
	case len(found) > 0:
		sc.Verdict, sc.Detail, sc.Evidence = OK, fmt.Sprintf("%s: %s", found[0], found[0].Detail), found[:1]
	case last200 == nil:
		sc.Verdict, sc.Detail = NotVerifiable, "no lookup answered 200"
	default:
		// A 200 whose status is failed, pending for longer than the wait, undeclared or missing:
		// the ledger could never settle this effect by lookup, or would call it failed.
		sc.Verdict = Contradicted
		sc.Detail = fmt.Sprintf("after %s, the lookup answers 200 that does not map to lookup_succeeded: %s", effect, last200.x.Detail)
		sc.Evidence = []Exchange{sent, last200.x}
	}
	r.add(sc)

	cc := Check{Declaration: "lookup_consistent", Declared: strconv.FormatBool(r.cfg.LookupConsistent),
		Case: fmt.Sprintf("%d lookups at once after the effect", quick)}
	seenText := fmt.Sprintf("%d of %d found it, %d answered 404", countFound(seen[:quick]), quick, len(misses))
	switch {
	case !r.cfg.LookupConsistent:
		cc.Verdict = NotDeclared
		cc.Detail = "lookup_consistent: false: the ledger never trusts a 404; seen: " + seenText
	case len(misses) > 0:
		cc.Verdict = Contradicted
		cc.Detail = fmt.Sprintf("after %s, %s; a 404 the ledger trusts would let it send again: first miss %s", effect, seenText, misses[0])
		cc.Evidence = append([]Exchange{sent}, misses...)
		if len(found) > 0 {
			cc.Evidence = append(cc.Evidence, found[0])
		}
	case len(other) > 0 && countFound(seen[:quick]) < quick:
		cc.Verdict = NotVerifiable
		cc.Detail = fmt.Sprintf("no 404, but %d lookups answered otherwise: %s", quick-countFound(seen[:quick]), summarize(seen[:quick]))
	default:
		cc.Verdict, cc.Detail = OK, fmt.Sprintf("after %s, %s", effect, seenText)
	}
	r.add(cc)
	return nil
}

func countFound(seen []lookupSeen) int {
	n := 0
	for _, s := range seen {
		if foundSucceeded(s.lr) {
			n++
		}
	}
	return n
}

// summarize counts answers like "3×404, 17×200 ch_x".
func summarize(seen []lookupSeen) string {
	xs := make([]Exchange, len(seen))
	for i, s := range seen {
		xs[i] = s.x
	}
	return summarizeExchanges(xs)
}

func summarizeExchanges(xs []Exchange) string {
	var order []string
	count := map[string]int{}
	for _, x := range xs {
		k := "no answer"
		if x.Status != 0 {
			k = strconv.Itoa(x.Status)
		}
		if x.Ref != "" {
			k += " " + x.Ref
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d×%s", count[k], k)
	}
	return strings.Join(parts, ", ")
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
