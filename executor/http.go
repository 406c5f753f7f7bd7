package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Defaults of Settings (see Settings.WithDefaults).
const (
	DefaultTimeout      = 10 * time.Second
	DefaultMaxBodyBytes = 64 << 10
	DefaultMaxAttempts  = 1
	DefaultBackoffBase  = 50 * time.Millisecond
	DefaultBackoffMax   = 2 * time.Second
)

// maxRawBytes bounds the text kept of a body that is not JSON: such bodies are error pages,
// useful to a person only in their first lines.
const maxRawBytes = 8 << 10

// HTTPConfig configures the HTTP executor: the tool's Settings, of which it reads URL,
// LookupURL, Timeout, DedupesKeys, LookupConsistent, ExternalRefField, MaxAttempts, Headers,
// MaxBodyBytes, the backoff and the Classification.
type HTTPConfig = Settings

// HTTP is the built-in executor: it POSTs the args as JSON with the downstream key in an
// Idempotency-Key header, and classifies the answer. It is safe for concurrent use.
type HTTP struct {
	cfg    HTTPConfig
	client *http.Client
	log    *slog.Logger
	// header is every request's header but Idempotency-Key: the
	// configured headers, Content-Type and Accept, built once.
	header http.Header
}

var _ interface {
	Executor
	Looker
	CapabilityReporter
} = (*HTTP)(nil)

// NewHTTP returns an HTTP executor. A nil client means a private one with its own connection
// pool; a nil logger logs nothing. The client is copied with redirects disabled, because
// following one would be a second send the downstream may not dedupe.
func NewHTTP(cfg HTTPConfig, client *http.Client, logger *slog.Logger) (*HTTP, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := checkURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if cfg.LookupURL != "" {
		if !strings.Contains(cfg.LookupURL, "{key}") {
			return nil, errors.New("lookup_url: must contain {key}")
		}
		if err := checkURL(strings.ReplaceAll(cfg.LookupURL, "{key}", "k")); err != nil {
			return nil, fmt.Errorf("lookup_url: %w", err)
		}
	}
	if err := cfg.Classification.Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Timeout < 0:
		return nil, errors.New("timeout: must not be negative")
	case cfg.MaxAttempts < 0:
		return nil, errors.New("max_attempts: must not be negative")
	case cfg.MaxBodyBytes < 0:
		return nil, errors.New("max_body_bytes: must not be negative")
	case cfg.BackoffBase < 0 || cfg.BackoffMax < 0:
		return nil, errors.New("backoff: must not be negative")
	}
	headers := make(map[string]string, len(cfg.Headers))
	for name, value := range cfg.Headers {
		canon := http.CanonicalHeaderKey(name)
		switch canon {
		case "Idempotency-Key", "Content-Type", "Content-Length", "Host", "Transfer-Encoding":
			return nil, fmt.Errorf("headers: %s is set by the executor", canon)
		}
		if !validHeaderName(name) || !validHeaderValue(value) {
			return nil, fmt.Errorf("headers: invalid header %q", name)
		}
		headers[canon] = value
	}
	cfg.Headers = headers
	if !cfg.DedupesKeys && cfg.MaxAttempts > 1 {
		logger.Warn("executor: max_attempts ignored: the downstream does not dedupe keys, so it is never retried",
			"max_attempts", cfg.MaxAttempts)
	}
	cfg = cfg.WithDefaults()

	var c http.Client
	if client != nil {
		c = *client
	} else {
		c.Transport = NewDirect()
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	header := make(http.Header, len(cfg.Headers)+3)
	for name, value := range cfg.Headers {
		header[name] = []string{value} // canonical already
	}
	header["Content-Type"] = []string{"application/json"}
	header["Accept"] = []string{"application/json"}
	return &HTTP{cfg: cfg, client: &c, log: logger, header: header}, nil
}

// Capabilities reports what the configuration declares of the downstream.
func (h *HTTP) Capabilities() Capabilities {
	return Capabilities{
		DedupesKeys:      h.cfg.DedupesKeys,
		HasLookup:        h.cfg.LookupURL != "",
		LookupConsistent: h.cfg.LookupURL != "" && h.cfg.LookupConsistent,
	}
}

// Send sends c downstream, retrying under the same key only where the downstream dedupes
// keys, and classifies the last answer. See the package documentation for the outcomes.
func (h *HTTP) Send(ctx context.Context, c Call) Result {
	if !isJSONObject(c.Args) {
		return Result{Outcome: OutcomeFailed, Detail: "args are not a JSON object; nothing was sent"}
	}
	if !validHeaderValue(c.DownstreamKey) {
		return Result{Outcome: OutcomeFailed, Detail: "downstream key is not a valid header value; nothing was sent"}
	}
	maxAttempts := h.cfg.MaxAttempts
	if c.DownstreamKey == "" {
		// Without a key the downstream cannot recognise a retry.
		maxAttempts = 1
	}
	var res Result
	sends := 0
	// ambiguous: an earlier attempt may have reached the downstream and taken effect. A later
	// refusal then proves nothing about it (the first request may have charged, and the second
	// is refused because of it, or for an unrelated reason), so only a success settles it.
	ambiguous := false
	for attempt := 1; ; attempt++ {
		if sends == 0 && !c.SendBy.IsZero() && !time.Now().Before(c.SendBy) {
			res = Result{Outcome: OutcomeNotSubmitted, Detail: "not sent: the approval expired before the request could start", ApprovalEnded: true}
			break
		}
		actx := ctx
		if sends == 0 && !c.SendBy.IsZero() {
			// The built-in transport checks it again once it holds a connection, just
			// before it writes (Direct).
			actx = context.WithValue(ctx, sendByKey{}, c.SendBy)
		}
		r, n, retryAfter := h.attempt(actx, c)
		if h.cfg.Reclassify != nil {
			r = h.cfg.Reclassify(r)
		}
		sends += n
		res = r
		if h.log.Enabled(ctx, slog.LevelDebug) {
			h.callLog(c).Debug("executor: attempt", "attempt", attempt, "outcome", r.Outcome, "status", r.HTTPStatus, "sent", n > 0)
		}
		if r.Outcome == OutcomeNotSubmitted && sends == 0 && !c.SendBy.IsZero() && !time.Now().Before(c.SendBy) {
			res.ApprovalEnded = true
			break // the approval ended: no attempt may start now
		}
		if r.Outcome == OutcomeFailed && ambiguous {
			res.Outcome = OutcomeUnknown
			res.Detail = "an earlier attempt may have reached the downstream, so a later refusal does not prove that nothing happened; last attempt: " + r.Detail
			break
		}
		if r.Outcome == OutcomeUnknown && n > 0 {
			ambiguous = true
		}
		if r.Outcome != OutcomeUnknown && r.Outcome != OutcomeNotSubmitted {
			break
		}
		if attempt >= maxAttempts {
			break
		}
		wait := h.backoff(attempt, retryAfter)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			res.Detail += "; no time left for another attempt"
			break
		}
		if !sleep(ctx, wait) {
			break
		}
	}
	res.Attempts = sends
	if res.Outcome == OutcomeNotSubmitted && sends > 0 {
		res.Outcome = OutcomeUnknown
		res.Detail = "an earlier attempt may have reached the downstream; last attempt: " + res.Detail
	}
	// No line here: the ledger logs the call once, with its outcome
	// (Ledger.sent), so that one call that fails is one line.
	return res
}

// sendByKey carries a first request's SendBy to the transport (Direct), which checks it once
// it holds a connection, just before it writes.
type sendByKey struct{}

// errApprovalEnded is Direct's refusal to write a first request whose SendBy passed while
// the connection was being set up: nothing was written.
var errApprovalEnded = errors.New("not sent: the approval ended before the request could be written")

// callLog is the logger of one call: built only for a line that is
// written, as it digests the key.
func (h *HTTP) callLog(c Call) *slog.Logger {
	return h.log.With("operation_id", c.OperationID, "tenant", c.Tenant, "tool", c.Tool, "key", keyDigest(c.DownstreamKey))
}

// attempt makes one send and classifies it. sends counts the requests whose headers were
// written: more than one only if the transport re-sent on its own, which Send prevents.
func (h *HTTP) attempt(ctx context.Context, c Call) (res Result, sends int, retryAfter time.Duration) {
	if err := ctx.Err(); err != nil {
		return Result{Outcome: OutcomeNotSubmitted, Detail: "not sent: " + err.Error()}, 0, 0
	}
	// Read the monotonic clock too, not only the context: after this process was stopped
	// (SIGSTOP, a long GC pause, a VM freeze) past its deadline, the timer that cancels ctx may
	// not have fired yet when it resumes, and the lease the deadline stands for may already
	// belong to another executor.
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return Result{Outcome: OutcomeNotSubmitted, Detail: "not sent: the call's deadline (the executor's lease) passed"}, 0, 0
	}
	actx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	// Whether the request may have reached the downstream is decided by the transport having
	// written the request headers: before that no byte of a request the server could act on has
	// left (dial errors, refused connections and cancellations all land there).
	var wrote atomic.Int32
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Add(1) },
	})
	req, err := http.NewRequestWithContext(actx, http.MethodPost, h.cfg.URL, bytes.NewReader(c.Args))
	if err != nil {
		return Result{Outcome: OutcomeFailed, Detail: "not sent: " + err.Error()}, 0, 0
	}
	// net/http treats a POST carrying Idempotency-Key as replayable when GetBody is set (as
	// NewRequest does for a bytes.Reader), and then silently re-sends it on a reused connection
	// that fails before the answer. Clearing GetBody stops that hidden second send, which a
	// downstream that does not dedupe keys would turn into a second side effect.
	req.GetBody = nil
	req.Header = h.header.Clone()
	if c.DownstreamKey != "" {
		req.Header["Idempotency-Key"] = []string{c.DownstreamKey}
	}
	resp, err := h.client.Do(req)
	sends = int(wrote.Load())
	if err != nil {
		if sends == 0 && errors.Is(err, errApprovalEnded) {
			return Result{Outcome: OutcomeNotSubmitted, Detail: "not sent: the approval expired while the connection to the downstream was being set up", ApprovalEnded: true}, 0, 0
		}
		if sends == 0 {
			return Result{Outcome: OutcomeNotSubmitted, Detail: "not sent: " + describeErr(err, h.cfg.Timeout)}, 0, 0
		}
		return Result{Outcome: OutcomeUnknown, Detail: "sent, no answer: " + describeErr(err, h.cfg.Timeout)}, sends, 0
	}
	defer closeBody(resp.Body)
	sends = max(sends, 1)
	ans, readErr := readBody(resp.Body, h.cfg.MaxBodyBytes)
	res = Result{HTTPStatus: resp.StatusCode, Body: ans.body}
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		res.Outcome = OutcomeSucceeded
		res.ExternalRef, res.Detail = h.externalRef(ans)
		if readErr != nil {
			res.Detail = joinDetail(res.Detail, "answer body unreadable: "+describeErr(readErr, h.cfg.Timeout))
		}
	case code >= 300 && code < 400:
		// Not followed (that would be a second send), and not a refusal either: the downstream
		// may have acted before redirecting.
		res.Outcome = OutcomeUnknown
		res.Detail = fmt.Sprintf("downstream answered with a redirect (%d), which is not followed; the request may have taken effect", code)
	case h.cfg.Classification.Definitive(code):
		res.Outcome = OutcomeFailed
		res.Detail = fmt.Sprintf("downstream refused: %d %s", code, http.StatusText(code))
	default:
		// 408, 409, 425, 429, 5xx, and any status the tool does not declare definitive.
		res.Outcome = OutcomeUnknown
		res.Detail = fmt.Sprintf("downstream answered %d %s, which the tool does not declare a definitive refusal; the request may have taken effect", code, http.StatusText(code))
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
	}
	return res, sends, retryAfter
}

// Lookup asks the downstream whether it has a side effect under c's downstream key.
func (h *HTTP) Lookup(ctx context.Context, c Call) LookupResult {
	log := h.callLog(c)
	lr := h.lookup(ctx, c)
	log.Info("executor: lookup", "status", lr.Status, "outcome", lr.Result.Outcome,
		"external_ref", lr.Result.ExternalRef, "detail", lr.Detail)
	return lr
}

func (h *HTTP) lookup(ctx context.Context, c Call) LookupResult {
	if h.cfg.LookupURL == "" {
		return LookupResult{Status: LookupInconclusive, Detail: "downstream has no lookup"}
	}
	if c.DownstreamKey == "" {
		return LookupResult{Status: LookupInconclusive, Detail: "call has no downstream key to look up"}
	}
	actx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	u := strings.ReplaceAll(h.cfg.LookupURL, "{key}", url.QueryEscape(c.DownstreamKey))
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u, nil)
	if err != nil {
		return LookupResult{Status: LookupInconclusive, Detail: "lookup not sent: " + err.Error()}
	}
	for name, value := range h.cfg.Headers {
		req.Header.Set(name, value)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return LookupResult{Status: LookupInconclusive, Detail: "lookup failed: " + describeErr(err, h.cfg.Timeout)}
	}
	defer closeBody(resp.Body)
	lr := h.lookupAnswer(resp)
	lr.HTTPStatus = resp.StatusCode
	return lr
}

// lookupAnswer classifies a lookup's answer.
func (h *HTTP) lookupAnswer(resp *http.Response) LookupResult {
	ans, readErr := readBody(resp.Body, h.cfg.MaxBodyBytes)
	switch resp.StatusCode {
	case http.StatusOK:
		if readErr != nil {
			return LookupResult{Status: LookupInconclusive, Detail: "lookup answer unreadable: " + describeErr(readErr, h.cfg.Timeout)}
		}
		cl := h.cfg.Classification
		status, ok := extractPath(ans.object, cl.LookupStatusField)
		if !ok {
			// Unknown is not success: a 200 that does not say what happened proves nothing.
			return LookupResult{Status: LookupInconclusive,
				Detail: fmt.Sprintf("lookup answered 200 without a status at %q", cl.LookupStatusField)}
		}
		res := Result{Body: ans.body, HTTPStatus: http.StatusOK}
		switch {
		case containsFold(cl.LookupSucceeded, status):
			res.Outcome = OutcomeSucceeded
			res.ExternalRef, res.Detail = h.externalRef(ans)
		case containsFold(cl.LookupFailed, status):
			res.Outcome = OutcomeFailed
			res.Detail = fmt.Sprintf("downstream reports status %q", status)
		case containsFold(cl.LookupPending, status):
			return LookupResult{Status: LookupInconclusive, Detail: fmt.Sprintf("downstream reports status %q: not final yet", status)}
		default:
			return LookupResult{Status: LookupInconclusive,
				Detail: fmt.Sprintf("downstream reports status %q, which the tool does not declare as succeeded, failed or pending", status)}
		}
		return LookupResult{Status: LookupFound, Result: res, Detail: joinDetail("found", res.Detail)}
	case http.StatusNotFound:
		if h.cfg.LookupConsistent {
			return LookupResult{Status: LookupNotFound, Detail: "downstream has nothing under this key"}
		}
		return LookupResult{Status: LookupInconclusive, Detail: "not found, but lookup is eventually consistent"}
	default:
		return LookupResult{Status: LookupInconclusive,
			Detail: fmt.Sprintf("lookup answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
}

// externalRef extracts the configured reference from a success body, and says so when it is
// missing: a success without a reference is still a success.
func (h *HTTP) externalRef(a answer) (ref, detail string) {
	field := h.cfg.ExternalRefField
	if field == "" {
		return "", ""
	}
	ref, ok := extractPath(a.object, field)
	if !ok {
		return "", fmt.Sprintf("succeeded, but the answer has no external reference at %q", field)
	}
	return ref, ""
}

// backoff is exponential with full jitter, never shorter than a Retry-After the downstream
// asked for (bounded by BackoffMax, so a hostile header cannot park a worker).
func (h *HTTP) backoff(attempt int, retryAfter time.Duration) time.Duration {
	ceiling := h.cfg.BackoffMax
	if shift := attempt - 1; shift < 30 {
		ceiling = min(ceiling, h.cfg.BackoffBase<<shift)
	}
	wait := time.Duration(0)
	if ceiling > 0 {
		wait = rand.N(ceiling + 1)
	}
	return max(wait, min(retryAfter, h.cfg.BackoffMax))
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// answer is a downstream's answer as the executor read it: body is what is kept of it (always a
// JSON object, see Object), and object the same bytes when the downstream answered a JSON
// object (nil otherwise), the only answer a reference or a status is read from.
type answer struct {
	body   json.RawMessage
	object json.RawMessage
}

// readBody keeps at most limit bytes of the answer and parses it once. A JSON object is kept
// compacted; anything else becomes an object by Object's rule. An empty body is nil.
func readBody(r io.Reader, limit int64) (answer, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	truncated := int64(len(b)) > limit
	if truncated {
		b = b[:limit]
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return answer{}, err
	}
	if truncated || err != nil {
		return answer{body: wrapRaw(b, true)}, err
	}
	var compact bytes.Buffer
	if json.Compact(&compact, b) != nil {
		return answer{body: wrapRaw(b, false)}, nil
	}
	c := compact.Bytes()
	if c[0] != '{' {
		return answer{body: wrapValue(c)}, nil
	}
	// Nothing is decoded here: a path reads only the members it names
	// (extractPath), in the compact text Compact has just validated.
	return answer{body: c, object: c}, nil
}

// Object is the one rule by which whatever a downstream answered (or reported in a webhook)
// becomes the JSON object stored as an operation's result or error body: a JSON object is kept
// as it is, any other JSON value is wrapped as {"value": v}, and anything that is not JSON as
// {"raw": "<text>", "truncated": false}. nil stays nil.
func Object(b []byte) json.RawMessage {
	t := bytes.TrimSpace(b)
	switch {
	case len(t) == 0:
		return nil
	case !json.Valid(t):
		return wrapRaw(t, false)
	case t[0] == '{':
		return t
	}
	return wrapValue(t)
}

func wrapValue(v []byte) json.RawMessage {
	out := make([]byte, 0, len(v)+10)
	out = append(out, `{"value":`...)
	out = append(out, v...)
	return append(out, '}')
}

// wrapRaw keeps the text of an answer that is not JSON (mostly an HTML error page, useful to a
// person only in its first lines: at most maxRawBytes of it).
func wrapRaw(b []byte, truncated bool) json.RawMessage {
	raw := b
	if len(raw) > maxRawBytes {
		raw, truncated = raw[:maxRawBytes], true
	}
	var wrapped bytes.Buffer
	enc := json.NewEncoder(&wrapped)
	enc.SetEscapeHTML(false) // raw bodies are mostly HTML error pages: keep them legible
	_ = enc.Encode(struct {
		Raw       string `json:"raw"`
		Truncated bool   `json:"truncated"`
	}{strings.ToValidUTF8(string(raw), "\uFFFD"), truncated}) // a cut character becomes U+FFFD
	return bytes.TrimSpace(wrapped.Bytes())
}

func closeBody(body io.ReadCloser) {
	// Draining a little lets the connection be reused; a huge body is not worth it.
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 256<<10))
	_ = body.Close()
}

// extractPath follows a dot path through JSON objects to a string (not empty) or a number (as
// written), in obj, a compact and valid JSON object (readBody's answer.object; nil finds
// nothing). Where a name occurs twice in one object the last one counts, as in a decode.
func extractPath(obj json.RawMessage, path string) (string, bool) {
	parts := strings.Split(path, ".")
	for i, part := range parts {
		raw, ok := member(obj, part)
		if !ok || len(raw) == 0 {
			return "", false
		}
		if i < len(parts)-1 {
			if raw[0] != '{' {
				return "", false
			}
			obj = raw
			continue
		}
		switch c := raw[0]; {
		case c == '"':
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
			return s, s != ""
		case c == '-' || c >= '0' && c <= '9':
			return string(raw), true
		}
	}
	return "", false
}

// member returns the value of the last member named name in obj, a compact (no whitespace
// outside strings) and valid JSON object, without decoding anything else: reading a reference
// out of an answer costs a scan of its text, not a map of its members.
func member(obj []byte, name string) (json.RawMessage, bool) {
	if len(obj) < 2 || obj[0] != '{' {
		return nil, false
	}
	var found json.RawMessage
	ok := false
	for i := 1; i < len(obj) && obj[i] == '"'; {
		keyEnd := skipString(obj, i)
		valueEnd := skipValue(obj, keyEnd+1) // past the ':'
		if keyIs(obj[i:keyEnd], name) {
			found, ok = obj[keyEnd+1:valueEnd], true
		}
		i = valueEnd + 1 // past the ',' (or the closing '}', which ends the loop)
	}
	return found, ok
}

// skipString returns the index just past the string that starts (with its quote) at b[i].
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the compact JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i // a number, true, false or null
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j
}

// keyIs reports whether the quoted member name raw is name as a decode reads it; only a name
// written with escapes, or with bytes that are not UTF-8 (which a decode reads as U+FFFD), is
// decoded.
func keyIs(raw []byte, name string) bool {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == name
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == name
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(v string) bool { return strings.EqualFold(v, s) })
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// describeErr renders a transport error without the request URL, which may carry credentials.
func describeErr(err error, timeout time.Duration) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("timed out (attempt timeout %s or caller deadline)", timeout)
	case errors.Is(err, context.Canceled):
		return "cancelled by the caller"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the downstream (" + err.Error() + ")"
	}
	return err.Error()
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

func checkURL(raw string) error {
	if raw == "" {
		return errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return errors.New("host missing")
	}
	return nil
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// keyDigest is a short, stable digest of a downstream key for logs, which must never carry the
// key itself.
func keyDigest(key string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
