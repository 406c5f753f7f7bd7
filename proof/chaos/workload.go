package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// The workload's knobs.
const (
	// callTimeout bounds every RPC: a SIGSTOPped server answers nothing.
	callTimeout = 4 * time.Second
	// executeWait is ExecuteRequest.wait: a repeat waits for the outcome.
	executeWait = 2 * time.Second
	// opTimeout bounds the workload's effort on one operation; whatever
	// is left is the settle phase's.
	opTimeout = 30 * time.Second
	// lostRate is the share of calls whose response the client throws
	// away at a random moment (it cancels the call) before retrying.
	lostRate = 0.12
	// twinRate is the share of calls sent twice at once to two servers.
	twinRate = 0.12
	// laterRate is the share of executions the agent leaves for later when
	// the downstream could not be reached (nothing sent), coming back 5–20s
	// later, when an approval with a short TTL has lapsed.
	laterRate = 0.2
	// comeBackTimeout bounds such a later execution.
	comeBackTimeout = 15 * time.Second
	// mismatchRate is the share of approvals first attempted with a
	// fingerprint that is not the operation's: the ledger must refuse it.
	mismatchRate = 0.03
	// maxRenewals bounds how often an agent has a lapsed approval renewed
	// for one operation.
	maxRenewals = 3
	// burstRate is the share of operations that start a burst of
	// concurrent calls on one budget or one business identity
	// (worker.runBurst); burstMin and burstMax bound its size.
	burstRate          = 0.10
	burstMin, burstMax = 3, 5
	// deferRate is the share of pay_policy operations the agent prepares
	// and executes only 3–20s later, so that some prepared under the old
	// policy are executed under the tightened one (Runner.rollPolicy).
	deferRate = 0.5
)

// Intents: what the workload means to do with an operation that needs
// approval.
const (
	intentRun   = "run"   // approve and execute
	intentDeny  = "deny"  // the approver denies it
	intentLeave = "leave" // nobody decides; it stays AWAITING_APPROVAL
)

// trackedOp is one operation the workload started, known by its
// idempotency key even when Prepare never answered.
type trackedOp struct {
	key, tool, intent string
	args              *structpb.Struct

	mu          sync.Mutex
	id          string
	fingerprint string
	renewals    int
	// refused is the reason a budget or the business identity refused the
	// Prepare (no operation exists for the key): the settle phase leaves it.
	refused string
}

func (t *trackedOp) setOp(op *opledgerv1.Operation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.id == "" {
		t.id, t.fingerprint = op.GetId(), op.GetFingerprint()
	}
}

func (t *trackedOp) opID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id
}

func (r *Runner) track(t *trackedOp) {
	r.trackedMu.Lock()
	defer r.trackedMu.Unlock()
	r.tracked[t.key] = t
}

func (r *Runner) trackedOps() []*trackedOp {
	r.trackedMu.Lock()
	defer r.trackedMu.Unlock()
	out := make([]*trackedOp, 0, len(r.tracked))
	for _, t := range r.tracked {
		out = append(out, t)
	}
	return out
}

// worker is one agent: it runs full flows one operation after another.
type worker struct {
	r    *Runner
	name string
	rng  *rand.Rand
	// later are operations the agent comes back to: an unknown outcome is
	// asked about again some seconds later, as an agent resuming a
	// workflow would, by which time a reconciler may have made it READY.
	later []lateCheck
}

type lateCheck struct {
	t   *trackedOp
	due time.Time
	// resume: execute to an outcome again, renewing a lapsed approval.
	resume bool
}

func newWorker(r *Runner, i int) *worker {
	seed := r.opts.Seed + uint64(i)*0x9e3779b97f4a7c15
	return &worker{r: r, name: fmt.Sprintf("w%d", i), rng: rand.New(rand.NewPCG(seed, uint64(i)))}
}

// loop starts operations until work ends; each operation runs to its end
// (or opTimeout) under life, which ends only when the run is aborted.
func (w *worker) loop(work, life context.Context) {
	for work.Err() == nil {
		w.comeBack(life)
		w.runOp(life)
	}
}

// comeBack executes again the operations whose time to be looked at has
// come: one Execute for an unknown outcome, or a whole execution (with a
// renewed approval if it lapsed meanwhile) for one the downstream could
// not be reached for.
func (w *worker) comeBack(life context.Context) {
	now := time.Now()
	var due []lateCheck
	kept := w.later[:0]
	for _, c := range w.later {
		if now.Before(c.due) {
			kept = append(kept, c)
		} else {
			due = append(due, c)
		}
	}
	w.later = kept
	for _, c := range due {
		if c.resume {
			w.execute(life, c.t, time.Now().Add(comeBackTimeout))
			continue
		}
		w.call(life, "execute", w.server(nil), c.t, w.r.agent, executeRPC(c.t.opID(), executeWait))
	}
}

func (w *worker) chance(p float64) bool { return w.rng.Float64() < p }

func (w *worker) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Float64()*float64(hi-lo))
}

// server picks a random server, other than not when possible.
func (w *worker) server(not *server) *server {
	for {
		s := w.r.servers[w.rng.IntN(len(w.r.servers))]
		if s != not || len(w.r.servers) == 1 {
			return s
		}
	}
}

func (w *worker) pickTool() string {
	x := w.rng.Float64()
	bursts := burstRate
	if c := w.r.control; c != nil && c.BurstRate > 0 {
		bursts = c.BurstRate
	}
	if x < bursts {
		// A burst on one budget or identity: a tenth of the picks (or the
		// control's share), the other tools' shares among themselves
		// unchanged.
		switch y := x / bursts; {
		case y < 0.4:
			return ToolPayCapped
		case y < 0.5:
			return ToolPayMetered
		case y < 0.6:
			return ToolPayPooled
		}
		return ToolPayOnce
	}
	x = (x - bursts) / (1 - bursts)
	switch {
	case x < 0.25:
		return ToolPay
	case x < 0.43:
		return ToolEmail
	case x < 0.58:
		return ToolPayRetained
	case x < 0.73:
		return ToolPayDirect
	case x < 0.88:
		return ToolPayNoKey
	}
	return ToolPayPolicy
}

func toolArgs(tool string, n int64) *structpb.Struct {
	var m map[string]any
	if tool == ToolEmail {
		m = map[string]any{"to": fmt.Sprintf("customer-%d@example.com", n), "subject": fmt.Sprintf("Invoice %d", n), "body": "Your invoice was paid."}
	} else {
		m = map[string]any{"invoice_id": fmt.Sprintf("INV-%d", n), "amount_minor": 100 + n%9900, "currency": "EUR"}
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err) // static shapes: cannot fail
	}
	return s
}

// authCtx authenticates calls made under ctx with an API key.
func authCtx(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

func stateName(op *opledgerv1.Operation) string {
	return strings.TrimPrefix(op.GetState().String(), "STATE_")
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// ruleRefusal is the reason when err is a refusal by a budget
// (LIMIT_EXCEEDED) or by a business identity (OPERATION_DUPLICATE), and
// counts it; "" otherwise.
func (r *Runner) ruleRefusal(err error) string {
	switch reason := reasonOf(status.Convert(err)); reason {
	case "LIMIT_EXCEEDED":
		r.limitRefused.Add(1)
		return reason
	case "OPERATION_DUPLICATE":
		r.identityRefused.Add(1)
		return reason
	}
	return ""
}

// retryable reports failures a client should retry: the server, the
// database or the network was down or slow, or the client gave up.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.Internal, codes.Unknown, codes.ResourceExhausted:
		return true
	}
	return false
}

// answer is what one call returned.
type answer struct {
	op       *opledgerv1.Operation
	replayed bool
	err      error
}

type rpc func(ctx context.Context, c opledgerv1.LedgerServiceClient) (*opledgerv1.Operation, bool, error)

// call makes one recorded RPC. With probability lostRate (when mayLose)
// the client abandons it at a random moment: the response, if any came, is
// lost, as on a broken connection.
func (r *Runner) call(life context.Context, process, f string, s *server, t *trackedOp, opID string, cred string, lose time.Duration, fn rpc) answer {
	id := r.hist.NextCall()
	tool, key := "", ""
	if t != nil {
		tool, key = t.tool, KeyDigest(t.key)
	}
	r.record(Event{Type: EventInvoke, Process: process, Call: id, F: f, Server: s.idx, Tool: tool, Key: key, Op: opID})
	ctx, cancel := context.WithTimeout(life, callTimeout)
	defer cancel()
	if lose > 0 {
		tm := time.AfterFunc(lose, cancel)
		defer tm.Stop()
	}
	ctx = authCtx(ctx, cred)
	if f == "prepare" && t != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", t.key)
	}
	op, replayed, err := fn(ctx, s.client)
	if err != nil {
		st := status.Convert(err)
		e := Event{Type: EventFail, Process: process, Call: id, F: f, Server: s.idx, Tool: tool, Key: key, Op: opID,
			Code: st.Code().String(), Reason: reasonOf(st), Detail: st.Message()}
		if lose > 0 && life.Err() == nil && st.Code() == codes.Canceled {
			e.Detail = "lost: the client abandoned the call after " + lose.Round(time.Millisecond).String()
		}
		if len(e.Detail) > 300 {
			e.Detail = e.Detail[:300]
		}
		r.record(e)
		return answer{err: err}
	}
	r.record(Event{Type: EventOK, Process: process, Call: id, F: f, Server: s.idx, Tool: tool, Key: key, Op: op.GetId(),
		State: stateName(op), Ref: op.GetExternalRef(), Replayed: replayed})
	return answer{op: op, replayed: replayed}
}

// call is Runner.call with this worker's random lost responses.
func (w *worker) call(life context.Context, f string, s *server, t *trackedOp, cred string, fn rpc) answer {
	var lose time.Duration
	if w.chance(lostRate) {
		lose = w.dur(time.Millisecond, 400*time.Millisecond)
	}
	return w.r.call(life, w.name, f, s, t, t.opID(), cred, lose, fn)
}

// twice makes the call, and with probability twinRate a concurrent twin
// on another server, and returns the answers.
func (w *worker) twice(life context.Context, f string, t *trackedOp, cred string, fn rpc) []answer {
	s := w.server(nil)
	if !w.chance(twinRate) {
		return []answer{w.call(life, f, s, t, cred, fn)}
	}
	n := 2 + w.rng.IntN(2)
	out := make([]answer, n)
	losses := make([]time.Duration, n)
	servers := make([]*server, n)
	for i := range n {
		servers[i] = w.server(s)
		if w.chance(lostRate) {
			losses[i] = w.dur(time.Millisecond, 400*time.Millisecond)
		}
	}
	servers[0] = s
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = w.r.call(life, w.name, f, servers[i], t, t.opID(), cred, losses[i], fn)
		}()
	}
	wg.Wait()
	return out
}

func prepareRPC(t *trackedOp) rpc {
	return func(ctx context.Context, c opledgerv1.LedgerServiceClient) (*opledgerv1.Operation, bool, error) {
		resp, err := c.Prepare(ctx, &opledgerv1.PrepareRequest{Tool: t.tool, Args: t.args})
		return resp.GetOperation(), resp.GetReplayed(), err
	}
}

func approveRPC(id, fp string, d opledgerv1.Decision) rpc {
	return func(ctx context.Context, c opledgerv1.LedgerServiceClient) (*opledgerv1.Operation, bool, error) {
		resp, err := c.Approve(ctx, &opledgerv1.ApproveRequest{OperationId: id, Fingerprint: fp, Decision: d, Reason: "chaos"})
		return resp.GetOperation(), false, err
	}
}

func executeRPC(id string, wait time.Duration) rpc {
	return func(ctx context.Context, c opledgerv1.LedgerServiceClient) (*opledgerv1.Operation, bool, error) {
		resp, err := c.Execute(ctx, &opledgerv1.ExecuteRequest{OperationId: id, Wait: durationpb.New(wait)})
		return resp.GetOperation(), resp.GetReplayed(), err
	}
}

func getRPC(id string) rpc {
	return func(ctx context.Context, c opledgerv1.LedgerServiceClient) (*opledgerv1.Operation, bool, error) {
		resp, err := c.Get(ctx, &opledgerv1.GetRequest{OperationId: id})
		return resp.GetOperation(), false, err
	}
}

func reconcileRPC(id string) rpc {
	return func(ctx context.Context, c opledgerv1.LedgerServiceClient) (*opledgerv1.Operation, bool, error) {
		resp, err := c.Reconcile(ctx, &opledgerv1.ReconcileRequest{OperationId: id})
		return resp.GetOperation(), false, err
	}
}

// backoff sleeps a little before a retry; false when life ended.
func (w *worker) backoff(life context.Context, attempt int) bool {
	d := min(50*time.Millisecond<<min(attempt, 4), 800*time.Millisecond)
	return sleepCtx(life, w.dur(d/2, d))
}

// burstTool reports the tools the workload calls in bursts.
func burstTool(tool string) bool {
	return tool == ToolPayCapped || tool == ToolPayMetered || tool == ToolPayPooled || tool == ToolPayOnce
}

// runBurst is several agents acting at once on one budget or one business
// identity, each under its own idempotency key and on its own server:
// pay_capped for one new customer (whose limit admits customerCount at
// most), pay_metered or pay_pooled on the tenant's budgets, or pay_once for one invoice
// (one operation at most). Each runs the one-operation flow (Prepare with
// twins and lost answers, then Execute); a refusal by the budget or the
// identity ends it.
func (w *worker) runBurst(life context.Context, tool string) {
	r := w.r
	group := r.opSeq.Load()
	n := burstMin + w.rng.IntN(burstMax-burstMin+1)
	amount := 1000 + w.rng.Int64N(9000)
	var wg sync.WaitGroup
	for i := range n {
		seq := r.opSeq.Add(1)
		m := map[string]any{"invoice_id": fmt.Sprintf("INV-%d", seq), "amount_minor": 1000 + w.rng.Int64N(9000), "currency": "EUR"}
		switch tool {
		case ToolPayCapped:
			m["customer_id"] = fmt.Sprintf("cust-%s-%d", r.runID, group)
		case ToolPayOnce:
			// The same invoice and amount: one business operation.
			m["invoice_id"], m["amount_minor"] = fmt.Sprintf("ONCE-%s-%d", r.runID, group), amount
		}
		args, err := structpb.NewStruct(m)
		if err != nil {
			panic(err) // static shapes: cannot fail
		}
		t := &trackedOp{key: fmt.Sprintf("chaos-%s-%d", r.runID, seq), tool: tool, args: args, intent: intentRun}
		r.track(t)
		agent := &worker{r: r, name: fmt.Sprintf("%s.%d", w.name, i+1), rng: rand.New(rand.NewPCG(w.rng.Uint64(), uint64(seq)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(opTimeout)
			if agent.prepare(life, t, deadline) {
				agent.execute(life, t, deadline)
			}
		}()
	}
	wg.Wait()
}

// runOp runs one operation's full flow.
func (w *worker) runOp(life context.Context) {
	r := w.r
	tool := w.pickTool()
	if burstTool(tool) {
		w.runBurst(life, tool)
		return
	}
	n := r.opSeq.Add(1)
	t := &trackedOp{key: fmt.Sprintf("chaos-%s-%d", r.runID, n), tool: tool, args: toolArgs(tool, n), intent: intentRun}
	if needsApproval(tool) {
		switch x := w.rng.Float64(); {
		case x < 0.02:
			t.intent = intentDeny
		case x < 0.04:
			t.intent = intentLeave
		}
	}
	r.track(t)
	deadline := time.Now().Add(opTimeout)
	if !w.prepare(life, t, deadline) {
		return
	}
	id := t.opID()
	if tool == ToolPayPolicy && w.chance(deferRate) {
		// Executed later, perhaps under another policy: an agent that
		// prepares now and acts after a while.
		w.later = append(w.later, lateCheck{t: t, due: time.Now().Add(w.dur(3*time.Second, 20*time.Second)), resume: true})
		return
	}
	if needsApproval(tool) {
		switch t.intent {
		case intentLeave:
			w.call(life, "execute", w.server(nil), t, r.agent, executeRPC(id, 0))
			return
		case intentDeny:
			if w.approve(life, t, opledgerv1.Decision_DECISION_DENY, deadline) {
				w.call(life, "execute", w.server(nil), t, r.agent, executeRPC(id, 0))
			}
			return
		}
		if !w.approve(life, t, opledgerv1.Decision_DECISION_APPROVE, deadline) {
			return
		}
	}
	if !w.execute(life, t, deadline) {
		return
	}
	// Repeats after the outcome: a retrying agent, a second model, a lost
	// answer. Each must agree with what was already said.
	if w.chance(0.15) {
		w.call(life, "execute", w.server(nil), t, r.agent, executeRPC(id, executeWait))
	}
	if w.chance(0.10) {
		w.call(life, "prepare", w.server(nil), t, r.agent, prepareRPC(t))
	}
	if w.chance(0.10) {
		w.call(life, "get", w.server(nil), t, r.agent, getRPC(id))
	}
}

func (w *worker) prepare(life context.Context, t *trackedOp, deadline time.Time) bool {
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		retry, refused := false, ""
		for _, a := range w.twice(life, "prepare", t, w.r.agent, prepareRPC(t)) {
			rule := w.r.ruleRefusal(a.err)
			switch {
			case a.err == nil:
				t.setOp(a.op)
			case rule != "":
				refused = rule
			case retryable(a.err):
				retry = true
			}
		}
		if t.opID() == "" && refused != "" {
			// A budget or the identity refused it: nothing was stored, and
			// trying again under the same key would be refused the same.
			t.mu.Lock()
			t.refused = refused
			t.mu.Unlock()
			return false
		}
		if t.opID() != "" {
			// Sometimes re-Prepare at once with the same key: the agent
			// did not trust the first answer.
			if w.chance(0.05) {
				w.call(life, "prepare", w.server(nil), t, w.r.agent, prepareRPC(t))
			}
			return true
		}
		if !retry || !w.backoff(life, attempt) {
			return false
		}
	}
	return false
}

func (w *worker) approve(life context.Context, t *trackedOp, d opledgerv1.Decision, deadline time.Time) bool {
	t.mu.Lock()
	id, fp := t.id, t.fingerprint
	t.mu.Unlock()
	f := "approve"
	if d == opledgerv1.Decision_DECISION_DENY {
		f = "deny"
	} else if w.chance(mismatchRate) {
		// An approver shown other arguments: the ledger must refuse the
		// approval and change nothing (the checker flags an "ok").
		w.call(life, "approve-mismatch", w.server(nil), t, w.r.approver, approveRPC(id, mismatched(fp), d))
	}
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		done, retry := false, false
		for _, a := range w.twice(life, f, t, w.r.approver, approveRPC(id, fp, d)) {
			switch {
			case a.err == nil:
				done = true
			case retryable(a.err):
				retry = true
			}
		}
		if done {
			return true
		}
		if !retry || !w.backoff(life, attempt) {
			return false
		}
	}
	return false
}

// execute drives the operation to an outcome: SUCCEEDED, FAILED or
// OUTCOME_UNKNOWN. Pending answers and failures are retried (sometimes as
// concurrent twins on several servers) until the deadline; an approval
// that lapsed meanwhile is renewed, as an agent would ask for it again.
func (w *worker) execute(life context.Context, t *trackedOp, deadline time.Time) bool {
	id := t.opID()
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		retry, renew := false, false
		for _, a := range w.twice(life, "execute", t, w.r.agent, executeRPC(id, executeWait)) {
			switch {
			case a.err == nil:
				switch stateName(a.op) {
				case StateOutcomeUnknown:
					if w.chance(0.3) {
						w.later = append(w.later, lateCheck{t: t, due: time.Now().Add(w.dur(5*time.Second, 20*time.Second))})
					}
					return true
				case StateSucceeded, StateFailed:
					return true
				}
				retry = true // pending: still EXECUTING elsewhere
			case lapsed(a.err) && t.intent == intentRun:
				renew = true
			case reasonOf(status.Convert(a.err)) == "DOWNSTREAM_UNAVAILABLE" && w.chance(laterRate):
				// Nothing was sent; the agent moves on and comes back later.
				w.later = append(w.later, lateCheck{t: t, due: time.Now().Add(w.dur(5*time.Second, 20*time.Second)), resume: true})
				return true
			case retryable(a.err):
				retry = true
			}
		}
		if renew {
			t.mu.Lock()
			t.renewals++
			n := t.renewals
			t.mu.Unlock()
			if n > maxRenewals || !w.approve(life, t, opledgerv1.Decision_DECISION_APPROVE, deadline) {
				return false
			}
			continue
		}
		if !retry || !w.backoff(life, attempt) {
			return false
		}
	}
	return false
}

// lapsed reports an Execute refused because the operation's approval
// lapsed (or lapsed and another call said so first): nothing was sent, and
// an approver may approve it again.
func lapsed(err error) bool {
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		return false
	}
	switch reasonOf(st) {
	case "APPROVAL_EXPIRED", "APPROVAL_REQUIRED":
		return true
	}
	return false
}

// mismatched is a well-formed fingerprint that is not fp.
func mismatched(fp string) string {
	if strings.HasSuffix(fp, "0") {
		return fp[:len(fp)-1] + "1"
	}
	if fp == "" {
		return "v1:" + strings.Repeat("0", 64)
	}
	return fp[:len(fp)-1] + "0"
}
