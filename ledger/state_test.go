package ledger

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// allEvents lists every event; TestTransitionTable fails if a transition
// names one that is missing here, so a new event cannot escape the table.
var allEvents = []Event{EventPrepared, EventApproved, EventDenied, EventApprovalExpired, EventClaimed,
	EventLeaseTakenOver, EventSucceeded, EventFailed, EventOutcomeUnknown, EventReleased, EventReconciled,
	EventResolved, EventCancelled}

// TestTransitionTable checks every (from, event, to) combination: exactly
// the listed transitions are legal, nothing leaves a terminal state, and
// nothing enters EXECUTING from OUTCOME_UNKNOWN.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	listed := map[Transition]bool{}
	for _, tr := range Transitions() {
		require.False(t, listed[tr], "%v is listed twice", tr)
		listed[tr] = true
		require.True(t, tr.From == "" || slices.Contains(States, tr.From), "%v: unknown from state", tr)
		require.Contains(t, States, tr.To, "%v: unknown to state", tr)
		require.Contains(t, allEvents, tr.Event, "%v: event missing from allEvents", tr)
		require.Equal(t, tr.From == "", tr.Event == EventPrepared, "%v: only PREPARED creates, and it only creates", tr)
	}

	froms := append([]State{""}, States...)
	checked := 0
	for _, from := range froms {
		for _, ev := range allEvents {
			for _, to := range States {
				tr := Transition{from, ev, to}
				err := Check(from, ev, to)
				checked++
				if listed[tr] {
					require.NoError(t, err, "%v must be legal", tr)
				} else {
					require.Error(t, err, "%v must be illegal", tr)
				}
				if from.Terminal() {
					require.Error(t, err, "%v leaves a terminal state", tr)
				}
				if from == StateOutcomeUnknown && to == StateExecuting {
					require.Error(t, err, "%v resubmits an unknown outcome", tr)
				}
			}
		}
	}
	require.Equal(t, (len(States)+1)*len(allEvents)*len(States), checked)

	// FromStates is the guard of each UPDATE: exactly the listed sources.
	for _, ev := range allEvents {
		for _, to := range States {
			var want []State
			for _, from := range States {
				if listed[Transition{from, ev, to}] {
					want = append(want, from)
				}
			}
			require.ElementsMatch(t, want, FromStates(ev, to), "FromStates(%s, %s)", ev, to)
		}
	}
}

func TestStatesShape(t *testing.T) {
	t.Parallel()
	var terminal []State
	for _, s := range States {
		if s.Terminal() {
			terminal = append(terminal, s)
		}
	}
	require.ElementsMatch(t, []State{StateSucceeded, StateFailed, StateRejected, StateCancelled}, terminal)

	// Every state is reachable from creation, and every non-terminal state
	// has a way out: nothing can get stuck by construction.
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
