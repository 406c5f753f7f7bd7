package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// TestModel is a property-based state-machine test (issue 11, "Widen the
// proof"): rapid draws random interleavings of Prepare, Approve, Execute on
// two servers sharing one database, Cancel, Reconcile (lookups and operator
// resolutions), steps of the database's clock past a lease or an approval,
// and scripted downstream answers, including requests held while other steps
// run. Every answer is compared with a small reference model of the
// contract (DESIGN.md, "What each RPC does"; docs/design.md), and after every
// step the ledger's rows and the downstream's records are checked against
// the contract's properties:
//
//   - at most one effect per operation;
//   - every answer agrees with the model, and every finished answer with the
//     operation's final state; nothing overwrites a terminal state;
//   - FAILED only after a definitive refusal of the first request that may
//     have reached the downstream (or an operator's verdict);
//   - no first send on an expired approval, nor on one bound to another
//     fingerprint;
//   - REJECTED, CANCELLED and AWAITING_APPROVAL never with a request (let
//     alone an effect) behind them;
//   - the policies (docs/policy.md): a quorum of two distinct approvers
//     (pay_q; the same approver twice is one approval), approve-with-edit
//     (the original REJECTED and its Execute OPERATION_SUPERSEDED, the
//     same edit again a replay, another a conflict, only the editable
//     field), and a rolling policy change: a step restarts one server with
//     a tightened tools file (ship_dd then needs an approval, pay_nd and
//     pay_q gain deny rules) or back, so both policies are in force at once;
//     an operation judged under another policy than its server's, with
//     nothing sent, is judged again at the claim (back to
//     AWAITING_APPROVAL, REJECTED, or current) and by a decision; the
//     ledger's approvals needed, approvers, policy digest and edit link
//     match the model's after every step, and a first send had the quorum
//     the policy demanded.
//
// Time is the database's clock (PostgreSQL under libfaketime, re-read on
// every reading): a lease expires, or an approval lapses, when a step moves
// that clock forward, with no sleeps. The default run (100 checks of about
// 60 steps, with some 200 server restarts) takes 35 to 55 seconds on two
// cores; a longer one:
//
//	go test ./ledger -run 'TestModel$' -rapid.checks=2000 -rapid.steps=100 -timeout 3h
//
// -rapid.seed=N replays a run, -rapid.v prints every step, and a failure is
// shrunk to a short sequence and saved under testdata/rapid/ for replay.
func TestModel(t *testing.T) {
	t.Parallel()
	defaultFlag(t, "rapid.steps", "RAPID_STEPS", modelSteps)
	w := newModelWorld(t)
	defer func() { t.Log(w.stats) }()
	rapid.Check(t, func(rt *rapid.T) {
		m := w.newModel(rt)
		rt.Repeat(m.actions())
		m.drain(rt)
		m.final(rt)
		w.stats.add("checks", 1)
		w.stats.add("steps", m.steps)
	})
}

// modelSteps is TestModel's default for -rapid.steps (rapid's own is 30):
// the faults it stages take several steps each to set up (a send, a
// reconciliation, a clock step, a second send), and a default run of 100
// checks of about 60 steps catches each re-introduced defect of the
// controls (issue 11) in well under a minute.
const modelSteps = 60

// The times of the model. An approval lasts modelTTL and a lease
// modelLease on the database's clock; a lease step is past a lease, and two
// of them stay inside an approval (22 min), three do not (33 min); a lapse
// step is past an approval. Every boundary is minutes away from where the
// steps land, and a check lasts seconds of real time.
const (
	modelTTL   = 30 * time.Minute
	modelLease = 10 * time.Minute
	leaseStep  = 11 * time.Minute
	lapseStep  = 35 * time.Minute
)

// toolModel is one tool of the model's tools file.
type toolModel struct {
	name       string
	approval   bool
	dedupes    bool
	lookup     bool
	attempts   int
	timeout    time.Duration
	definitive string // definitive_statuses; "" for the default (every 4xx but 408, 409, 425, 429)
	undeclared int    // a 4xx status that is not definitive
	// fast tools have a timeout short enough to script answers slower than
	// it; their requests are never held (a held request would time out).
	fast bool
	// approvers is the quorum (approval.approvers; 0 or 1: one approver),
	// and editable lets an approver edit amount_minor (approve-with-edit).
	approvers int
	editable  bool
	// The tightened tools file (tightPolicy) adds an approval to a tool
	// that needed none (tightApproval), or a deny rule (tightDeny, in CEL,
	// and tightDenies, the same in Go).
	tightApproval bool
	tightDeny     string
	tightDenies   func(amount int64) bool
}

var modelTools = []toolModel{
	{name: "pay_dd", approval: true, dedupes: true, lookup: true, attempts: 2, timeout: time.Minute,
		definitive: "[400, 402, 404]", undeclared: 422},
	{name: "pay_nd", approval: true, dedupes: false, lookup: true, attempts: 1, timeout: time.Minute, undeclared: 409,
		tightDeny: "args.amount_minor == 101", tightDenies: func(a int64) bool { return a == 101 }},
	{name: "ship_dd", approval: false, dedupes: true, lookup: false, attempts: 2, timeout: 500 * time.Millisecond,
		definitive: "[400, 402, 404]", undeclared: 422, fast: true, tightApproval: true},
	// A quorum of two distinct approvers, and approve-with-edit of the
	// amount; the tightened policy refuses amounts below 50 (an edit to 40).
	{name: "pay_q", approval: true, approvers: 2, editable: true, dedupes: true, lookup: true, attempts: 2, timeout: time.Minute,
		definitive: "[400, 402, 404]", undeclared: 422, tightDeny: "args.amount_minor < 50", tightDenies: func(a int64) bool { return a < 50 }},
}

// judge is the policy's judgement of a call of tl with these args: refused
// by a deny rule, or the approvals it needs (0: none).
func (tl *toolModel) judge(policy int, args map[string]any) (denied bool, needed int) {
	amount := int64(args["amount_minor"].(float64))
	if policy == tightPolicy && tl.tightDenies != nil && tl.tightDenies(amount) {
		return true, 0
	}
	if tl.approval || policy == tightPolicy && tl.tightApproval {
		return false, max(tl.approvers, 1)
	}
	return false, 0
}

func modelArgs(variant int) map[string]any {
	return map[string]any{"invoice_id": fmt.Sprintf("INV-%d", variant), "amount_minor": float64(100 + variant)}
}

// modelKeys is how many idempotency keys a check uses per tool.
const modelKeys = 2

// preparedSlots are the slots of prepared operations (tool × key); the
// edit of the one in slot s, if any, is in slot preparedSlots + s.
var preparedSlots = len(modelTools) * modelKeys

// The principals of a check, by index.
const (
	pAgent         = iota // agent
	pAgentApprover        // agent and approver: may prepare, and approve what others prepared
	pApprover             // approver
	pOperator             // operator
	pApprover2            // a second approver, for a quorum of two
)

// approvers are the principals that may decide.
var approvers = []int{pAgentApprover, pApprover, pApprover2}

// mop is the model of one operation.
type mop struct {
	name         string // tool/key/args, for the log
	tool         *toolModel
	key          string
	args         int
	id, fp, dkey string
	preparedBy   int
	slot         int
	// body is the arguments the operation carries (an edit's are the
	// edited ones).
	body  map[string]any
	state ledger.State
	// The policy's view: approval required (it only ever becomes true),
	// the approvals needed (it only grows), the approvers of the current
	// round, the digest of the policy it was last judged under, the edit
	// that superseded it, and whether a changed policy rejected it.
	required       bool
	needed         int
	approvers      []int
	judged         string
	supersededBy   *mop
	policyRejected bool
	fence          int64
	approvedUntil  time.Duration // on the model's clock, while an approval is in force
	leaseUntil     time.Duration
	// reached: a request of the operation may have reached the downstream.
	reached bool
	// sentBefore: while EXECUTING, an attempt before the current one may
	// have reached the downstream, or the current one took over (the
	// ledger's first_sent_fence is set).
	sentBefore bool
	// operatorFailed: FAILED is an operator's verdict, not a refusal.
	operatorFailed bool
	// resolvedState and resolvedFence: the operator's last verdict, in
	// force while the operation is still that state at that fence (a
	// repeat of it replays).
	resolvedState ledger.State
	resolvedFence int64

	// What was observed, for the contract's properties.
	terminal     ledger.State   // the first finished state the ledger held
	answered     []ledger.State // the finished states answers reported
	approval     seenApproval   // the approval the ledger held before the current step
	firstChecked bool           // the first request to reach the downstream was checked
}

type seenApproval struct {
	decision, fingerprint string
	expires               time.Time
	approves, needed      int
}

// call is one claim (or takeover) of an operation, as the model follows its
// executor.
type call struct {
	op       *mop
	fence    int64
	attempts int  // requests tried, refused connections included
	sends    int  // requests that reached the downstream
	first    bool // the last request that reached it was the operation's first
	tookOver bool // a takeover: the holder before it may have sent
}

type outcome int

const (
	outNone outcome = iota
	outSucceeded
	outFailed
	outUnknown
	outNotSent
)

type rpcResult struct {
	op       *opledgerv1.Operation
	replayed bool
	err      error
}

// pendingCall is an Execute whose request the downstream holds.
type pendingCall struct {
	call *call
	held *held
	done chan rpcResult
	srv  int
}

// want is the model's answer: an error's code and reason, or success with
// the model's (updated) operation and replayed.
type want struct {
	code     codes.Code
	reason   string
	replayed bool
}

// model is one check: a tenant of its own, its operations, the model's
// clock (how far this check moved the database's), and the held calls.
type model struct {
	w       *modelWorld
	tenant  string
	keys    [5]string
	ops     []*mop
	slots   map[int]*mop // by tool and key: tool index × modelKeys + key index
	vnow    time.Duration
	pending []*pendingCall
	strays  []*held // held requests the model did not expect, released at cleanup
	down    bool    // the downstream refuses every connection
	steps   int
}

func (w *modelWorld) newModel(t *rapid.T) *model {
	w.ds.reset()
	m := &model{w: w, tenant: fmt.Sprintf("model%d", w.seq.Add(1)), slots: map[int]*mop{}}
	roles := [5][]string{{ledger.RoleAgent}, {ledger.RoleAgent, ledger.RoleApprover}, {ledger.RoleApprover}, {ledger.RoleOperator}, {ledger.RoleApprover}}
	for i, r := range roles {
		key, _, err := ledger.CreatePrincipal(context.Background(), w.env.Store, m.tenant, "", r)
		if err != nil {
			t.Fatalf("create principal: %v", err)
		}
		m.keys[i] = key
	}
	t.Cleanup(m.cleanup)
	// Every check starts with both servers on the model's tools file, so
	// that a check replays as it ran (a policy change of the previous one
	// is undone).
	for srv, p := range w.policy {
		if p != modelPolicy {
			w.restart(srv, modelPolicy)
		}
	}
	return m
}

// cleanup lets every held request go, so that no executor of this check
// outlives it, even when it failed.
func (m *model) cleanup() {
	for _, p := range m.pending {
		p.held.release <- ans5xxBefore
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute):
		}
	}
	for _, h := range m.strays {
		h.release <- ans5xxBefore
		<-h.done
	}
	m.pending, m.strays = nil, nil
}

// actions is one step, drawn with weights (rapid's Repeat draws its
// actions uniformly), and the checks after every step.
func (m *model) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){"step": m.step, "": m.check}
}

type action struct {
	name   string
	weight int
	run    func(*rapid.T)
	// applies: the action has something to act on (a step that draws and
	// then skips counts against rapid's budget of rejections).
	applies bool
}

// step draws one action among those that apply, by weight, and runs it.
func (m *model) step(t *rapid.T) {
	ops, held := len(m.ops) > 0, len(m.pending) > 0
	all := []action{
		{"Prepare", 2, m.prepare, true},
		{"Approve", 4, m.approve, ops},
		{"Edit", 2, m.edit, ops},
		{"PolicyChange", 1, m.policyChange, m.idleServer()},
		{"Execute", 6, m.execute, ops},
		{"ExecuteRace", 2, m.executeRace, !m.down && len(m.claimable()) > 0},
		{"Release", 3, m.release, held},
		{"Clock", 2, m.clockStep, true},
		{"Reconcile", 2, m.reconcile, ops},
		{"Resolve", 1, m.resolve, ops},
		{"Cancel", 1, m.cancel, ops},
		{"Outage", 1, m.outage, true},
	}
	var names []string
	byName := map[string]func(*rapid.T){}
	for _, a := range all {
		for range a.weight * b2i(a.applies) {
			names = append(names, a.name)
		}
		byName[a.name] = a.run
	}
	byName[rapid.SampledFrom(names).Draw(t, "action")](t)
}

func (m *model) logf(t *rapid.T, format string, args ...any) {
	m.steps++
	t.Logf("step %d: "+format, append([]any{m.steps}, args...)...)
}

func (m *model) client(srv int) opledgerv1.LedgerServiceClient { return m.w.servers[srv].Client }

// drawOp draws an operation by its slot (tool and key), so that a shrunk
// sequence keeps pointing at the same operations: the first one at or after
// the slot, mostly (3 in 4) the first in a state where the action does
// something (preferred). The others mostly replay or refuse, which is
// checked, but rarely leads anywhere new.
func (m *model) drawOp(t *rapid.T, preferred ...ledger.State) *mop {
	n := 2 * preparedSlots
	slot := rapid.IntRange(0, n-1).Draw(t, "slot")
	choosy := rapid.IntRange(0, 3).Draw(t, "choosy") > 0
	var first *mop
	for i := range n {
		op := m.slots[(slot+i)%n]
		if op == nil {
			continue
		}
		if first == nil {
			first = op
		}
		if !choosy || slices.Contains(preferred, op.state) {
			return op
		}
	}
	return first
}

// sendAnswers are the scripted answers, weighted towards a plain success
// (rapid shrinks towards the first).
var sendAnswers = []answer{ansOK, ansOK, ansOK, ansRefused, ansRefused, ansUndeclared, ansUndeclaredAfter,
	ansRedirect, ansRedirectAfter, ans5xxBefore, ans5xxAfter, ansDropAfter, ansConnRefused, ansConnRefused,
	ansBlock, ansBlock, ansBlock, ansBlock, ansSlow, ansSlowAfter}

// drawAnswers draws the answers to up to n requests of a tool's executor.
func (m *model) drawAnswers(t *rapid.T, tl *toolModel, n int, label string, mayHold bool, except ...answer) []answer {
	var allowed []answer
	for _, a := range sendAnswers {
		switch {
		case slices.Contains(except, a):
		case a == ansBlock && (tl.fast || !mayHold || len(m.pending) >= 3):
		case (a == ansSlow || a == ansSlowAfter) && !tl.fast:
		default:
			allowed = append(allowed, a)
		}
	}
	out := make([]answer, n)
	for i := range out {
		out[i] = rapid.SampledFrom(allowed).Draw(t, label)
		if m.down {
			out[i] = ansConnRefused
		}
	}
	return out
}

func (m *model) prepare(t *rapid.T) {
	ti := rapid.IntRange(0, len(modelTools)-1).Draw(t, "tool")
	ki := rapid.IntRange(0, modelKeys-1).Draw(t, "key")
	tl, key := &modelTools[ti], fmt.Sprintf("k%d", ki)
	args := rapid.IntRange(0, 1).Draw(t, "args")
	who := rapid.SampledFrom([]int{pAgent, pAgent, pAgent, pAgentApprover}).Draw(t, "preparer")
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	slot := ti*modelKeys + ki
	op := m.slots[slot]
	m.logf(t, "Prepare %s key %s args %d by principal %d on server %d (%s policy)", tl.name, key, args, who, srv, policyNames[m.w.policy[srv]])
	pb, err := structpb.NewStruct(modelArgs(args))
	if err != nil {
		t.Fatal(err)
	}
	// The policy in force on the server judges a new operation: a deny rule
	// refuses it, and nothing is stored. A key that names an operation
	// already (prepared before the policy changed) is answered as ever.
	denied, needed := tl.judge(m.w.policy[srv], modelArgs(args))
	resp, err := m.client(srv).Prepare(harness.Ctx(m.keys[who], key), &opledgerv1.PrepareRequest{Tool: tl.name, Args: pb})
	switch {
	case denied && op == nil:
		code, reason := statusReason(err)
		if code != codes.FailedPrecondition || reason != "POLICY_DENIED" {
			t.Fatalf("Prepare of %s/%s/%d under the %s policy: the ledger answered %v %s (%v, %s); the model says POLICY_DENIED",
				tl.name, key, args, policyNames[m.w.policy[srv]], code, reason, err, stateOf(resp.GetOperation()))
		}
		m.w.stats.add("answer Prepare POLICY_DENIED", 1)
	case op == nil:
		if err != nil {
			t.Fatalf("Prepare of a new operation: %v", err)
		}
		got := resp.GetOperation()
		op = &mop{name: fmt.Sprintf("%s/%s/%d", tl.name, key, args), tool: tl, key: key, args: args, id: got.GetId(),
			fp: got.GetFingerprint(), dkey: got.GetDownstreamKey(), preparedBy: who, state: ledger.StateReady, slot: slot,
			body: modelArgs(args), required: needed > 0, needed: needed, judged: m.digest(tl, srv)}
		if needed > 0 {
			op.state = ledger.StateAwaitingApproval
		}
		m.ops = append(m.ops, op)
		m.slots[slot] = op
		m.expect(t, "Prepare", op, want{}, got, resp.GetReplayed(), nil)
	case op.args == args:
		m.expect(t, "Prepare", op, want{replayed: true}, resp.GetOperation(), resp.GetReplayed(), err)
		if resp.GetOperation().GetId() != op.id {
			t.Fatalf("Prepare replayed another operation: %s, not %s", resp.GetOperation().GetId(), op.id)
		}
	default:
		m.expect(t, "Prepare", op, want{code: codes.AlreadyExists, reason: "IDEMPOTENCY_KEY_REUSED"}, resp.GetOperation(), resp.GetReplayed(), err)
	}
}

// digest is the digest of the policy tl has on server srv.
func (m *model) digest(tl *toolModel, srv int) string { return m.w.digests[m.w.policy[srv]][tl.name] }

// current: op was judged under the policy its tool has on server srv.
func (m *model) current(op *mop, srv int) bool { return op.judged == m.digest(op.tool, srv) }

// idleServer: a server holds no request, so it can be restarted.
func (m *model) idleServer() bool { return len(m.idleServers()) > 0 }

func (m *model) idleServers() []int {
	var out []int
	for srv := range m.w.servers {
		busy := false
		for _, p := range m.pending {
			busy = busy || p.srv == srv
		}
		if !busy {
			out = append(out, srv)
		}
	}
	return out
}

// policyChange restarts a server (one holding no request) with the other
// tools file: a rolling policy change, tightening or loosening, while the
// other server may still run the old one.
func (m *model) policyChange(t *rapid.T) {
	srv := rapid.SampledFrom(m.idleServers()).Draw(t, "restarted server")
	to := 1 - m.w.policy[srv]
	m.logf(t, "server %d restarts with the %s tools file", srv, policyNames[to])
	m.w.restart(srv, to)
	m.w.stats.add("restarts with the "+policyNames[to]+" policy", 1)
}

func (m *model) approve(t *rapid.T) {
	op := m.drawOp(t, ledger.StateAwaitingApproval, ledger.StateReady)
	deny := rapid.SampledFrom([]bool{false, false, false, true}).Draw(t, "deny")
	right := rapid.SampledFrom([]bool{true, true, true, true, true, false}).Draw(t, "right fingerprint")
	who := rapid.SampledFrom(approvers).Draw(t, "approver")
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	fp := op.fp
	if !right {
		fp = otherFingerprint(op.fp)
	}
	decision := opledgerv1.Decision_DECISION_APPROVE
	if deny {
		decision = opledgerv1.Decision_DECISION_DENY
	}
	m.logf(t, "%s %s (%s, fence %d, approvals %v of %d) by principal %d with the %s fingerprint on server %d (%s policy)", decision, op.name, op.state, op.fence,
		op.approvers, op.needed, who, map[bool]string{true: "right", false: "wrong"}[right], srv, policyNames[m.w.policy[srv]])
	w := m.decide(op, deny, right, who, srv)
	resp, err := decide(m.client(srv), m.keys[who], op.id, fp, decision)
	m.expect(t, "Approve", op, w, resp.GetOperation(), resp.GetReplayed(), err)
}

// undecided: what an approver's decision may still change before anything
// is sent (a READY operation's approval may have lapsed).
func (op *mop) undecided() bool {
	return op.state == ledger.StateAwaitingApproval || op.state == ledger.StateReady && !op.reached
}

// decide is the contract of Approve.
func (m *model) decide(op *mop, deny, right bool, who, srv int) want {
	// An operation that awaits a decision (or whose approval a decision
	// may renew), judged under another policy than the server's, is judged
	// again first, with the row locked: a deny rule now holding rejects it
	// whoever asks; otherwise the quorum only grows, and the decision
	// records the policy in force.
	needed, judged := op.needed, op.judged
	if op.undecided() && op.required && !m.current(op, srv) {
		denied, n := op.tool.judge(m.w.policy[srv], op.body)
		if denied {
			m.w.stats.add("judged again at Approve: rejected from "+string(op.state), 1)
			op.state, op.judged, op.policyRejected = ledger.StateRejected, m.digest(op.tool, srv), true
			return want{code: codes.FailedPrecondition, reason: "POLICY_DENIED"}
		}
		needed, judged = max(needed, n), m.digest(op.tool, srv)
		m.w.stats.add("judged again at Approve", 1)
	}
	if op.preparedBy == who {
		return want{code: codes.PermissionDenied, reason: "SELF_APPROVAL_FORBIDDEN"}
	}
	if !right {
		return want{code: codes.FailedPrecondition, reason: "APPROVAL_FINGERPRINT_MISMATCH"}
	}
	if !op.required {
		return want{code: codes.FailedPrecondition, reason: "APPROVAL_NOT_APPLICABLE"}
	}
	// An approval lapses only while nothing was sent: a send may have taken
	// effect, so it consumed the approval for good.
	lapsed := op.state == ledger.StateReady && !op.reached && m.vnow >= op.approvedUntil
	conflict := want{code: codes.FailedPrecondition, reason: "APPROVAL_CONFLICT"}
	cancelled := want{code: codes.FailedPrecondition, reason: "OPERATION_CANCELLED"}
	if op.state == ledger.StateExecuting && !op.sentBefore && m.vnow >= op.approvedUntil {
		// An attempt that may have sent nothing holds it past the
		// approval: its end tells whether the approval was used.
		return want{code: codes.Aborted, reason: "OPERATION_IN_PROGRESS"}
	}
	needed = max(needed, 1)
	// A decision that is recorded also records the quorum and the policy
	// it was judged under; READY exactly at the needed-th distinct
	// approver, the approval's window from that one.
	recorded := func(approvers []int) want {
		op.approvers, op.needed, op.judged = approvers, needed, judged
		if !deny && len(approvers) >= needed {
			op.state, op.approvedUntil = ledger.StateReady, m.vnow+modelTTL
		} else if !deny {
			op.state = ledger.StateAwaitingApproval
		} else {
			op.state = ledger.StateRejected
		}
		return want{}
	}
	mine := op.state == ledger.StateAwaitingApproval && slices.Contains(op.approvers, who)
	switch {
	case !deny && mine:
		// The same approver twice is one approval.
		return want{replayed: true}
	case !deny && op.state == ledger.StateAwaitingApproval:
		return recorded(append(slices.Clone(op.approvers), who))
	case !deny && lapsed:
		// A new round: the lapsed approvals count no more.
		return recorded([]int{who})
	case deny && mine:
		return conflict
	case deny && op.state == ledger.StateAwaitingApproval:
		return recorded(op.approvers)
	case deny && lapsed:
		return recorded(nil)
	case op.state == ledger.StateCancelled:
		return cancelled
	case op.state == ledger.StateRejected:
		if deny {
			return want{replayed: true}
		}
		return conflict
	case deny:
		return conflict
	}
	return want{replayed: true}
}

// edits are what an approver may try as edited arguments: two amounts
// (so that the same edit again is a replay and the other a conflict; 40 is
// below what the tightened policy allows), a non-editable field, and no
// change at all.
var edits = []string{"amount 60", "amount 60", "amount 40", "invoice", "unchanged"}

// edit is an approve-with-edit.
func (m *model) edit(t *rapid.T) {
	op := m.drawOp(t, ledger.StateAwaitingApproval)
	who := rapid.SampledFrom(approvers).Draw(t, "editor")
	what := rapid.SampledFrom(edits).Draw(t, "edit")
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	body := maps.Clone(op.body)
	switch what {
	case "amount 60":
		body["amount_minor"] = float64(60)
	case "amount 40":
		body["amount_minor"] = float64(40)
	case "invoice":
		body["invoice_id"] = "INV-edited"
	}
	m.logf(t, "Approve %s (%s, approvals %v of %d) with the edit %q by principal %d on server %d (%s policy)", op.name, op.state,
		op.approvers, op.needed, what, who, srv, policyNames[m.w.policy[srv]])
	w, edited := m.predictEdit(op, who, srv, body)
	pb, err := structpb.NewStruct(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := m.client(srv).Approve(harness.Ctx(m.keys[who], ""), &opledgerv1.ApproveRequest{OperationId: op.id, Fingerprint: op.fp,
		Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "model", EditedArgs: pb})
	m.expect(t, "Edit", op, w, resp.GetOperation(), resp.GetReplayed(), err)
	if err != nil {
		return
	}
	got := resp.GetEdited()
	if got.GetSupersedes() != op.id || resp.GetOperation().GetSupersededBy() != got.GetId() {
		t.Fatalf("Edit of %s: the edit %s (supersedes %q) and the original (superseded by %q) are not linked both ways",
			op.name, got.GetId(), got.GetSupersedes(), resp.GetOperation().GetSupersededBy())
	}
	if w.replayed {
		if got.GetId() != op.supersededBy.id {
			t.Fatalf("Edit of %s replayed another edit: %s, not %s", op.name, got.GetId(), op.supersededBy.id)
		}
		return
	}
	edited.id, edited.fp, edited.dkey = got.GetId(), got.GetFingerprint(), got.GetDownstreamKey()
	if !reflect.DeepEqual(got.GetArgs().AsMap(), body) {
		t.Fatalf("Edit of %s: the new operation carries %v, not the edited %v", op.name, got.GetArgs().AsMap(), body)
	}
	m.ops = append(m.ops, edited)
	m.slots[edited.slot] = edited
	m.expect(t, "Edit (the new operation)", edited, want{}, got, false, nil)
}

// predictEdit is the contract of an approve-with-edit: the answer for the
// original, and the new operation it makes, if any.
func (m *model) predictEdit(op *mop, who, srv int, body map[string]any) (want, *mop) {
	if op.preparedBy == who {
		return want{code: codes.PermissionDenied, reason: "SELF_APPROVAL_FORBIDDEN"}, nil
	}
	if e := op.supersededBy; e != nil {
		if reflect.DeepEqual(e.body, body) {
			return want{replayed: true}, nil
		}
		return want{code: codes.FailedPrecondition, reason: "APPROVAL_CONFLICT"}, nil
	}
	if op.state != ledger.StateAwaitingApproval {
		return want{code: codes.FailedPrecondition, reason: "APPROVAL_NOT_APPLICABLE"}, nil
	}
	if reflect.DeepEqual(op.body, body) {
		return want{code: codes.InvalidArgument, reason: "FIELD_INVALID"}, nil
	}
	if !op.tool.editable || body["invoice_id"] != op.body["invoice_id"] {
		return want{code: codes.InvalidArgument, reason: "ARGS_INVALID"}, nil
	}
	if slices.Contains(op.approvers, who) {
		return want{code: codes.FailedPrecondition, reason: "APPROVAL_CONFLICT"}, nil
	}
	// The edit is judged by the policy in force again: its deny rules, and
	// its quorum, which the editor's approval counts towards.
	denied, n := op.tool.judge(m.w.policy[srv], body)
	if denied {
		return want{code: codes.FailedPrecondition, reason: "POLICY_DENIED"}, nil
	}
	needed := max(n, 1)
	e := &mop{name: op.name + "/edited", tool: op.tool, key: "edit-of-" + op.name, args: -1, preparedBy: op.preparedBy,
		slot: preparedSlots + op.slot, body: body, state: ledger.StateAwaitingApproval,
		required: true, needed: needed, approvers: []int{who}, judged: m.digest(op.tool, srv)}
	if needed == 1 {
		e.state, e.approvedUntil = ledger.StateReady, m.vnow+modelTTL
	}
	op.state, op.supersededBy = ledger.StateRejected, e
	return want{}, e
}

func (m *model) execute(t *rapid.T) {
	op := m.drawOp(t, ledger.StateReady, ledger.StateExecuting)
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	answers := m.drawAnswers(t, op.tool, op.tool.attempts, "answer", true)
	was, fence := op.state, op.fence
	w, c := m.predictExecute(op, srv)
	if c == nil {
		answers = nil // no call: any request is one nobody scripted
	}
	m.logf(t, "Execute %s (%s, fence %d) on server %d (%s policy); the downstream will answer %v", op.name, was, fence, srv, policyNames[m.w.policy[srv]], answers)
	var res outcome
	used, holds := 0, false
	if c != nil {
		res, used, holds = m.advance(c, answers, outNone)
		m.w.stats.add("claims of "+op.tool.name, 1)
	}
	m.w.ds.script(answers)
	m.w.stats.add("execute calls", 1)
	done := make(chan rpcResult, 1)
	go func() {
		resp, err := execute(m.client(srv), m.keys[pAgent], op.id, 0)
		done <- rpcResult{resp.GetOperation(), resp.GetReplayed(), err}
	}()
	if holds {
		select {
		case h := <-m.w.ds.arrived:
			m.pending = append(m.pending, &pendingCall{call: c, held: h, done: done, srv: srv})
			m.w.stats.add("requests held", 1)
		case r := <-done:
			t.Fatalf("Execute returned (%s, err %v) where the model expects its request held", stateOf(r.op), r.err)
		case <-time.After(time.Minute):
			t.Fatalf("the held request never arrived")
		}
		m.checkUsed(t, used, 0)
		return
	}
	r := m.await(t, done)
	if c != nil {
		w = m.commit(c, res)
	}
	m.expect(t, "Execute", op, w, r.op, r.replayed, r.err)
	m.checkUsed(t, used, 0)
}

// claimable lists the operations an Execute on either server would claim.
func (m *model) claimable() []*mop {
	var out []*mop
	for _, op := range m.ops {
		if op.state == ledger.StateReady && (op.reached || (!op.required || m.vnow < op.approvedUntil) && m.current(op, 0) && m.current(op, 1)) {
			out = append(out, op)
		}
	}
	return out
}

// executeRace executes a claimable operation on both servers at once:
// exactly one claims it and makes the calls the answers script; the other
// answers the pending operation, or the outcome as a replay if it read the
// operation after the outcome was recorded. A refused connection is not
// scripted here: the released operation would be claimed again by the
// other, with a different count of requests.
func (m *model) executeRace(t *rapid.T) {
	ops := m.claimable()
	op := ops[rapid.IntRange(0, len(ops)-1).Draw(t, "claimable op")]
	answers := m.drawAnswers(t, op.tool, op.tool.attempts, "answer", true, ansConnRefused)
	m.logf(t, "Execute %s (%s, fence %d) on both servers at once; the downstream will answer %v", op.name, op.state, op.fence, answers)
	_, c := m.predictExecute(op, 0)
	res, used, holds := m.advance(c, answers, outNone)
	m.w.ds.script(answers)
	m.w.stats.add("execute races", 1)
	dones := [2]chan rpcResult{make(chan rpcResult, 1), make(chan rpcResult, 1)}
	for srv, done := range dones {
		go func() {
			resp, err := execute(m.client(srv), m.keys[pAgent], op.id, 0)
			done <- rpcResult{resp.GetOperation(), resp.GetReplayed(), err}
		}()
	}
	// pendingAnswer: the loser read the operation while the winner held it.
	pendingAnswer := func(r rpcResult) bool {
		return r.err == nil && stateOf(r.op) == ledger.StateExecuting && r.op.GetFence() == c.fence && !r.replayed
	}
	if holds {
		var h *held
		loser := -1
		for h == nil || loser < 0 {
			select {
			case h = <-m.w.ds.arrived:
			case r := <-dones[0]:
				loser = 0
				m.raceLoser(t, op, r, pendingAnswer(r))
			case r := <-dones[1]:
				loser = 1
				m.raceLoser(t, op, r, pendingAnswer(r))
			case <-time.After(time.Minute):
				t.Fatalf("the race did not settle: held %t, loser %d", h != nil, loser)
			}
			if loser >= 0 && h == nil && len(dones[1-loser]) > 0 {
				t.Fatalf("both Executes returned where the model expects one held")
			}
		}
		m.pending = append(m.pending, &pendingCall{call: c, held: h, done: dones[1-loser], srv: 1 - loser})
		m.w.stats.add("requests held", 1)
		m.checkUsed(t, used, 0)
		return
	}
	r0, r1 := m.await(t, dones[0]), m.await(t, dones[1])
	w := m.commit(c, res)
	winner, loser := r0, r1
	if r0.replayed || pendingAnswer(r0) {
		winner, loser = r1, r0
	}
	m.expect(t, "Execute (race winner)", op, w, winner.op, winner.replayed, winner.err)
	replay := loser.err == nil && loser.replayed && stateOf(loser.op) == op.state && loser.op.GetFence() == op.fence &&
		(op.state.Terminal() || op.state == ledger.StateOutcomeUnknown)
	m.raceLoser(t, op, loser, pendingAnswer(loser) || replay)
	m.checkUsed(t, used, 0)
}

func (m *model) raceLoser(t *rapid.T, op *mop, r rpcResult, ok bool) {
	t.Helper()
	if !ok {
		t.Fatalf("Execute (race loser) of %s: the ledger answered %s, fence %d, replayed %t, error %v; the model says the pending operation or a replay of %s, fence %d",
			op.name, stateOf(r.op), r.op.GetFence(), r.replayed, r.err, op.state, op.fence)
	}
	m.w.stats.add("answer Execute (race loser) "+string(stateOf(r.op)), 1)
}

// await waits for an Execute that the model expects to return, failing
// (rather than hanging) if the downstream holds one of its requests.
func (m *model) await(t *rapid.T, done chan rpcResult) rpcResult {
	select {
	case r := <-done:
		return r
	case h := <-m.w.ds.arrived:
		m.strays = append(m.strays, h)
		t.Fatalf("the downstream holds a request the model did not expect")
	case <-time.After(2 * time.Minute):
		t.Fatalf("Execute did not return")
	}
	return rpcResult{}
}

// predictExecute is the contract of Execute up to the downstream call: the
// answer when no call is made, else the call the executor makes.
func (m *model) predictExecute(op *mop, srv int) (want, *call) {
	switch op.state {
	case ledger.StateAwaitingApproval:
		return want{code: codes.FailedPrecondition, reason: "APPROVAL_REQUIRED"}, nil
	case ledger.StateReady:
		// The claim sends only an operation judged under the policy in
		// force on its server: any other, with nothing sent, is judged again
		// first. A deny rule now holding rejects it; a quorum it does not
		// have sends it back to await approval (the approvals still in force
		// count; the quorum only grows); otherwise it is judged current.
		if !op.reached && !m.current(op, srv) {
			denied, n := op.tool.judge(m.w.policy[srv], op.body)
			op.judged = m.digest(op.tool, srv)
			if denied {
				op.state, op.policyRejected = ledger.StateRejected, true
				m.w.stats.add("judged again at Execute: rejected", 1)
				return want{code: codes.FailedPrecondition, reason: "POLICY_DENIED"}, nil
			}
			op.needed, op.required = max(op.needed, n), op.required || n > 0
			if len(op.approvers) < op.needed {
				op.state = ledger.StateAwaitingApproval
				if m.vnow >= op.approvedUntil {
					op.approvers = nil
				}
				m.w.stats.add("judged again at Execute: awaits approval", 1)
				return want{code: codes.FailedPrecondition, reason: "APPROVAL_REQUIRED"}, nil
			}
			m.w.stats.add("judged again at Execute: current", 1)
		}
		// An approval bounds when the first send may start.
		if op.required && !op.reached && m.vnow >= op.approvedUntil {
			op.state, op.approvers = ledger.StateAwaitingApproval, nil
			return want{code: codes.FailedPrecondition, reason: "APPROVAL_EXPIRED"}, nil
		}
		op.fence++
		op.state, op.leaseUntil, op.sentBefore = ledger.StateExecuting, m.vnow+modelLease, op.reached
		return want{}, &call{op: op, fence: op.fence}
	case ledger.StateExecuting:
		if m.vnow < op.leaseUntil {
			return want{}, nil // pending
		}
		// An expired lease is taken over only where keys dedupe; the
		// holder may have sent.
		op.reached = true
		if op.tool.dedupes {
			op.sentBefore = true
			op.fence++
			op.leaseUntil = m.vnow + modelLease
			return want{}, &call{op: op, fence: op.fence, tookOver: true}
		}
		op.state = ledger.StateOutcomeUnknown
		return want{}, nil
	case ledger.StateSucceeded, ledger.StateFailed, ledger.StateOutcomeUnknown:
		return want{replayed: true}, nil
	case ledger.StateRejected:
		if op.supersededBy != nil {
			return want{code: codes.FailedPrecondition, reason: "OPERATION_SUPERSEDED"}, nil
		}
		if op.policyRejected {
			return want{code: codes.FailedPrecondition, reason: "POLICY_DENIED"}, nil
		}
		return want{code: codes.FailedPrecondition, reason: "OPERATION_REJECTED"}, nil
	case ledger.StateCancelled:
		return want{code: codes.FailedPrecondition, reason: "OPERATION_CANCELLED"}, nil
	}
	panic("unknown state " + op.state)
}

// advance follows the executor through answers, starting from res, until
// the call ends (res), runs out of attempts, or a request is held.
func (m *model) advance(c *call, answers []answer, res outcome) (outcome, int, bool) {
	used := 0
	for _, a := range answers {
		if c.attempts >= c.op.tool.attempts {
			break
		}
		used++
		c.attempts++
		if a == ansConnRefused {
			res = outNotSent // nothing sent: tried again while attempts remain
			continue
		}
		c.sends++
		c.first, c.op.reached = !c.op.reached, true
		if a == ansBlock {
			return outNone, used, true
		}
		var more bool
		if res, more = c.settle(a); !more {
			return res, used, false
		}
	}
	return c.finish(res), used, false
}

// settle classifies the answer to a request that reached the downstream:
// a 2xx is a success; a declared refusal is FAILED only for the operation's
// first request that may have reached the downstream (a refusal proves
// nothing about an earlier one); anything else is unknown, and the
// executor tries again while attempts remain.
func (c *call) settle(a answer) (outcome, bool) {
	switch a {
	case ansOK:
		return outSucceeded, false
	case ansRefused:
		if c.first {
			return outFailed, false
		}
		return outUnknown, false
	}
	return outUnknown, true
}

// finish: a call whose last attempt sent nothing, after one that may have
// reached the downstream (its own, or the holder's it took over from), is
// unknown.
func (c *call) finish(res outcome) outcome {
	if res == outNotSent && (c.sends > 0 || c.tookOver) {
		return outUnknown
	}
	return res
}

// commit is the contract of recording a call's outcome: only the holder of
// the current fence records, a definitive answer also resolves an unknown
// outcome declared while it held the fence, and nothing leaves a finished
// state. A stale holder's answer is the operation as the ledger holds it.
func (m *model) commit(c *call, res outcome) want {
	op := c.op
	live := op.fence == c.fence
	open := op.state == ledger.StateExecuting || op.state == ledger.StateOutcomeUnknown
	switch res {
	case outSucceeded:
		if live && open {
			op.state = ledger.StateSucceeded
		}
	case outFailed:
		if live && open {
			op.state = ledger.StateFailed
		}
	case outUnknown:
		if live && op.state == ledger.StateExecuting {
			op.state = ledger.StateOutcomeUnknown
		}
	case outNotSent:
		if live && op.state == ledger.StateExecuting {
			op.state = ledger.StateReady
			return want{code: codes.Unavailable, reason: "DOWNSTREAM_UNAVAILABLE"}
		}
	default:
		panic(fmt.Sprintf("commit of outcome %d", res))
	}
	return want{}
}

// releaseAnswers are what a held request may be released with.
var releaseAnswers = []answer{ansOK, ansRefused, ansUndeclared, ansUndeclaredAfter, ansRedirect, ansRedirectAfter,
	ans5xxBefore, ans5xxAfter, ansDropAfter}

func (m *model) release(t *rapid.T) {
	m.finishPending(t, rapid.IntRange(0, len(m.pending)-1).Draw(t, "held"))
}

// finishPending releases a held request with a drawn answer, the executor's
// further attempts getting drawn answers too, and checks what its Execute
// answers.
func (m *model) finishPending(t *rapid.T, i int) {
	p := m.pending[i]
	c := p.call
	final := rapid.SampledFrom(releaseAnswers).Draw(t, "release with")
	retries := m.drawAnswers(t, c.op.tool, c.op.tool.attempts-c.attempts, "then", false)
	// Drawn first: a draw may end the check, and cleanup releases what is
	// still pending.
	m.pending = slices.Delete(m.pending, i, i+1)
	m.logf(t, "Release %s's request of fence %d (now %s, fence %d) with %v, then %v", c.op.name, c.fence, c.op.state, c.op.fence, final, retries)
	res, more := c.settle(final)
	used := 0
	if more {
		res, used, _ = m.advance(c, retries, res)
	} else {
		res = c.finish(res)
	}
	m.w.ds.script(retries)
	p.held.release <- final
	r := m.await(t, p.done)
	w := m.commit(c, res)
	m.expect(t, "Execute (released)", c.op, w, r.op, r.replayed, r.err)
	m.checkUsed(t, used, 0)
}

func (m *model) cancel(t *rapid.T) {
	op := m.drawOp(t, ledger.StateAwaitingApproval, ledger.StateReady)
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	m.logf(t, "Cancel %s (%s, fence %d) on server %d", op.name, op.state, op.fence, srv)
	var w want
	switch {
	case op.state == ledger.StateCancelled:
		w = want{replayed: true}
	case (op.state == ledger.StateAwaitingApproval || op.state == ledger.StateReady) && !op.reached:
		op.state = ledger.StateCancelled
	default:
		// Executed, finished, or READY again after a send that may have
		// taken effect: CANCELLED could be a lie.
		w = want{code: codes.FailedPrecondition, reason: "CANCEL_NOT_APPLICABLE"}
	}
	resp, err := m.client(srv).Cancel(harness.Ctx(m.keys[pAgent], ""), &opledgerv1.CancelRequest{OperationId: op.id, Reason: "model"})
	m.expect(t, "Cancel", op, w, resp.GetOperation(), resp.GetReplayed(), err)
}

// unresolved: what Reconcile works on.
func (m *model) unresolved(op *mop) bool {
	return op.state == ledger.StateOutcomeUnknown || op.state == ledger.StateExecuting && m.vnow >= op.leaseUntil
}

func (m *model) hasPending(op *mop) bool {
	for _, p := range m.pending {
		if p.call.op == op {
			return true
		}
	}
	return false
}

func (m *model) reconcile(t *rapid.T) {
	op := m.drawOp(t, ledger.StateOutcomeUnknown, ledger.StateExecuting)
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	lk := rapid.SampledFrom([]lookupAnswer{lookTruth, lookTruth, lookLag, lookError}).Draw(t, "lookup")
	effs := m.w.ds.effectsOf(op.dkey)
	m.logf(t, "Reconcile %s (%s, fence %d) on server %d; the lookup will be %v (effects %v)", op.name, op.state, op.fence, srv, lk, effs)
	lookups := 0
	if m.unresolved(op) {
		executing := op.state == ledger.StateExecuting
		op.reached = true
		switch {
		case !op.tool.lookup && executing && op.tool.dedupes:
			op.state = ledger.StateReady // the next Execute resubmits the same key
		case !op.tool.lookup && executing:
			op.state = ledger.StateOutcomeUnknown
		case !op.tool.lookup: // inconclusive
		case lk == lookTruth && len(effs) > 0:
			lookups = 1
			op.state = ledger.StateSucceeded
		case lk != lookError && op.tool.dedupes:
			// A consistent not-found from a downstream that dedupes keys: the
			// resubmission is harmless even if a request is still in flight.
			lookups = 1
			op.state = ledger.StateReady
		default:
			lookups = 1
			if executing {
				op.state = ledger.StateOutcomeUnknown
			}
		}
	}
	m.w.ds.script(nil, lk)
	resp, err := m.client(srv).Reconcile(harness.Ctx(m.keys[pAgent], ""), &opledgerv1.ReconcileRequest{OperationId: op.id})
	m.expect(t, "Reconcile", op, want{}, resp.GetOperation(), false, err)
	m.checkUsed(t, 0, lookups)
}

// resolve is an operator's manual verdict. The operator tells the truth
// (an untruthful one could make a second effect, and that would be theirs):
// SUCCEEDED with the effect when there is one, FAILED or READY when there is
// none and no request is held that could still make one.
func (m *model) resolve(t *rapid.T) {
	op := m.drawOp(t, ledger.StateOutcomeUnknown, ledger.StateExecuting)
	srv := rapid.IntRange(0, 1).Draw(t, "server")
	outcome := rapid.SampledFrom([]ledger.State{ledger.StateSucceeded, ledger.StateFailed, ledger.StateReady}).Draw(t, "verdict")
	effs := m.w.ds.effectsOf(op.dkey)
	var w want
	ref := ""
	replay := false
	switch {
	case !m.unresolved(op) && op.resolvedState == outcome && op.state == outcome && op.resolvedFence == op.fence:
		// The same verdict again, with no reference (the operator's note
		// is always "model"): answered as the first was.
		replay = true
	case !m.unresolved(op):
		w = want{code: codes.FailedPrecondition, reason: "RESOLUTION_NOT_APPLICABLE"}
	case len(effs) > 0:
		outcome, ref = ledger.StateSucceeded, effs[0]
	case m.hasPending(op) || outcome == ledger.StateSucceeded:
		// No truthful verdict: a held request may still take effect, or
		// there is no effect to report. The operator looks instead.
		m.logf(t, "the operator has no truthful verdict on %s (%s, fence %d)", op.name, op.state, op.fence)
		return
	}
	m.logf(t, "Resolve %s (%s, fence %d) as %s by the operator on server %d", op.name, op.state, op.fence, outcome, srv)
	if w.code == codes.OK && !replay {
		if op.state == ledger.StateExecuting {
			op.reached = true
		}
		op.state = outcome
		op.operatorFailed = outcome == ledger.StateFailed
		op.resolvedState, op.resolvedFence = outcome, op.fence
	}
	resp, err := m.client(srv).Reconcile(harness.Ctx(m.keys[pOperator], ""), &opledgerv1.ReconcileRequest{OperationId: op.id,
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State(opledgerv1.State_value["STATE_"+string(outcome)]), ExternalRef: ref, Note: "model"}})
	m.expect(t, "Resolve", op, w, resp.GetOperation(), false, err)
}

// outage takes the downstream down (every connection refused: nothing is
// sent, claims are released), or brings it back.
func (m *model) outage(t *rapid.T) {
	m.down = !m.down
	m.w.ds.setDown(m.down)
	m.logf(t, "the downstream %s", map[bool]string{true: "goes down", false: "comes back"}[m.down])
	m.w.stats.add("outages", b2i(m.down))
}

// clockStep moves the database's clock forward: past a lease, or past an
// approval.
func (m *model) clockStep(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{leaseStep, lapseStep}).Draw(t, "clock step")
	m.logf(t, "the database's clock moves %s forward", d)
	m.vnow += d
	if err := m.w.cluster.SetClockOffset(time.Duration(m.w.offset.Add(int64(d)))); err != nil {
		t.Fatal(err)
	}
}

// expect compares an answer with the model's, and remembers a finished
// state it reported.
func (m *model) expect(t *rapid.T, what string, op *mop, w want, got *opledgerv1.Operation, replayed bool, err error) {
	t.Helper()
	if w.code != codes.OK {
		code, reason := statusReason(err)
		if err == nil {
			t.Fatalf("%s of %s: the ledger answered %s, fence %d; the model says %v %s", what, op.name, stateOf(got), got.GetFence(), w.code, w.reason)
		}
		if code != w.code || reason != w.reason {
			t.Fatalf("%s of %s: the ledger answered %v %s (%v); the model says %v %s", what, op.name, code, reason, err, w.code, w.reason)
		}
		m.w.stats.add("answer "+what+" "+reason, 1)
		return
	}
	if err != nil {
		t.Fatalf("%s of %s: the ledger answered %v; the model says %s, fence %d", what, op.name, err, op.state, op.fence)
	}
	state := stateOf(got)
	if state != op.state || got.GetFence() != op.fence || replayed != w.replayed {
		t.Fatalf("%s of %s: the ledger answered %s, fence %d, replayed %t; the model says %s, fence %d, replayed %t",
			what, op.name, state, got.GetFence(), replayed, op.state, op.fence, w.replayed)
	}
	if state.Terminal() {
		op.answered = append(op.answered, state)
	}
	m.w.stats.add("answer "+what+" "+string(state), 1)
}

// checkUsed compares the requests and lookups the step made with the
// model's, and fails on any request nobody scripted.
func (m *model) checkUsed(t *rapid.T, sends, lookups int) {
	t.Helper()
	gotSends, gotLookups, unexpected := m.w.ds.used()
	if len(unexpected) > 0 {
		t.Fatalf("the downstream: %v", unexpected)
	}
	if gotSends != sends || gotLookups != lookups {
		t.Fatalf("the step made %d requests and %d lookups; the model says %d and %d", gotSends, gotLookups, sends, lookups)
	}
}

// check runs after every step: the ledger's rows against the model and the
// downstream's records against the contract's properties.
func (m *model) check(t *rapid.T) {
	ctx := context.Background()
	for _, op := range m.ops {
		row, err := m.w.env.Store.OperationGet(ctx, m.tenant, op.id)
		if err != nil {
			t.Fatalf("read %s: %v", op.name, err)
		}
		state := ledger.State(row.State)
		if op.terminal != "" && state != op.terminal {
			t.Fatalf("%s: the finished state %s was overwritten with %s", op.name, op.terminal, state)
		}
		if state.Terminal() {
			op.terminal = state
		}
		if state != op.state || row.Fence != op.fence {
			t.Fatalf("%s: the ledger holds %s, fence %d; the model says %s, fence %d", op.name, state, row.Fence, op.state, op.fence)
		}
		// The policy's view: what it requires, the quorum, the round's
		// approvers, the policy it was judged under, the edit's link.
		var approved []string
		for _, e := range ledger.ApprovalsOf(row.Approvals) {
			if e.Decision == ledger.DecisionApprove {
				approved = append(approved, e.PrincipalID)
			}
		}
		supersededBy := ""
		if op.supersededBy != nil {
			supersededBy = op.supersededBy.id
		}
		if row.ApprovalRequired != op.required || int(row.ApprovalsNeeded) != op.needed || len(approved) != len(op.approvers) ||
			row.PolicyDigest != op.judged || row.SupersededBy != supersededBy {
			t.Fatalf("%s (%s): the ledger holds approval required %t, %d of %d approvals, policy %.12s, superseded by %q; the model says %t, %d (%v) of %d, policy %.12s, superseded by %q",
				op.name, state, row.ApprovalRequired, len(approved), row.ApprovalsNeeded, row.PolicyDigest, row.SupersededBy,
				op.required, len(op.approvers), op.approvers, op.needed, op.judged, supersededBy)
		}
		reqs, effs := m.w.ds.requestsOf(op.dkey), m.w.ds.effectsOf(op.dkey)
		if len(effs) > 1 {
			t.Fatalf("%s: %d effects at the downstream: %v", op.name, len(effs), effs)
		}
		switch state {
		case ledger.StateRejected, ledger.StateCancelled, ledger.StateAwaitingApproval:
			if len(reqs) > 0 {
				t.Fatalf("%s is %s with %d requests (effects %v) behind it", op.name, state, len(reqs), effs)
			}
		case ledger.StateFailed:
			if len(effs) > 0 {
				t.Fatalf("%s is FAILED with the effect %v behind it", op.name, effs)
			}
			if !op.operatorFailed && (len(reqs) == 0 || reqs[0].answer != ansRefused) {
				t.Fatalf("%s is FAILED, but the first request that reached the downstream was answered %v", op.name, firstAnswer(reqs))
			}
		case ledger.StateSucceeded:
			if len(effs) != 1 || row.ExternalRef != effs[0] {
				t.Fatalf("%s is SUCCEEDED with the reference %q; the downstream has %v", op.name, row.ExternalRef, effs)
			}
		}
		if len(reqs) > 0 && !op.firstChecked {
			// The first send: an approval in force, bound to the arguments sent.
			op.firstChecked = true
			// With approval required, the quorum the policy demanded was
			// complete: what the ledger held before the step that sent it.
			r, a := reqs[0], op.approval
			if op.required && (a.decision != ledger.DecisionApprove || a.fingerprint != op.fp || !r.dbTime.Before(a.expires) || a.approves < a.needed) {
				t.Fatalf("%s: the first request reached the downstream at %s under the approval %+v (fingerprint %s)", op.name, r.dbTime, a, op.fp)
			}
			var body map[string]any
			if err := json.Unmarshal(r.body, &body); err != nil || !reflect.DeepEqual(body, op.body) {
				t.Fatalf("%s: the first request carried %s, not the prepared arguments", op.name, r.body)
			}
		}
		op.approval = seenApproval{decision: row.ApprovalDecision, fingerprint: row.ApprovalFingerprint, expires: row.ApprovalExpiresAt,
			approves: len(approved), needed: int(row.ApprovalsNeeded)}
	}
	if _, _, unexpected := m.w.ds.used(); len(unexpected) > 0 {
		t.Fatalf("the downstream: %v", unexpected)
	}
}

// drain releases every request still held, so that each check ends with
// every Execute answered.
func (m *model) drain(t *rapid.T) {
	for len(m.pending) > 0 {
		m.finishPending(t, 0)
		m.check(t)
	}
}

// final: nothing is left EXECUTING, and every finished state an answer
// reported is the operation's final state.
func (m *model) final(t *rapid.T) {
	for _, op := range m.ops {
		got, err := m.client(1).Get(harness.Ctx(m.keys[pAgent], ""), &opledgerv1.GetRequest{OperationId: op.id})
		if err != nil {
			t.Fatalf("Get %s: %v", op.name, err)
		}
		state := stateOf(got.GetOperation())
		if state != op.state || state == ledger.StateExecuting {
			t.Fatalf("%s ends %s; the model says %s", op.name, state, op.state)
		}
		for _, a := range op.answered {
			if a != state {
				t.Fatalf("%s: an answer said %s, but it ends %s", op.name, a, state)
			}
		}
		m.w.stats.add("final "+string(state), 1)
	}
}
