package ledger

import (
	"time"

	"github.com/opledger/opledger/store"
)

// The statements that change an operation are built here from the state
// machine's table (state.go): the states a transition may start from and
// the guards its statement checks come from the table's rules for its
// event, target state and party, never from the call site.

func names(states []State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// transition is the guarded statement for op taking event to `to` by
// party: it applies only while op's fence is the one read and every guard
// of the table holds. The caller adds what the transition records.
func (l *Ledger) transition(op Operation, event EventKind, to State, by Party) (store.TransitionParams, error) {
	froms, g, err := l.guarded(event, to, by)
	if err != nil {
		return store.TransitionParams{}, err
	}
	t := store.TransitionParams{Tenant: op.Tenant, ID: op.ID, From: names(froms), Fence: op.Fence, To: string(to), Event: string(event),
		RequireLeaseExpired: g.Has(GuardLeaseExpired), RequireUnsent: g.Has(GuardUnsent), RequireFirstSend: g.Has(GuardFirstSend),
		RequireSentIfReady: g.Has(GuardSentBefore),
		Base:               op}
	if g.Has(GuardKeyWindow) {
		b, err := l.toolOf(op)
		if err != nil {
			return store.TransitionParams{}, err
		}
		t.KeyWindow = keyWindow(b, 0)
	}
	return t, nil
}

// guarded is Guarded for a statement the ledger is about to run: a
// combination the table does not list is the ledger's own defect (bug),
// never a caller's.
func (l *Ledger) guarded(event EventKind, to State, by Party) ([]State, Guard, error) {
	froms, g, err := Guarded(event, to, by)
	if err != nil {
		return nil, 0, l.bug(err)
	}
	return froms, g, nil
}

// decision is the guarded statement for an approval-related change of op.
func (l *Ledger) decision(op Operation, event EventKind, to State, by Party) (store.Decision, error) {
	froms, g, err := l.guarded(event, to, by)
	if err != nil {
		return store.Decision{}, err
	}
	return store.Decision{Tenant: op.Tenant, ID: op.ID, From: names(froms), To: string(to), Event: string(event),
		RequireLapsedUnsent: g.Has(GuardLapsedUnsent)}, nil
}

// claim is the guarded claim of a READY operation by an Execute.
var claim = func() store.Claim {
	froms, g, err := Guarded(EventClaimed, StateExecuting, ByClaimant)
	if err != nil || len(froms) != 1 {
		panic("ledger: the table must have exactly one claim rule")
	}
	return store.Claim{From: string(froms[0]), To: string(StateExecuting), Event: string(EventClaimed),
		RequireApprovalInForce: g.Has(GuardApprovalInForce), RequirePolicyCurrent: g.Has(GuardPolicyCurrent)}
}()

// policyApply is the guarded statement applying the policy in force to op,
// which was judged under another (GuardPolicyStale: the statement checks
// the digest op was read with, and that nothing was sent).
func (l *Ledger) policyApply(op Operation, event EventKind, to State, by Party) (store.PolicyApply, error) {
	froms, g, err := l.guarded(event, to, by)
	if err != nil {
		return store.PolicyApply{}, err
	}
	if !g.Has(GuardPolicyStale) {
		panic("ledger: a policy change's rule must be guarded by the policy it was judged under")
	}
	return store.PolicyApply{Tenant: op.Tenant, ID: op.ID, From: names(froms), To: string(to), Event: string(event),
		OldDigest: op.PolicyDigest}, nil
}

// takeOver is the guarded takeover of op's expired lease; ahead is how late
// the resubmission may reach the downstream.
func (l *Ledger) takeOver(op Operation, b bound, ahead time.Duration) store.TakeOver {
	froms, g, err := Guarded(EventLeaseTakenOver, StateExecuting, ByWatcher)
	if err != nil || len(froms) != 1 || !g.Has(GuardFence|GuardLeaseExpired) {
		// The takeover statement always checks the fence and the lease.
		panic("ledger: the table must have exactly one takeover rule, guarded by the fence and the lease")
	}
	t := store.TakeOver{Tenant: op.Tenant, ID: op.ID, From: string(froms[0]), Event: string(EventLeaseTakenOver), Fence: op.Fence}
	if g.Has(GuardKeyWindow) {
		t.KeyWindow = keyWindow(b, ahead)
	}
	return t
}
