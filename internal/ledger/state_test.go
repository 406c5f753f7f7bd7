package ledger

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// allEvents lists every event; TestTableShape fails if a rule names one
// that is missing here, so a new event cannot escape the checks below.
var allEvents = []EventKind{EventPrepared, EventApproved, EventDenied, EventApprovalExpired, EventClaimed,
	EventLeaseTakenOver, EventSucceeded, EventFailed, EventOutcomeUnknown, EventReleased, EventReconciled,
	EventResolved, EventCancelled, EventPolicyChanged, EventPolicyChecked, EventSuperseded}

var allParties = []Party{ByAgent, ByApprover, ByClaimant, ByHolder, ByWatcher, ByDownstream, ByOperator}

// stateOf is the one state a guard concerns, or "" for a guard that
// concerns every state: a rule group's statement applies the union of its
// rules' guards, so rules may differ only in guards about a state other
// than the one they start from.
func stateOf(g Guard) State {
	switch g {
	case GuardLeaseExpired:
		return StateExecuting
	case GuardApprovalInForce, GuardLapsedUnsent, GuardPolicyCurrent:
		return StateReady
	}
	return ""
}

var allGuards = []Guard{GuardFence, GuardLeaseExpired, GuardUnsent, GuardFirstSend, GuardKeyWindow, GuardApprovalInForce, GuardLapsedUnsent,
	GuardSentBefore, GuardPolicyCurrent, GuardPolicyStale}

// TestTableShape checks the table's form: known states, events and
// parties, one rule per (from, event, to, party), only PREPARED creates,
// and the rules of one statement agree on their guards.
func TestTableShape(t *testing.T) {
	t.Parallel()
	type key struct {
		from  State
		event EventKind
		to    State
		by    Party
	}
	seen := map[key]bool{}
	for _, r := range Rules() {
		k := key{r.From, r.Event, r.To, r.By}
		require.False(t, seen[k], "%+v is listed twice", r)
		seen[k] = true
		require.True(t, r.From == "" || slices.Contains(States, r.From), "%+v: unknown from state", r)
		require.Contains(t, States, r.To, "%+v: unknown to state", r)
		require.Contains(t, allEvents, r.Event, "%+v: event missing from allEvents", r)
		require.Contains(t, allParties, r.By, "%+v: party missing from allParties", r)
		require.Equal(t, r.From == "", r.Event == EventPrepared, "%+v: only PREPARED creates, and it only creates", r)
		if r.From == "" {
			continue
		}
		froms, union, err := Guarded(r.Event, r.To, r.By)
		require.NoError(t, err)
		require.Contains(t, froms, r.From)
		for _, g := range allGuards {
			if !union.Has(g) || r.Guard.Has(g) {
				continue
			}
			require.NotEqual(t, "", stateOf(g), "%+v lacks %b, which its statement applies to every state", r, g)
			require.NotEqual(t, r.From, stateOf(g), "%+v lacks %b, which its statement applies to %s", r, g, r.From)
		}
	}
	_, _, err := Guarded(EventClaimed, StateSucceeded, ByClaimant)
	require.Error(t, err)
}

// TestTableSafety checks the rules the ledger's promises rest on, so that
// an edit of the table that would break one fails here: each is a property
// of the table, not a restatement of it.
func TestTableSafety(t *testing.T) {
	t.Parallel()
	for _, r := range Rules() {
		// Nothing leaves a terminal state.
		require.False(t, r.From.Terminal(), "%+v leaves a terminal state", r)
		// Only a claim of a READY operation, or a takeover of an expired
		// lease, enters EXECUTING: an unknown outcome is never resubmitted
		// before reconciliation makes it READY.
		if r.To == StateExecuting {
			ok := r.From == StateReady && r.Event == EventClaimed && r.Guard.Has(GuardApprovalInForce) ||
				r.From == StateExecuting && r.Event == EventLeaseTakenOver && r.Guard.Has(GuardFence|GuardLeaseExpired|GuardKeyWindow)
			require.True(t, ok, "%+v enters EXECUTING", r)
		}
		// Every change of a claimed operation is fenced.
		if r.From == StateExecuting || r.From == StateOutcomeUnknown {
			require.True(t, r.Guard.Has(GuardFence), "%+v is not fenced", r)
		}
		// Only the lease holder and the downstream's own report may act on
		// an EXECUTING operation before its lease expires.
		if r.From == StateExecuting && r.By != ByHolder && r.By != ByDownstream {
			require.True(t, r.Guard.Has(GuardLeaseExpired), "%+v acts on a live lease", r)
		}
		// FAILED promises nothing happened: from the holder's answer, only
		// for a refusal of the first send.
		if r.To == StateFailed && r.By == ByHolder {
			require.True(t, r.Guard.Has(GuardFirstSend), "%+v", r)
		}
		// Back to READY after a possible send (not a release) only while a
		// resubmission of the key is still deduplicated, unless an operator
		// says so.
		if r.To == StateReady && (r.From == StateExecuting || r.From == StateOutcomeUnknown) &&
			r.Event != EventReleased && r.By != ByOperator {
			require.True(t, r.Guard.Has(GuardKeyWindow), "%+v", r)
		}
		// The downstream reports only on what was sent to it: a READY
		// operation it settles must have been sent before.
		if r.From == StateReady && r.By == ByDownstream {
			require.True(t, r.Guard.Has(GuardSentBefore), "%+v", r)
		}
		// A release is the holder's alone (only it knows nothing was sent).
		if r.Event == EventReleased {
			require.Equal(t, ByHolder, r.By, "%+v", r)
		}
		// What undoes an approval (cancel, deny, expiry) never follows a
		// send: REJECTED or CANCELLED with an effect behind it would be a lie.
		if (r.To == StateCancelled || r.To == StateRejected || r.To == StateAwaitingApproval) && r.From != "" {
			unsent := r.Guard.Has(GuardUnsent) || r.Guard.Has(GuardLapsedUnsent) || r.Guard.Has(GuardPolicyStale) ||
				r.From == StateAwaitingApproval
			require.True(t, unsent, "%+v may undo a sent operation", r)
		}
		// Nothing is sent that was not judged under a policy in force.
		if r.Event == EventClaimed {
			require.True(t, r.Guard.Has(GuardPolicyCurrent), "%+v", r)
		}
		// An approval in force is neither renewed over nor denied.
		if r.From == StateReady && (r.Event == EventApproved || r.Event == EventDenied || r.Event == EventApprovalExpired) {
			require.True(t, r.Guard.Has(GuardLapsedUnsent), "%+v", r)
		}
	}
}

// TestStatesShape: every state is reachable from creation, and every
// non-terminal state has a way out, so nothing gets stuck by construction.
func TestStatesShape(t *testing.T) {
	t.Parallel()
	var terminal []State
	for _, s := range States {
		if s.Terminal() {
			terminal = append(terminal, s)
		}
	}
	require.ElementsMatch(t, []State{StateSucceeded, StateFailed, StateRejected, StateCancelled}, terminal)
	reached := map[State]bool{}
	frontier := []State{""}
	for len(frontier) > 0 {
		from := frontier[0]
		frontier = frontier[1:]
		for _, tr := range Transitions() {
			if tr.From == from && !reached[tr.To] {
				reached[tr.To] = true
				frontier = append(frontier, tr.To)
			}
		}
	}
	for _, s := range States {
		require.True(t, reached[s], "%s is unreachable", s)
		if s.Terminal() {
			continue
		}
		exits := slices.ContainsFunc(Transitions(), func(tr Transition) bool { return tr.From == s && tr.To != s })
		require.True(t, exits, "%s has no way out", s)
	}
}

// TestStatementsFollowTheTable: the statements the ledger issues carry
// exactly the from-states and guards of their rules (the store's own suite,
// store/guard_test.go, shows that each statement enforces them).
func TestStatementsFollowTheTable(t *testing.T) {
	t.Parallel()
	settings := executor.Settings{KeyRetention: time.Hour, DedupesKeys: true}.WithDefaults()
	l := &Ledger{bound: map[string]bound{"pay@1": {tool: &tool.Tool{Name: "pay", Version: "1", Executor: settings}, settings: settings}}}
	op := Operation{Tenant: "acme", ID: "op_1", Fence: 3, Tool: "pay", ToolVersion: "1"}
	for _, r := range Rules() {
		if r.From == "" {
			continue
		}
		froms, g, err := Guarded(r.Event, r.To, r.By)
		require.NoError(t, err)
		switch r.Event {
		case EventClaimed:
			require.Equal(t, []string{string(StateReady)}, names(froms))
			require.Equal(t, string(r.From), claim.From)
			require.Equal(t, g.Has(GuardApprovalInForce), claim.RequireApprovalInForce)
			require.Equal(t, g.Has(GuardPolicyCurrent), claim.RequirePolicyCurrent)
		case EventLeaseTakenOver:
			to := l.takeOver(op, l.bound["pay@1"], time.Minute)
			require.Equal(t, []string{to.From}, names(froms))
			require.Equal(t, op.Fence, to.Fence)
			require.Equal(t, g.Has(GuardKeyWindow), to.KeyWindow == store.KeyWindow{Retention: time.Hour, Ahead: time.Minute, Factor: keyWindowFactor})
		case EventPolicyChanged, EventPolicyChecked:
			p, err := l.policyApply(op, r.Event, r.To, r.By)
			require.NoError(t, err)
			require.ElementsMatch(t, names(froms), p.From)
			require.True(t, g.Has(GuardPolicyStale), "%+v", r)
		case EventApproved, EventDenied, EventApprovalExpired, EventSuperseded:
			d, err := l.decision(op, r.Event, r.To, r.By)
			require.NoError(t, err)
			require.ElementsMatch(t, names(froms), d.From)
			require.Equal(t, g.Has(GuardLapsedUnsent), d.RequireLapsedUnsent, "%+v", r)
		default:
			tr, err := l.transition(op, r.Event, r.To, r.By)
			require.NoError(t, err)
			require.ElementsMatch(t, names(froms), tr.From)
			require.Equal(t, op.Fence, tr.Fence)
			require.True(t, g.Has(GuardFence), "%+v: the transition statement always checks the fence", r)
			require.Equal(t, g.Has(GuardLeaseExpired), tr.RequireLeaseExpired, "%+v", r)
			require.Equal(t, g.Has(GuardUnsent), tr.RequireUnsent, "%+v", r)
			require.Equal(t, g.Has(GuardFirstSend), tr.RequireFirstSend, "%+v", r)
			require.Equal(t, g.Has(GuardSentBefore), tr.RequireSentIfReady, "%+v", r)
			require.Equal(t, g.Has(GuardKeyWindow), tr.KeyWindow == store.KeyWindow{Retention: time.Hour, Factor: keyWindowFactor}, "%+v", r)
		}
	}
}

// TestIllegalEdgeIsABug: a statement for an edge the table does not list is
// the ledger's defect, never a caller's: under test it panics where it is
// built (in production, one "bug" log line and INTERNAL).
func TestIllegalEdgeIsABug(t *testing.T) {
	t.Parallel()
	l := &Ledger{}
	op := Operation{Tenant: "acme", ID: "op_1", Fence: 3}
	require.Panics(t, func() { _, _ = l.transition(op, EventClaimed, StateSucceeded, ByHolder) })
	require.Panics(t, func() { _, _ = l.decision(op, EventApproved, StateExecuting, ByApprover) })
	require.Panics(t, func() { _, _ = l.policyApply(op, EventPolicyChanged, StateSucceeded, ByClaimant) })
}
