// Package fakepay is a fake payment processor served over HTTP, for tests, the `opledger dev` demo,
// benchmarks and the chaos suite. It follows Stripe's idempotency contract and injects faults on
// demand, so that every way a real processor can lose, repeat or hide a side effect can be staged
// and then counted.
//
// Endpoints:
//
//	POST   /charges                     create a charge; honours Idempotency-Key
//	GET    /charges                     {"data": [every charge, in creation order]}
//	GET    /charges?idempotency_key=K   the charge created under K, or 404
//	GET    /charges/{id}                one charge, or 404
//	POST   /emails                      send an e-mail; never dedupes keys
//	GET    /emails                      {"data": [every e-mail]}
//	GET    /admin/faults                the faults in force (trigger counters as they stand now)
//	PUT    /admin/faults                replace all faults (JSON Faults)
//	DELETE /admin/faults                clear all faults
//	POST   /admin/reset                 forget every charge, e-mail, key and fault
//
// The idempotency contract of POST /charges: the first request with a key reserves it; a second
// one while the first is still in flight gets 409 (type idempotency_conflict); once the first has
// committed, a request with the same key and the same body (compared as canonical JSON) gets the
// stored status and body again with header Idempotent-Replayed: true, and one with another body
// gets 422 (type idempotency_error). A request refused by validation (400: a body that is not a
// JSON object, or an amount_minor that is there and is not a positive integer) stores nothing, and
// neither does one failed by a before-commit fault. Errors look like
// {"error": {"type": "...", "message": "..."}}.
//
// State lives in memory behind one mutex: it is fast enough for benchmarks and every decision is
// atomic, so concurrent twins of a request can never both create a charge.
package fakepay

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// maxRequestBytes bounds a request body; a processor has no business accepting megabytes.
const maxRequestBytes = 1 << 20

// Options configures New. The zero value is ready to use.
type Options struct {
	// Now is the clock for timestamps, key retention and lookup lag; time.Now when nil. Delays
	// always use real time.
	Now func() time.Time
	// Seed seeds the generator of ids and fault rates, so that a run can be repeated; a random
	// seed when 0.
	Seed uint64
	// Logger receives structured logs; nothing is logged when nil.
	Logger *slog.Logger
	// RecordRequests keeps a record of every POST received (Requests), not only of the charges
	// and e-mails made: a downstream that deduplicated a repeated request still saw it, and the
	// chaos suite counts every send. Off by default: the record grows with every request.
	RecordRequests bool
	// SourceHeader names a request header whose value each recorded request keeps as its Source
	// (the chaos suite has every server send its own), so a request can be traced to its sender.
	SourceHeader string
}

// Charge is a charge as the processor stores and returns it.
type Charge struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Status         string `json:"status"`
	AmountMinor    int64  `json:"amount_minor"`
	Currency       string `json:"currency"`
	InvoiceID      string `json:"invoice_id"`
	IdempotencyKey string `json:"idempotency_key"`
	// Request is the request body as it was sent.
	Request json.RawMessage `json:"request"`
	// Created is in Unix seconds.
	Created int64 `json:"created"`
}

// Email is an e-mail as the processor stores and returns it.
type Email struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	To             string `json:"to"`
	Subject        string `json:"subject"`
	IdempotencyKey string `json:"idempotency_key"`
	// Request is the request body as it was sent.
	Request json.RawMessage `json:"request"`
	// Created is in Unix seconds.
	Created int64 `json:"created"`
}

// Request is one POST the processor received, and how it answered it.
type Request struct {
	// Path is "/charges" or "/emails".
	Path           string `json:"path"`
	IdempotencyKey string `json:"idempotency_key"`
	// Source is the value of Options.SourceHeader.
	Source string `json:"source,omitempty"`
	// Received is when the whole request had arrived, on the server's clock (Options.Now).
	Received time.Time `json:"received"`
	// Body is the request body as it was sent.
	Body json.RawMessage `json:"body"`
	// Status is the HTTP status answered; 0 while the request is in flight or when the
	// connection was dropped.
	Status int `json:"status"`
	// Answer says what the server did: one of the Answer* constants; "" while in flight.
	Answer string `json:"answer"`
}

// The answers a recorded request can get.
const (
	AnswerCreated            = "created"              // a new charge or e-mail, answered 200
	AnswerReplayed           = "replayed"             // the stored answer to an earlier request with the key
	AnswerInProgress         = "in_progress"          // 409: a request with the key is in flight
	AnswerKeyReused          = "key_reused"           // 422: the key was used with another body
	AnswerRefusedReplay      = "refused_replay"       // 400 to a repeat of a committed key (RefuseReplay)
	AnswerInvalid            = "invalid"              // 400: the body is not a JSON object
	AnswerFailedBeforeCommit = "failed_before_commit" // 500, nothing stored
	AnswerFailedAfterCommit  = "failed_after_commit"  // 500 after the effect
	AnswerDropped            = "dropped"              // connection reset after the effect
	AnswerRedirected         = "redirected"           // 303 after the effect
	AnswerRefusedAfterCommit = "refused_after_commit" // 402 after the effect (RefuseAfterCommit)
)

// Server is the fake processor, an http.Handler. It is safe for concurrent use.
type Server struct {
	now func() time.Time
	log *slog.Logger
	mux *http.ServeMux
	// record and sourceHeader are Options.RecordRequests and Options.SourceHeader.
	record       bool
	sourceHeader string
	// beforeCommit, when set by a test, runs where Delay sleeps, so that tests can hold a
	// request in flight deterministically.
	beforeCommit func()

	mu      sync.Mutex
	rng     *mrand.Rand
	faults  Faults
	webhook Webhook
	charges []*chargeRecord
	byID    map[string]*chargeRecord
	keys    map[string]*keyEntry
	emails  []Email
	// requests is the record of every POST when Options.RecordRequests is set,
	// and answerCounts counts their answers.
	requests     []*Request
	answerCounts map[string]int
}

type chargeRecord struct {
	charge Charge
	at     time.Time
	json   []byte
}

// keyEntry is what the server remembers of an idempotency key. While done is false the first
// request is still executing.
type keyEntry struct {
	canon   string
	created time.Time
	done    bool
	status  int
	body    []byte
	charge  *chargeRecord
}

// New returns a server with no charges, no e-mails and no faults.
func New(opts Options) *Server {
	s := &Server{
		now:          opts.Now,
		log:          opts.Logger,
		record:       opts.RecordRequests,
		sourceHeader: opts.SourceHeader,
		byID:         map[string]*chargeRecord{},
		keys:         map[string]*keyEntry{},
		answerCounts: map[string]int{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	seed := opts.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	s.rng = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.createCharge)
	mux.HandleFunc("GET /charges", s.listCharges)
	mux.HandleFunc("GET /charges/{id}", s.getCharge)
	mux.HandleFunc("POST /emails", s.createEmail)
	mux.HandleFunc("GET /emails", s.listEmails)
	mux.HandleFunc("GET /admin/faults", s.getFaults)
	mux.HandleFunc("PUT /admin/faults", s.putFaults)
	mux.HandleFunc("DELETE /admin/faults", s.deleteFaults)
	mux.HandleFunc("POST /admin/reset", s.reset)
	s.mux = mux
	return s
}

// ServeHTTP serves the processor's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// SetFaults replaces every fault in force with f. It panics on a Faults that does not Validate,
// since that is a bug in the calling test.
func (s *Server) SetFaults(f Faults) {
	if err := f.Validate(); err != nil {
		panic("fakepay: invalid faults: " + err.Error())
	}
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// Faults returns the faults in force, trigger counters as they stand now.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Charges returns every charge ever made, in creation order.
func (s *Server) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Charge, len(s.charges))
	for i, c := range s.charges {
		out[i] = c.charge
		out[i].Request = slices.Clone(c.charge.Request)
	}
	return out
}

// Emails returns every e-mail ever sent, in creation order.
func (s *Server) Emails() []Email {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Email, len(s.emails))
	for i, e := range s.emails {
		out[i] = e
		out[i].Request = slices.Clone(e.Request)
	}
	return out
}

// Requests returns every POST received, in the order they arrived, when Options.RecordRequests
// is set; nil otherwise.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
		out[i].Body = slices.Clone(r.Body)
	}
	return out
}

// AnswerCounts counts the recorded requests by answer (Request.Answer), as
// they stand now: cheaper than Requests for a caller that polls.
func (s *Server) AnswerCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.answerCounts)
}

// received records a POST that has arrived (its body read, so the server can act on it) and
// returns its record, or nil when requests are not recorded.
func (s *Server) received(r *http.Request, body []byte) *Request {
	if !s.record {
		return nil
	}
	req := &Request{Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: slices.Clone(body)}
	if s.sourceHeader != "" {
		req.Source = r.Header.Get(s.sourceHeader)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Received = s.now()
	s.requests = append(s.requests, req)
	return req
}

// answered records how req (from received; nil when not recording) was answered.
func (s *Server) answered(req *Request, status int, answer string) {
	if req == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answeredLocked(req, status, answer)
}

func (s *Server) answeredLocked(req *Request, status int, answer string) {
	if req != nil {
		req.Status, req.Answer = status, answer
		s.answerCounts[answer]++
	}
}

// Reset forgets every charge, e-mail, key and fault. A request in flight during Reset may still
// add its charge afterwards, but not its key.
func (s *Server) Reset() {
	s.mu.Lock()
	s.faults = Faults{}
	s.charges = nil
	s.byID = map[string]*chargeRecord{}
	s.keys = map[string]*keyEntry{}
	s.emails = nil
	s.requests = nil
	s.answerCounts = map[string]int{}
	s.mu.Unlock()
}

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	raw, obj, err := readObject(w, r)
	sent := s.received(r, raw)
	if err != nil {
		s.answered(sent, http.StatusBadRequest, AnswerInvalid)
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	canon, err := json.Marshal(obj)
	if err != nil {
		s.answered(sent, http.StatusBadRequest, AnswerInvalid)
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if err := validCharge(obj); err != nil {
		s.answered(sent, http.StatusBadRequest, AnswerInvalid)
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	log := s.log.With("path", "/charges", "key", KeyDigest(key))

	s.mu.Lock()
	var entry *keyEntry
	if key != "" && !s.faults.NoKeySupport {
		if e := s.liveKeyLocked(key); e != nil {
			switch {
			case !e.done:
				s.answeredLocked(sent, http.StatusConflict, AnswerInProgress)
				s.mu.Unlock()
				log.Info("fakepay: idempotency conflict, first request in flight")
				writeError(w, http.StatusConflict, "idempotency_conflict",
					"another request with this Idempotency-Key is still being processed; retry later")
			case e.canon != string(canon):
				s.answeredLocked(sent, http.StatusUnprocessableEntity, AnswerKeyReused)
				s.mu.Unlock()
				log.Info("fakepay: idempotency key reused with another body")
				writeError(w, http.StatusUnprocessableEntity, "idempotency_error",
					"keys for idempotent requests can only be used with the same parameters they were first used with")
			case s.fireLocked(&s.faults.RefuseReplay):
				s.answeredLocked(sent, http.StatusBadRequest, AnswerRefusedReplay)
				s.mu.Unlock()
				log.Info("fakepay: fault refuse_replay")
				writeError(w, http.StatusBadRequest, "invalid_request_error", "injected refusal of a repeated request")
			default:
				status, body := e.status, e.body
				s.answeredLocked(sent, status, AnswerReplayed)
				s.mu.Unlock()
				log.Debug("fakepay: replaying stored response", "status", status)
				w.Header().Set("Idempotent-Replayed", "true")
				writeRaw(w, status, body)
			}
			return
		}
		if race := s.faults.KeyRace; race > 0 {
			// The fault: the key was looked for, and is reserved only later; a twin arriving
			// in between finds it free too.
			s.mu.Unlock()
			time.Sleep(race)
			s.mu.Lock()
		}
		entry = &keyEntry{canon: string(canon), created: s.now()}
		s.keys[key] = entry
	}
	delay := s.faults.Delay
	s.mu.Unlock()

	if delay > 0 {
		// A client hanging up does not stop the processor: the request is already in, just as
		// with a real one, and that is what makes a client-side timeout an unknown outcome.
		time.Sleep(delay)
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}

	s.mu.Lock()
	if s.fireLocked(&s.faults.FailBeforeCommit) {
		if entry != nil && s.keys[key] == entry {
			delete(s.keys, key)
		}
		s.answeredLocked(sent, http.StatusInternalServerError, AnswerFailedBeforeCommit)
		s.mu.Unlock()
		log.Info("fakepay: fault fail_before_commit")
		writeError(w, http.StatusInternalServerError, "api_error", "injected failure before commit")
		return
	}
	now := s.now()
	c := Charge{
		ID:             "ch_" + s.randomIDLocked(),
		Object:         "charge",
		Status:         "succeeded",
		AmountMinor:    intField(obj, "amount_minor"),
		Currency:       stringField(obj, "currency"),
		InvoiceID:      stringField(obj, "invoice_id"),
		IdempotencyKey: key,
		Request:        raw,
		Created:        now.Unix(),
	}
	body, err := json.Marshal(c)
	if err != nil { // cannot happen: every field marshals
		s.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "api_error", err.Error())
		return
	}
	rec := &chargeRecord{charge: c, at: now, json: body}
	s.charges = append(s.charges, rec)
	s.byID[c.ID] = rec
	if entry != nil && s.keys[key] == entry {
		entry.done, entry.status, entry.body, entry.charge = true, http.StatusOK, body, rec
	}
	failAfter := s.fireLocked(&s.faults.FailAfterCommit)
	drop := !failAfter && s.fireLocked(&s.faults.DropAfterCommit)
	redirect := !failAfter && !drop && s.fireLocked(&s.faults.RedirectAfterCommit)
	refuse := !failAfter && !drop && !redirect && s.fireLocked(&s.faults.RefuseAfterCommit)
	status, answer := afterCommitAnswer(failAfter, drop, redirect, refuse)
	s.answeredLocked(sent, status, answer)
	hook := s.webhook
	s.mu.Unlock()
	s.announce(hook, c, body)

	log = log.With("charge", c.ID)
	switch {
	case failAfter:
		log.Info("fakepay: charge committed; fault fail_after_commit")
		writeError(w, http.StatusInternalServerError, "api_error", "injected failure after commit")
	case drop:
		log.Info("fakepay: charge committed; fault drop_after_commit")
		dropConnection(w)
	case redirect:
		log.Info("fakepay: charge committed; fault redirect_after_commit")
		w.Header().Set("Location", "/charges/"+c.ID)
		w.WriteHeader(http.StatusSeeOther)
	case refuse:
		log.Info("fakepay: charge committed; fault refuse_after_commit")
		writeError(w, http.StatusPaymentRequired, "card_error", "injected decline after the charge was made")
	default:
		log.Debug("fakepay: charge committed")
		writeRaw(w, http.StatusOK, body)
	}
}

// afterCommitAnswer is how a request that made its effect is answered, for the record.
func afterCommitAnswer(failAfter, drop, redirect, refuse bool) (int, string) {
	switch {
	case refuse:
		return http.StatusPaymentRequired, AnswerRefusedAfterCommit
	case failAfter:
		return http.StatusInternalServerError, AnswerFailedAfterCommit
	case drop:
		return 0, AnswerDropped
	case redirect:
		return http.StatusSeeOther, AnswerRedirected
	}
	return http.StatusOK, AnswerCreated
}

// liveKeyLocked returns the entry for key, forgetting it first if it has outlived the key
// retention. An entry still in flight is never forgotten.
func (s *Server) liveKeyLocked(key string) *keyEntry {
	e := s.keys[key]
	if e == nil {
		return nil
	}
	if ret := s.faults.KeyRetention; ret > 0 && e.done && s.now().Sub(e.created) >= ret {
		delete(s.keys, key)
		return nil
	}
	return e
}

func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query(); q.Has("idempotency_key") {
		s.chargeByKey(w, q.Get("idempotency_key"))
		return
	}
	s.mu.Lock()
	var buf bytes.Buffer
	buf.WriteString(`{"data":[`)
	for i, c := range s.charges {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(c.json)
	}
	buf.WriteString(`]}`)
	s.mu.Unlock()
	writeRaw(w, http.StatusOK, buf.Bytes())
}

func (s *Server) chargeByKey(w http.ResponseWriter, key string) {
	s.mu.Lock()
	var body []byte
	if key != "" && !s.faults.NoKeySupport {
		if e := s.liveKeyLocked(key); e != nil && e.done && e.charge != nil &&
			s.now().Sub(e.charge.at) >= s.faults.LookupLag && !s.fireLocked(&s.faults.LookupMiss) {
			body = e.charge.json
		}
	}
	s.mu.Unlock()
	if body == nil {
		writeError(w, http.StatusNotFound, "not_found", "no charge with this idempotency key")
		return
	}
	writeRaw(w, http.StatusOK, body)
}

func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	rec := s.byID[r.PathValue("id")]
	s.mu.Unlock()
	if rec == nil {
		writeError(w, http.StatusNotFound, "not_found", "no such charge")
		return
	}
	writeRaw(w, http.StatusOK, rec.json)
}

func (s *Server) createEmail(w http.ResponseWriter, r *http.Request) {
	raw, obj, err := readObject(w, r)
	rec := s.received(r, raw)
	if err != nil {
		s.answered(rec, http.StatusBadRequest, AnswerInvalid)
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	log := s.log.With("path", "/emails", "key", KeyDigest(key))
	s.mu.Lock()
	delay := s.faults.Delay
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	s.mu.Lock()
	if s.fireLocked(&s.faults.FailBeforeCommit) {
		s.answeredLocked(rec, http.StatusInternalServerError, AnswerFailedBeforeCommit)
		s.mu.Unlock()
		log.Info("fakepay: fault fail_before_commit")
		writeError(w, http.StatusInternalServerError, "api_error", "injected failure before commit")
		return
	}
	e := Email{
		ID:             "em_" + s.randomIDLocked(),
		Object:         "email",
		To:             stringField(obj, "to"),
		Subject:        stringField(obj, "subject"),
		IdempotencyKey: key,
		Request:        raw,
		Created:        s.now().Unix(),
	}
	s.emails = append(s.emails, e)
	failAfter := s.fireLocked(&s.faults.FailAfterCommit)
	drop := !failAfter && s.fireLocked(&s.faults.DropAfterCommit)
	redirect := !failAfter && !drop && s.fireLocked(&s.faults.RedirectAfterCommit)
	refuse := !failAfter && !drop && !redirect && s.fireLocked(&s.faults.RefuseAfterCommit)
	status, answer := afterCommitAnswer(failAfter, drop, redirect, refuse)
	s.answeredLocked(rec, status, answer)
	s.mu.Unlock()

	log = log.With("email", e.ID)
	switch {
	case failAfter:
		log.Info("fakepay: e-mail sent; fault fail_after_commit")
		writeError(w, http.StatusInternalServerError, "api_error", "injected failure after commit")
	case drop:
		log.Info("fakepay: e-mail sent; fault drop_after_commit")
		dropConnection(w)
	case redirect:
		log.Info("fakepay: e-mail sent; fault redirect_after_commit")
		w.Header().Set("Location", "/emails/"+e.ID)
		w.WriteHeader(http.StatusSeeOther)
	case refuse:
		log.Info("fakepay: e-mail sent; fault refuse_after_commit")
		writeError(w, http.StatusPaymentRequired, "card_error", "injected refusal after the e-mail was sent")
	default:
		log.Debug("fakepay: e-mail sent")
		writeJSON(w, http.StatusOK, e)
	}
}

func (s *Server) listEmails(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Data []Email `json:"data"`
	}{s.Emails()})
}

func (s *Server) getFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid faults: "+err.Error())
		return
	}
	s.SetFaults(f)
	s.log.Info("fakepay: faults set", "faults", string(b))
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) deleteFaults(w http.ResponseWriter, _ *http.Request) {
	s.SetFaults(Faults{})
	s.log.Info("fakepay: faults cleared")
	writeJSON(w, http.StatusOK, Faults{})
}

func (s *Server) reset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	s.log.Info("fakepay: reset")
	writeRaw(w, http.StatusOK, []byte(`{}`))
}

// fireLocked consumes one firing of t if it fires.
func (s *Server) fireLocked(t *Trigger) bool {
	if t.Next > 0 {
		t.Next--
		return true
	}
	return t.Rate > 0 && s.rng.Float64() < t.Rate
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func (s *Server) randomIDLocked() string {
	b := make([]byte, 24)
	for i := range b {
		b[i] = idAlphabet[s.rng.IntN(len(idAlphabet))]
	}
	return string(b)
}

// KeyDigest returns a short, stable digest of an idempotency key for logs, which must never carry
// the key itself; "" for no key.
func KeyDigest(key string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// readObject reads the request body, which must be a JSON object. Numbers stay json.Number so
// that re-marshalling gives a canonical form without float rounding.
func readObject(w http.ResponseWriter, r *http.Request) (json.RawMessage, map[string]any, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("reading body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, nil, errors.New("body must be a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("body must be a single JSON object")
	}
	return json.RawMessage(raw), obj, nil
}

// validCharge is the processor's validation of a charge: an amount_minor, when there is one, is
// a positive integer. What it refuses is refused before anything is stored (400), so a request
// that must be refused (`opledger probe --invalid-args`) has one to aim at.
func validCharge(obj map[string]any) error {
	if _, ok := obj["amount_minor"]; ok && intField(obj, "amount_minor") <= 0 {
		return errors.New("amount_minor must be a positive integer")
	}
	return nil
}

func stringField(obj map[string]any, name string) string {
	s, _ := obj[name].(string)
	return s
}

func intField(obj map[string]any, name string) int64 {
	switch v := obj[name].(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		if f, err := v.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			return int64(f)
		}
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return 0
}

// dropConnection resets the client's connection without a response. Linger 0 makes the close
// send a TCP RST, so the client sees "connection reset" rather than a clean EOF.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// No hijacking (HTTP/2): aborting the handler still sends no response.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "api_error", err.Error())
		return
	}
	writeRaw(w, status, b)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, errorBody{Error: APIErrorDetail{Type: typ, Message: msg}})
}

type errorBody struct {
	Error APIErrorDetail `json:"error"`
}

// APIErrorDetail is the "error" member of every error the server answers.
type APIErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message,omitempty"`
}
