package ledger

import "fmt"

// State is an operation's lifecycle state, stored as its name.
type State string

// The operation states. SUCCEEDED, FAILED, REJECTED and CANCELLED are
// terminal.
const (
	StateAwaitingApproval State = "AWAITING_APPROVAL"
	StateReady            State = "READY"
	StateExecuting        State = "EXECUTING"
	StateSucceeded        State = "SUCCEEDED"
	StateFailed           State = "FAILED"
	StateOutcomeUnknown   State = "OUTCOME_UNKNOWN"
	StateRejected         State = "REJECTED"
	StateCancelled        State = "CANCELLED"
)

// States lists every state, for tables and tests.
var States = []State{StateAwaitingApproval, StateReady, StateExecuting, StateSucceeded,
	StateFailed, StateOutcomeUnknown, StateRejected, StateCancelled}

// Terminal reports whether nothing may ever change the state again.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateRejected, StateCancelled:
		return true
	}
	return false
}

// EventKind names a kind of transition: what the event log records as an
// entry's type (store.Event.Type; an entry itself is an OperationEvent).
type EventKind string

// The events, one per kind of transition.
const (
	EventPrepared        EventKind = "PREPARED"
	EventApproved        EventKind = "APPROVED"
	EventDenied          EventKind = "DENIED"
	EventApprovalExpired EventKind = "APPROVAL_EXPIRED"
	EventClaimed         EventKind = "CLAIMED"
	EventLeaseTakenOver  EventKind = "LEASE_TAKEN_OVER"
	EventSucceeded       EventKind = "SUCCEEDED"
	EventFailed          EventKind = "FAILED"
	EventOutcomeUnknown  EventKind = "OUTCOME_UNKNOWN"
	EventReleased        EventKind = "RELEASED"
	EventReconciled      EventKind = "RECONCILED"
	EventResolved        EventKind = "RESOLVED_MANUALLY"
	EventCancelled       EventKind = "CANCELLED"
	// EventPolicyChanged: the policy in force demands more than the one the
	// operation was judged under (back to AWAITING_APPROVAL), or refuses it
	// (REJECTED).
	EventPolicyChanged EventKind = "POLICY_CHANGED"
	// EventPolicyChecked: judged again under a changed policy that demands
	// no more than it has.
	EventPolicyChecked EventKind = "POLICY_CHECKED"
	// EventSuperseded: approved with edited arguments; a new operation
	// carries them.
	EventSuperseded EventKind = "SUPERSEDED"
)

// Party is who takes a transition. The same edge may need different guards
// depending on who takes it: the executor holding the lease may record an
// unknown outcome at once, anyone else only once the lease has expired.
type Party string

// The parties.
const (
	// ByAgent prepares and cancels.
	ByAgent Party = "agent"
	// ByApprover decides.
	ByApprover Party = "approver"
	// ByClaimant is an Execute claiming a READY operation, or finding its
	// approval lapsed.
	ByClaimant Party = "claimant"
	// ByHolder is the executor holding the operation's lease (its fence),
	// recording what the downstream answered.
	ByHolder Party = "holder"
	// ByWatcher is an Execute or the reconciler acting on an operation
	// whose lease expired or whose outcome is unknown: a takeover, a lookup.
	ByWatcher Party = "watcher"
	// ByDownstream is the downstream's own signed report (a webhook), which
	// settles an outcome even while an executor still holds the lease.
	ByDownstream Party = "downstream"
	// ByOperator resolves by hand.
	ByOperator Party = "operator"
)

// Guard is a condition a transition's statement checks in the database,
// besides the from-state, on the row and on the database's clock.
type Guard uint16

// The guards.
const (
	// GuardFence: the caller's fencing token is still the operation's.
	GuardFence Guard = 1 << iota
	// GuardLeaseExpired: an EXECUTING operation's lease has expired.
	GuardLeaseExpired
	// GuardUnsent: nothing may have reached the downstream yet.
	GuardUnsent
	// GuardFirstSend: no attempt before the current fence may have reached
	// the downstream (FAILED is only for a refusal of the first send).
	GuardFirstSend
	// GuardKeyWindow: a resubmission of the downstream key decided now is
	// still inside the downstream's key retention.
	GuardKeyWindow
	// GuardApprovalInForce: the approval, if required, has not lapsed, or
	// was consumed by a send.
	GuardApprovalInForce
	// GuardLapsedUnsent: the approval has lapsed and nothing was sent.
	GuardLapsedUnsent
	// GuardSentBefore: a READY operation was sent before (an attempt that
	// ended other than by a release): only then can the downstream report
	// an outcome of it. It says nothing about other states.
	GuardSentBefore
	// GuardPolicyCurrent: an operation nothing was sent for was judged under
	// a policy the server holds current.
	GuardPolicyCurrent
	// GuardPolicyStale: the operation was judged under the policy the caller
	// read (not judged again since), and nothing was sent.
	GuardPolicyStale
)

// Has reports whether g includes every guard of h.
func (g Guard) Has(h Guard) bool { return g&h == h }

// Rule is one legal edge of the state machine, who takes it, and the
// guards its statement checks.
type Rule struct {
	From  State
	Event EventKind
	To    State
	By    Party
	Guard Guard
}

// Transition is one legal edge of the state machine, whoever takes it.
type Transition struct {
	From  State
	Event EventKind
	To    State
}

// rules is the state machine: every legal transition, who takes it, and
// what its guarded statement checks. The statements are built from it (see
// guards.go): a transition's statement takes the from-states and the guards
// of its (event, to, party) from here. Anything not listed is illegal; in
// particular no edge leaves a terminal state, and no edge enters EXECUTING
// from OUTCOME_UNKNOWN (an unknown outcome is never resubmitted without
// reconciliation proving nothing reached the downstream).
var rules = []Rule{
	// Prepare creates the operation in one of these (From is empty).
	{"", EventPrepared, StateAwaitingApproval, ByAgent, 0},
	{"", EventPrepared, StateReady, ByAgent, 0},

	{StateAwaitingApproval, EventApproved, StateReady, ByApprover, 0},
	{StateAwaitingApproval, EventDenied, StateRejected, ByApprover, 0},
	// A quorum: an approval that does not complete it keeps the operation
	// waiting (the statement counts: READY exactly at the N-th).
	{StateAwaitingApproval, EventApproved, StateAwaitingApproval, ByApprover, 0},
	// Approve-with-edit: the original is rejected, a new operation carries
	// the edit.
	{StateAwaitingApproval, EventSuperseded, StateRejected, ByApprover, 0},
	// The policy in force refuses an operation that awaits a decision, or
	// whose approval an approver would renew (nothing sent): judged by
	// Approve with the row locked.
	{StateAwaitingApproval, EventPolicyChanged, StateRejected, ByApprover, GuardPolicyStale},
	{StateReady, EventPolicyChanged, StateRejected, ByApprover, GuardPolicyStale},
	// A lapsed approval (nothing sent) may be renewed or denied while the
	// operation still says READY; one in force is replayed or conflicts.
	{StateReady, EventApproved, StateReady, ByApprover, GuardLapsedUnsent},
	{StateReady, EventApproved, StateAwaitingApproval, ByApprover, GuardLapsedUnsent},
	{StateReady, EventDenied, StateRejected, ByApprover, GuardLapsedUnsent},
	// Cancel: never once something may have been sent.
	{StateAwaitingApproval, EventCancelled, StateCancelled, ByAgent, GuardFence | GuardUnsent},
	{StateReady, EventCancelled, StateCancelled, ByAgent, GuardFence | GuardUnsent},

	// An approval that lapsed before anything was sent.
	{StateReady, EventApprovalExpired, StateAwaitingApproval, ByClaimant, GuardLapsedUnsent},
	{StateReady, EventClaimed, StateExecuting, ByClaimant, GuardApprovalInForce | GuardPolicyCurrent},
	// An operation judged under another policy than the one in force is
	// judged again before anything is sent: it waits for what the policy in
	// force demands, is refused, or is judged current.
	{StateReady, EventPolicyChanged, StateAwaitingApproval, ByClaimant, GuardPolicyStale},
	{StateReady, EventPolicyChanged, StateRejected, ByClaimant, GuardPolicyStale},
	{StateReady, EventPolicyChecked, StateReady, ByClaimant, GuardPolicyStale},

	// The holder records what the downstream said. A late but definitive
	// answer also resolves an OUTCOME_UNKNOWN declared while it held the
	// fence.
	{StateExecuting, EventSucceeded, StateSucceeded, ByHolder, GuardFence},
	{StateOutcomeUnknown, EventSucceeded, StateSucceeded, ByHolder, GuardFence},
	{StateExecuting, EventFailed, StateFailed, ByHolder, GuardFence | GuardFirstSend},
	{StateOutcomeUnknown, EventFailed, StateFailed, ByHolder, GuardFence | GuardFirstSend},
	{StateExecuting, EventOutcomeUnknown, StateOutcomeUnknown, ByHolder, GuardFence},
	// Nothing reached the downstream: safe to try again.
	{StateExecuting, EventReleased, StateReady, ByHolder, GuardFence},

	// An expired lease: taken over where the downstream dedupes keys (and
	// still remembers this one), otherwise the outcome is unknown.
	{StateExecuting, EventLeaseTakenOver, StateExecuting, ByWatcher, GuardFence | GuardLeaseExpired | GuardKeyWindow},
	{StateExecuting, EventOutcomeUnknown, StateOutcomeUnknown, ByWatcher, GuardFence | GuardLeaseExpired},
	// A lookup. READY only on a trustworthy not-found from a downstream
	// that dedupes keys and still remembers this one.
	{StateOutcomeUnknown, EventReconciled, StateSucceeded, ByWatcher, GuardFence},
	{StateOutcomeUnknown, EventReconciled, StateFailed, ByWatcher, GuardFence},
	{StateOutcomeUnknown, EventReconciled, StateReady, ByWatcher, GuardFence | GuardKeyWindow},
	{StateExecuting, EventReconciled, StateSucceeded, ByWatcher, GuardFence | GuardLeaseExpired},
	{StateExecuting, EventReconciled, StateFailed, ByWatcher, GuardFence | GuardLeaseExpired},
	{StateExecuting, EventReconciled, StateReady, ByWatcher, GuardFence | GuardLeaseExpired | GuardKeyWindow},
	// The downstream's signed report.
	{StateExecuting, EventReconciled, StateSucceeded, ByDownstream, GuardFence},
	{StateExecuting, EventReconciled, StateFailed, ByDownstream, GuardFence},
	{StateOutcomeUnknown, EventReconciled, StateSucceeded, ByDownstream, GuardFence},
	{StateOutcomeUnknown, EventReconciled, StateFailed, ByDownstream, GuardFence},
	// READY after a send: a lookup that missed a request still in flight,
	// or an operator's resolution; the downstream's report settles it.
	{StateReady, EventReconciled, StateSucceeded, ByDownstream, GuardFence | GuardSentBefore},
	{StateReady, EventReconciled, StateFailed, ByDownstream, GuardFence | GuardSentBefore},

	{StateOutcomeUnknown, EventResolved, StateSucceeded, ByOperator, GuardFence},
	{StateOutcomeUnknown, EventResolved, StateFailed, ByOperator, GuardFence},
	{StateOutcomeUnknown, EventResolved, StateReady, ByOperator, GuardFence},
	{StateExecuting, EventResolved, StateSucceeded, ByOperator, GuardFence | GuardLeaseExpired},
	{StateExecuting, EventResolved, StateFailed, ByOperator, GuardFence | GuardLeaseExpired},
	{StateExecuting, EventResolved, StateReady, ByOperator, GuardFence | GuardLeaseExpired},
}

var legal = func() map[Transition]bool {
	m := make(map[Transition]bool, len(rules))
	for _, r := range rules {
		m[Transition{r.From, r.Event, r.To}] = true
	}
	return m
}()

// Rules returns the state machine's table.
func Rules() []Rule { return append([]Rule(nil), rules...) }

// Transitions returns every legal transition, whoever takes it.
func Transitions() []Transition {
	var out []Transition
	seen := map[Transition]bool{}
	for _, r := range rules {
		t := Transition{r.From, r.Event, r.To}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// Check returns an error unless from --event--> to is a legal transition.
func Check(from State, event EventKind, to State) error {
	if legal[Transition{from, event, to}] {
		return nil
	}
	return fmt.Errorf("ledger: illegal transition %s --%s--> %s", orNone(from), event, to)
}

// Guarded returns what the statement taking event to `to` by party checks:
// the states it may start from and its guards (the union over those
// states; a lease guard only concerns EXECUTING). It fails for a
// combination the table does not list.
func Guarded(event EventKind, to State, by Party) ([]State, Guard, error) {
	var froms []State
	var g Guard
	for _, r := range rules {
		if r.Event == event && r.To == to && r.By == by && r.From != "" {
			froms = append(froms, r.From)
			g |= r.Guard
		}
	}
	if len(froms) == 0 {
		return nil, 0, fmt.Errorf("ledger: no transition --%s--> %s by %s", event, to, by)
	}
	return froms, g, nil
}

func orNone(s State) string {
	if s == "" {
		return "(none)"
	}
	return string(s)
}
