package ledger_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/tool"
)

// This file is the world TestModel (model_test.go) runs in: a scripted HTTP
// downstream that gives each request the next answer a step scripted for
// it, and records every request it receives and every effect it performs;
// the database, the two servers and the tools file; and small helpers.

// answer is what the scripted downstream does with one request.
type answer int

const (
	ansOK              answer = iota // performs the effect (replays it where keys dedupe) and answers 200
	ansRefused                       // a status the tool declares definitive (400): nothing performed
	ansUndeclared                    // a 4xx the tool does not declare definitive: nothing performed
	ansUndeclaredAfter               // the same after performing the effect
	ansRedirect                      // 303: nothing performed
	ansRedirectAfter                 // 303 after performing the effect
	ans5xxBefore                     // 502: nothing performed
	ans5xxAfter                      // 500 after performing the effect
	ansDropAfter                     // performs the effect, then drops the connection unanswered
	ansSlow                          // no answer before the executor's timeout: nothing performed
	ansSlowAfter                     // performs the effect, then no answer before the executor's timeout
	ansConnRefused                   // the connection is refused: nothing is sent
	ansBlock                         // held until a Release step says which answer it gets
)

var answerNames = [...]string{"200", "400 definitive", "4xx undeclared", "4xx undeclared after effect",
	"303", "303 after effect", "502 before effect", "500 after effect", "dropped after effect",
	"slow", "slow after effect", "connection refused", "held"}

func (a answer) String() string { return answerNames[a] }

// performs reports whether the downstream acts on a request given this
// answer: creates the effect, or replays the first one where keys dedupe.
func (a answer) performs() bool {
	switch a {
	case ansOK, ansUndeclaredAfter, ansRedirectAfter, ans5xxAfter, ansDropAfter, ansSlowAfter:
		return true
	}
	return false
}

// lookupAnswer is what the downstream's lookup by key answers.
type lookupAnswer int

const (
	lookTruth lookupAnswer = iota // the effect under the key, or 404
	lookLag                       // 404 whatever it has (a replica behind)
	lookError                     // 500
)

var lookupNames = [...]string{"truthful", "lagging 404", "500"}

func (l lookupAnswer) String() string { return lookupNames[l] }

// dsTool is what the downstream knows of one tool's endpoint.
type dsTool struct {
	name string
	// dedupes: a second request with a key that has an effect replays it;
	// otherwise every performing request is a new effect.
	dedupes bool
	// undeclared is the 4xx status the tool does not declare definitive.
	undeclared int
}

// dsRequest is one request that reached the downstream.
type dsRequest struct {
	seq       int
	tool, key string
	body      []byte
	// answer is the one it got; for a held request, the one it was released with.
	answer answer
	// dbTime is the database's clock when it arrived.
	dbTime time.Time
	// effect is the id of the effect it created or replayed; "" if none.
	effect  string
	created bool
}

// held is a request the downstream holds until a step releases it.
type held struct {
	req     *dsRequest
	release chan answer
	done    chan struct{}
}

// downstream is the scripted HTTP downstream: one server takes the sends
// (POST /<tool>), another the lookups (GET /<tool>?idempotency_key=), and
// the executors' client dials through it so that a scripted refusal refuses
// the connection itself.
type downstream struct {
	tools        map[string]dsTool // by path
	send, lookup *httptest.Server
	client       *http.Client
	clock        func() time.Time

	mu         sync.Mutex
	down       bool
	queue      []answer
	lookups    []lookupAnswer
	consumed   int // requests tried (refused connections included) since the last script
	lookedUp   int
	requests   []*dsRequest
	effects    map[string][]string // by key, in order: more than one is a second effect
	nextEffect int
	unexpected []string
	arrived    chan *held
}

func newDownstream(t *testing.T, tools []dsTool, clock func() time.Time) *downstream {
	d := &downstream{tools: map[string]dsTool{}, clock: clock, effects: map[string][]string{}, arrived: make(chan *held, 64)}
	for _, tl := range tools {
		d.tools["/"+tl.name] = tl
	}
	d.send = httptest.NewServer(http.HandlerFunc(d.serveSend))
	d.lookup = httptest.NewServer(http.HandlerFunc(d.serveLookup))
	t.Cleanup(d.lookup.Close)
	t.Cleanup(d.send.Close)
	sendAddr := strings.TrimPrefix(d.send.URL, "http://")
	var dialer net.Dialer
	d.client = &http.Client{Transport: &http.Transport{
		// A connection per request: every request dials, so a scripted
		// refusal is a refused connection, and no request meets a pooled
		// connection the server is closing.
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == sendAddr && d.takeRefusal() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}}
	return d
}

// reset forgets everything of the previous check.
func (d *downstream) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queue, d.lookups, d.consumed, d.lookedUp, d.down = nil, nil, 0, 0, false
	d.requests, d.effects, d.unexpected = nil, map[string][]string{}, nil
	for len(d.arrived) > 0 {
		<-d.arrived
	}
}

// script makes answers and lookups the next ones, in order, drops any
// left over, and starts counting what is taken afresh.
func (d *downstream) script(answers []answer, lookups ...lookupAnswer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queue, d.consumed = append([]answer(nil), answers...), 0
	d.lookups, d.lookedUp = append([]lookupAnswer(nil), lookups...), 0
}

// used reports how many scripted answers and lookups were taken since they
// were scripted, and the complaints about requests nobody scripted.
func (d *downstream) used() (sends, lookups int, unexpected []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.consumed, d.lookedUp, append([]string(nil), d.unexpected...)
}

// setDown makes the downstream refuse every connection (down) or only
// those scripted to be refused.
func (d *downstream) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
}

func (d *downstream) takeRefusal() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	scripted := len(d.queue) > 0 && d.queue[0] == ansConnRefused
	if !scripted && !d.down {
		return false
	}
	if scripted {
		d.queue = d.queue[1:]
	}
	d.consumed++
	return true
}

// effectsOf returns the ids of the effects performed under key.
func (d *downstream) effectsOf(key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.effects[key]...)
}

// requestsOf returns the requests that reached the downstream with key, in
// order of arrival.
func (d *downstream) requestsOf(key string) []dsRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []dsRequest
	for _, r := range d.requests {
		if r.key == key {
			out = append(out, *r)
		}
	}
	return out
}

func (d *downstream) complain(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unexpected = append(d.unexpected, fmt.Sprintf(format, args...))
}

func (d *downstream) serveSend(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	tl, ok := d.tools[r.URL.Path]
	d.mu.Lock()
	if !ok || r.Method != http.MethodPost || len(d.queue) == 0 {
		// Recorded as a request that reached the downstream (nothing
		// performed), for the checks after the step.
		d.unexpected = append(d.unexpected, fmt.Sprintf("%s %s: a request no step scripted an answer for", r.Method, r.URL.Path))
		d.requests = append(d.requests, &dsRequest{seq: len(d.requests) + 1, tool: tl.name, key: r.Header.Get("Idempotency-Key"),
			body: body, answer: ans5xxBefore, dbTime: d.clock()})
		d.mu.Unlock()
		http.Error(w, `{"error":"unscripted"}`, http.StatusBadGateway)
		return
	}
	a := d.queue[0]
	d.queue = d.queue[1:]
	d.consumed++
	req := &dsRequest{seq: len(d.requests) + 1, tool: tl.name, key: r.Header.Get("Idempotency-Key"), body: body, answer: a, dbTime: d.clock()}
	d.requests = append(d.requests, req)
	d.mu.Unlock()

	if a == ansBlock {
		h := &held{req: req, release: make(chan answer, 1), done: make(chan struct{})}
		defer close(h.done)
		d.arrived <- h
		select {
		case a = <-h.release:
		case <-r.Context().Done():
			d.complain("a held %s request was abandoned by its executor (its timeout passed): the machine is too slow for the scripted timeouts", tl.name)
			return
		}
	}
	d.mu.Lock()
	req.answer = a
	if a.performs() {
		if effs := d.effects[req.key]; tl.dedupes && len(effs) > 0 {
			req.effect = effs[0]
		} else {
			d.nextEffect++
			req.effect, req.created = fmt.Sprintf("fx_%d", d.nextEffect), true
			d.effects[req.key] = append(effs, req.effect)
		}
	}
	d.mu.Unlock()

	if a != ansSlow && a != ansSlowAfter && r.Context().Err() != nil {
		// Not the ledger's doing: the executor's timeout passed before a
		// prompt answer (a machine too loaded for the scripted timeouts).
		d.complain("the executor gave up on a %s request before its prompt answer %v", tl.name, a)
	}
	switch a {
	case ansOK:
		writeJSON(w, http.StatusOK, map[string]any{"id": req.effect, "status": "succeeded"})
	case ansRefused:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "refused"})
	case ansUndeclared, ansUndeclaredAfter:
		writeJSON(w, tl.undeclared, map[string]any{"error": "undeclared"})
	case ansRedirect, ansRedirectAfter:
		w.Header().Set("Location", "/elsewhere")
		w.WriteHeader(http.StatusSeeOther)
	case ans5xxBefore:
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": "bad gateway"})
	case ans5xxAfter:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "internal"})
	case ansDropAfter:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	case ansSlow, ansSlowAfter:
		// Answer only after the executor gave up (or, should it never, after
		// a bound that fails the step that scripted it).
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
			d.complain("the executor waited two minutes for a slow %s answer", tl.name)
		}
	default:
		d.complain("answer %v cannot be given to a request", a)
	}
}

func (d *downstream) serveLookup(w http.ResponseWriter, r *http.Request) {
	tl, ok := d.tools[r.URL.Path]
	key := r.URL.Query().Get("idempotency_key")
	d.mu.Lock()
	if !ok || r.Method != http.MethodGet || len(d.lookups) == 0 {
		d.unexpected = append(d.unexpected, fmt.Sprintf("%s %s: a lookup no step scripted an answer for", r.Method, r.URL.Path))
		d.mu.Unlock()
		http.Error(w, `{"error":"unscripted"}`, http.StatusServiceUnavailable)
		return
	}
	l := d.lookups[0]
	d.lookups = d.lookups[1:]
	d.lookedUp++
	effs := d.effects[key]
	d.mu.Unlock()
	switch {
	case l == lookError:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "internal"})
	case l == lookTruth && len(effs) > 0:
		writeJSON(w, http.StatusOK, map[string]any{"id": effs[0], "status": "succeeded", "tool": tl.name})
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "not found"})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// defaultFlag sets a flag that neither the command line nor its
// environment variable set, for the test's duration.
func defaultFlag(t *testing.T, name, env string, value int) {
	set := os.Getenv(env) != ""
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	f := flag.Lookup(name)
	if set || f == nil {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(value)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// The tools files of the model: modelPolicy the one every check starts
// with, tightPolicy the one a server is restarted with mid-run (see
// toolModel.tight*). Each server runs one of them, so both are in force at
// once during a rolling change.
const (
	modelPolicy = 0
	tightPolicy = 1
)

var policyNames = [...]string{"model", "tightened"}

func modelToolsYAML(sendURL, lookupURL string, policy int) []byte {
	var b strings.Builder
	b.WriteString("tools:\n")
	for _, tl := range modelTools {
		fmt.Fprintf(&b, "  - name: %s\n    version: \"1\"\n    effect: side_effect\n", tl.name)
		if policy == tightPolicy && tl.tightDeny != "" {
			fmt.Fprintf(&b, "    deny:\n      - name: tightened\n        when: %s\n        message: refused by the tightened policy\n", tl.tightDeny)
		}
		if tl.approval || policy == tightPolicy && tl.tightApproval {
			fmt.Fprintf(&b, "    approval:\n      required: true\n      ttl: %s\n", modelTTL)
			if tl.approvers > 1 {
				fmt.Fprintf(&b, "      approvers: %d\n", tl.approvers)
			}
			if tl.editable {
				b.WriteString("      editable: [amount_minor]\n")
			}
		}
		b.WriteString(`    args_schema:
      type: object
      properties:
        invoice_id: {type: string}
        amount_minor: {type: integer}
      required: [invoice_id, amount_minor]
      additionalProperties: false
`)
		fmt.Fprintf(&b, "    executor:\n      type: http\n      url: %s/%s\n      timeout: %s\n      dedupes_keys: %t\n      max_attempts: %d\n      external_ref_field: id\n",
			sendURL, tl.name, tl.timeout, tl.dedupes, tl.attempts)
		if tl.definitive != "" {
			fmt.Fprintf(&b, "      definitive_statuses: %s\n", tl.definitive)
		}
		if tl.lookup {
			fmt.Fprintf(&b, "      lookup_url: %s/%s?idempotency_key={key}\n      lookup_consistent: true\n", lookupURL, tl.name)
		}
	}
	return []byte(b.String())
}

// modelWorld is what every check shares: one database, two servers, the
// scripted downstream, and the database's clock.
type modelWorld struct {
	env     *harness.Env
	servers []*harness.Server
	ds      *downstream
	cluster *pgcluster.Cluster
	offset  atomic.Int64 // the database clock's offset, in nanoseconds; only grows
	seq     atomic.Int64
	stats   *modelStats
	logger  *slog.Logger
	// policy is the tools file each server runs (modelPolicy or
	// tightPolicy); files are both tools files, and digests the policy
	// digest of each tool under each.
	policy  []int
	files   [2][]byte
	digests [2]map[string]string
}

func newModelWorld(t *testing.T) *modelWorld {
	dbURL, cluster := pgtest.NewSteppedClockDatabase(t)
	w := &modelWorld{cluster: cluster, stats: &modelStats{n: map[string]int{}}}
	w.ds = newDownstream(t, dsTools(), func() time.Time { return time.Now().Add(time.Duration(w.offset.Load())) })
	for p := range w.files {
		w.files[p] = modelToolsYAML(w.ds.send.URL, w.ds.lookup.URL, p)
		reg, err := tool.Parse(w.files[p], func(string) string { return "" })
		if err != nil {
			t.Fatalf("the %s tools file: %v", policyNames[p], err)
		}
		w.digests[p] = map[string]string{}
		for _, tl := range modelTools {
			tt, err := reg.Lookup(tl.name, "1")
			if err != nil {
				t.Fatal(err)
			}
			w.digests[p][tl.name] = tt.Policy.Digest
		}
	}
	w.env = harness.New(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: w.files[modelPolicy]})
	// Stale commits and takeovers are what this test stages: only errors
	// are worth printing.
	w.logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	for range 2 {
		w.servers = append(w.servers, w.startServer(modelPolicy))
		w.policy = append(w.policy, modelPolicy)
	}
	return w
}

func (w *modelWorld) startServer(policy int) *harness.Server {
	return w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{MinLease: modelLease},
		NoReconciler: true, HTTPClient: w.ds.client, Logger: w.logger, ToolsYAML: w.files[policy]})
}

// restart stops server srv (gracefully: nothing of it is in flight) and
// starts it again with the policy's tools file.
func (w *modelWorld) restart(srv, policy int) {
	w.servers[srv].Stop()
	w.servers[srv] = w.startServer(policy)
	w.policy[srv] = policy
}

func dsTools() []dsTool {
	var out []dsTool
	for _, tl := range modelTools {
		out = append(out, dsTool{name: tl.name, dedupes: tl.dedupes, undeclared: tl.undeclared})
	}
	return out
}

// modelStats counts what the runs staged, for the log.
type modelStats struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *modelStats) add(k string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[k] += n
}

func (s *modelStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.n))
	for k := range s.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("model test staged (shrinking runs included):")
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-32s %d", k, s.n[k])
	}
	return b.String()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func firstAnswer(reqs []dsRequest) string {
	if len(reqs) == 0 {
		return "(no request reached it)"
	}
	return reqs[0].answer.String()
}

func stateOf(op *opledgerv1.Operation) ledger.State {
	return ledger.State(strings.TrimPrefix(op.GetState().String(), "STATE_"))
}

// statusReason returns a gRPC error's code and ErrorInfo reason.
func statusReason(err error) (codes.Code, string) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason()
		}
	}
	return st.Code(), ""
}

// otherFingerprint is a well-formed fingerprint that is not fp.
func otherFingerprint(fp string) string {
	last := fp[len(fp)-1]
	if last == '0' {
		return fp[:len(fp)-1] + "1"
	}
	return fp[:len(fp)-1] + "0"
}
