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

// Event names a transition; it is what the event log records.
type Event string

// The events, one per kind of transition.
const (
	EventPrepared        Event = "PREPARED"
	EventApproved        Event = "APPROVED"
	EventDenied          Event = "DENIED"
	EventApprovalExpired Event = "APPROVAL_EXPIRED"
	EventClaimed         Event = "CLAIMED"
	EventLeaseTakenOver  Event = "LEASE_TAKEN_OVER"
	EventSucceeded       Event = "SUCCEEDED"
	EventFailed          Event = "FAILED"
	EventOutcomeUnknown  Event = "OUTCOME_UNKNOWN"
	EventReleased        Event = "RELEASED"
	EventReconciled      Event = "RECONCILED"
	EventResolved        Event = "RESOLVED_MANUALLY"
	EventCancelled       Event = "CANCELLED"
)

// Transition is one legal edge of the state machine.
type Transition struct {
	From  State
	Event Event
	To    State
}

// transitions names every legal transition. Anything not listed is illegal;
// in particular no edge leaves a terminal state, and no edge enters
// EXECUTING from OUTCOME_UNKNOWN (an unknown outcome is never resubmitted
// without reconciliation proving nothing reached the downstream).
var transitions = []Transition{
	// Prepare creates the operation in one of these (From is empty).
	{"", EventPrepared, StateAwaitingApproval},
	{"", EventPrepared, StateReady},

	{StateAwaitingApproval, EventApproved, StateReady},
	{StateAwaitingApproval, EventDenied, StateRejected},
	{StateAwaitingApproval, EventCancelled, StateCancelled},
	// An approval that expired before anyone executed the operation.
	{StateReady, EventApprovalExpired, StateAwaitingApproval},
	// A re-approval while READY extends the approval.
	{StateReady, EventApproved, StateReady},
	{StateReady, EventDenied, StateRejected},
	{StateReady, EventCancelled, StateCancelled},

	{StateReady, EventClaimed, StateExecuting},
	{StateExecuting, EventLeaseTakenOver, StateExecuting},
	{StateExecuting, EventSucceeded, StateSucceeded},
	{StateExecuting, EventFailed, StateFailed},
	{StateExecuting, EventOutcomeUnknown, StateOutcomeUnknown},
	// Nothing reached the downstream: safe to try again.
	{StateExecuting, EventReleased, StateReady},

	// A late but definitive answer from the fenced holder, or a lookup.
	{StateOutcomeUnknown, EventSucceeded, StateSucceeded},
	{StateOutcomeUnknown, EventFailed, StateFailed},
	{StateOutcomeUnknown, EventReconciled, StateSucceeded},
	{StateOutcomeUnknown, EventReconciled, StateFailed},
	// A trustworthy not-found from a downstream that dedupes keys.
	{StateOutcomeUnknown, EventReconciled, StateReady},
	{StateExecuting, EventReconciled, StateSucceeded},
	{StateExecuting, EventReconciled, StateFailed},
	{StateExecuting, EventReconciled, StateReady},
	{StateExecuting, EventReconciled, StateOutcomeUnknown},

	{StateOutcomeUnknown, EventResolved, StateSucceeded},
	{StateOutcomeUnknown, EventResolved, StateFailed},
	{StateOutcomeUnknown, EventResolved, StateReady},
	{StateExecuting, EventResolved, StateSucceeded},
	{StateExecuting, EventResolved, StateFailed},
	{StateExecuting, EventResolved, StateReady},
}

var legal = func() map[Transition]bool {
	m := make(map[Transition]bool, len(transitions))
	for _, t := range transitions {
		m[t] = true
	}
	return m
}()

// Transitions returns every legal transition.
func Transitions() []Transition { return append([]Transition(nil), transitions...) }

// Check returns an error unless from --event--> to is a legal transition.
// Every write path asks it before issuing its guarded UPDATE, so a code path
// that would overwrite a terminal state fails loudly instead of silently.
func Check(from State, event Event, to State) error {
	if legal[Transition{from, event, to}] {
		return nil
	}
	return fmt.Errorf("ledger: illegal transition %s --%s--> %s", orNone(from), event, to)
}

// FromStates returns the states from which event leads to to: the guard of
// the UPDATE that performs it.
func FromStates(event Event, to State) []State {
	var out []State
	for _, t := range transitions {
		if t.Event == event && t.To == to && t.From != "" {
			out = append(out, t.From)
		}
	}
	return out
}

func orNone(s State) string {
	if s == "" {
		return "(none)"
	}
	return string(s)
}
