package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
)

// Resolution is an operator's manual verdict.
type Resolution struct {
	// Outcome is StateSucceeded, StateFailed or StateReady.
	Outcome     State
	ExternalRef string
	Note        string
	// Fence, when not 0, is the attempt the verdict is about (the fence the
	// operator read): it applies only while the operation is still there.
	Fence int64
}

// Reconcile resolves an unresolved operation: by the operator's verdict
// when res is given, else by looking the downstream up by the downstream
// key. It returns the operation and what was found.
func (l *Ledger) Reconcile(ctx context.Context, a Actor, id string, res *Resolution) (Operation, string, error) {
	if err := checkID(id); err != nil {
		return Operation{}, "", err
	}
	if res != nil {
		if err := storable("resolution.note", res.Note); err != nil {
			return Operation{}, "", err
		}
		if err := storable("resolution.external_ref", res.ExternalRef); err != nil {
			return Operation{}, "", err
		}
	}
	op, err := l.store.OperationGet(ctx, a.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Operation{}, "", notFound(id)
	}
	if err != nil {
		return Operation{}, "", storeErr(err)
	}
	if res != nil {
		if !a.has(RoleOperator) {
			return Operation{}, "", refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATOR_REQUIRED,
				"a manual resolution needs the operator role")
		}
		return l.resolve(ctx, a, op, *res)
	}
	return l.reconcileOne(ctx, a.Name, op)
}

// unresolved reports whether op needs reconciling: its outcome is unknown,
// or it is EXECUTING and its lease had expired on the database's clock when
// it was read.
func unresolved(op Operation) bool {
	return State(op.State) == StateOutcomeUnknown || State(op.State) == StateExecuting && op.LeaseExpired()
}

// resolvedDetail is Reconcile's detail for a manual resolution, applied or
// repeated.
const resolvedDetail = "resolved by operator"

func (l *Ledger) resolve(ctx context.Context, a Actor, op Operation, r Resolution) (Operation, string, error) {
	if r.Outcome != StateSucceeded && r.Outcome != StateFailed && r.Outcome != StateReady {
		return Operation{}, "", &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "resolution.outcome",
			Message: "outcome must be STATE_SUCCEEDED, STATE_FAILED or STATE_READY"}
	}
	if r.Fence < 0 {
		return Operation{}, "", &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "resolution.fence",
			Message: "fence must be the operation's fence as read (1 or more), or 0 for whichever attempt is current"}
	}
	if !unresolved(op) {
		// Reconcile is IDEMPOTENT: a resolution repeated after it applied
		// (its reply lost) answers as it did, where any other verdict is
		// refused.
		same, err := l.resolvedAs(ctx, op, r)
		if err != nil {
			return Operation{}, "", err
		}
		if same {
			return op, resolvedDetail, nil
		}
		return Operation{}, "", refuse(opledgerv1.ErrorReason_ERROR_REASON_RESOLUTION_NOT_APPLICABLE,
			"only an OUTCOME_UNKNOWN operation, or an EXECUTING one whose lease expired, can be resolved; this one is %s", op.State)
	}
	if err := Check(State(op.State), EventResolved, r.Outcome); err != nil {
		return Operation{}, "", &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "resolution.outcome",
			Message: "outcome must be STATE_SUCCEEDED, STATE_FAILED or STATE_READY"}
	}
	if r.Fence != 0 && r.Fence != op.Fence {
		return Operation{}, "", refuse(opledgerv1.ErrorReason_ERROR_REASON_RESOLUTION_NOT_APPLICABLE,
			"the operation changed since you looked: the verdict was about attempt %d (fence %d), and it is at fence %d now (%s); look again",
			r.Fence, r.Fence, op.Fence, op.State)
	}
	t, err := l.transition(op, EventResolved, r.Outcome, ByOperator)
	if err != nil {
		return Operation{}, "", storeErr(err)
	}
	if r.Fence != 0 {
		t.Fence = r.Fence // the statement's guard: still that attempt
	}
	t.ExternalRef, t.Actor, t.Detail = r.ExternalRef, a.Name, resolutionNote(r.Note)
	if r.Outcome == StateFailed {
		t.SetError = true
		t.Error = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_REJECTED,
			executor.Result{Detail: "resolved as failed by an operator: " + r.Note})
	}
	if r.Outcome == StateSucceeded {
		t.SetError = true
	}
	out, err := l.store.OperationTransition(ctx, t)
	if errors.Is(err, store.ErrConditionFailed) {
		return Operation{}, "", &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS,
			Message: "the operation changed while it was being resolved; read it and try again", RetryAfter: 100 * time.Millisecond}
	}
	if err != nil {
		return Operation{}, "", storeErr(err)
	}
	return out, resolvedDetail, nil
}

// resolvedAs reports whether op is where resolution r, already applied,
// left it: its last event is that verdict (outcome, note, the attempt when
// r names one) and nothing happened since, and it holds r's external
// reference when r gives one. It reads the event log only on this path,
// a refusal's.
func (l *Ledger) resolvedAs(ctx context.Context, op Operation, r Resolution) (bool, error) {
	if State(op.State) != r.Outcome || (r.Fence != 0 && r.Fence != op.Fence) ||
		(r.ExternalRef != "" && r.ExternalRef != op.ExternalRef) {
		return false, nil
	}
	evs, err := l.store.OperationEvents(ctx, op.ID)
	if err != nil {
		return false, storeErr(err)
	}
	if len(evs) == 0 {
		return false, nil
	}
	last := evs[len(evs)-1]
	return last.Seq == op.Events && EventKind(last.Type) == EventResolved && State(last.ToState) == r.Outcome &&
		last.Fence == op.Fence && last.Detail == resolutionNote(r.Note), nil
}

// resolutionNote is the event's detail of a manual resolution.
func resolutionNote(note string) string { return "resolved by an operator: " + note }

// reconcileOne looks an unresolved operation up at the downstream and
// applies what it finds with a transition guarded on the fence it read.
func (l *Ledger) reconcileOne(ctx context.Context, actor string, op Operation) (Operation, string, error) {
	if !unresolved(op) {
		if State(op.State) == StateExecuting {
			return op, fmt.Sprintf("executing: the lease is held until %s", op.LeaseExpiresAt.UTC().Format(time.RFC3339)), nil
		}
		return op, "nothing to reconcile: the operation is " + op.State, nil
	}
	executing := State(op.State) == StateExecuting
	apply := func(to State, ev EventKind, detail string, set func(*store.TransitionParams)) (Operation, string, error) {
		if executing && to == StateOutcomeUnknown {
			ev = EventOutcomeUnknown
		}
		if err := Check(State(op.State), ev, to); err != nil {
			return Operation{}, "", l.bug(err) // unresolved(op) admits only states the table's edges leave
		}
		t, err := l.transition(op, ev, to, ByWatcher)
		if err != nil {
			return Operation{}, "", storeErr(err)
		}
		t.ReconcileAfter, t.Actor, t.Detail = l.cfg.ReconcileBackoff, actor, detail
		if set != nil {
			set(&t)
		}
		out, err := l.store.OperationTransition(ctx, t)
		if errors.Is(err, store.ErrConditionFailed) {
			cur, gerr := l.store.OperationGet(ctx, op.Tenant, op.ID)
			if gerr != nil {
				return Operation{}, "", storeErr(gerr)
			}
			return cur, "the operation changed while it was being reconciled", nil
		}
		if err != nil {
			return Operation{}, "", storeErr(err)
		}
		// to, not out.State: out may show a change made after this one
		// (store.TransitionParams.Base).
		l.opLogger(out).Info("reconciled", "to", to, "detail", detail)
		l.obs.Reconciled(op.Tool, strings.ToLower(string(to)))
		return out, detail, nil
	}
	b, err := l.toolOf(op)
	if err != nil {
		if executing {
			// The lease's end needs no tool to be recorded; leaving the
			// operation EXECUTING would say someone executes it.
			detail := "the lease expired; this server does not serve the tool's version, so it cannot look the outcome up: " + err.Error()
			return apply(StateOutcomeUnknown, EventOutcomeUnknown, detail, setUnknown(detail))
		}
		return op, "inconclusive: " + err.Error(), nil
	}
	looker, hasLookup := b.exec.(executor.Looker)
	if !hasLookup || !b.caps.HasLookup {
		// Without a lookup nothing says whether the attempt landed, so the
		// operation is OUTCOME_UNKNOWN even where the downstream dedupes
		// keys: READY would say nothing was done, and no reconciler,
		// operator or webhook would settle it from there. (An Execute that
		// finds the lease expired first takes it over and resubmits the
		// same key, an agent's request; the reconciler never sends.)
		if executing {
			detail := "the lease expired; the downstream has no lookup, so whether the attempt landed is unknown until a webhook or an operator says"
			return apply(StateOutcomeUnknown, EventOutcomeUnknown, detail, setUnknown("the executor's lease expired before it recorded an outcome"))
		}
		l.obs.Reconciled(op.Tool, "inconclusive")
		return op, "inconclusive: the downstream has no lookup; an operator must resolve it", nil
	}
	callCtx, cancel := context.WithTimeout(ctx, max(b.settings.Timeout, time.Second))
	defer cancel()
	lr := looker.Lookup(callCtx, executor.Call{Tenant: op.Tenant, Tool: op.Tool, ToolVersion: op.ToolVersion,
		OperationID: op.ID, DownstreamKey: op.DownstreamKey, Args: op.Args})
	lr.Result, lr.Detail = executor.Bound(lr.Result), executor.BoundText(lr.Detail)
	if lr.Status == executor.LookupFound && lr.Result.Outcome != executor.OutcomeSucceeded && lr.Result.Outcome != executor.OutcomeFailed {
		// Found, but with no outcome (a request the downstream still
		// processes; a custom lookup outside its contract): it settles
		// nothing.
		lr.Status, lr.Detail = executor.LookupInconclusive, "found at the downstream, without an outcome yet: "+lr.Result.Detail
	}
	switch lr.Status {
	case executor.LookupFound:
		if lr.Result.Outcome == executor.OutcomeFailed {
			return apply(StateFailed, EventReconciled, "found at the downstream: refused", func(t *store.TransitionParams) {
				t.SetError = true
				t.Error = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_REJECTED, lr.Result)
			})
		}
		return apply(StateSucceeded, EventReconciled, "found at the downstream: succeeded", func(t *store.TransitionParams) {
			t.ExternalRef, t.Result, t.SetError = lr.Result.ExternalRef, lr.Result.Body, true
		})
	case executor.LookupNotFound:
		if keyStillDedupes(b, op, 0) && b.caps.LookupConsistent {
			return apply(StateReady, EventReconciled, "not found at the downstream, whose lookup is consistent: the next Execute resubmits the same key", nil)
		}
		detail := "inconclusive: not found, but a miss from this downstream is not proof that nothing happened"
		if b.caps.DedupesKeys && b.caps.LookupConsistent {
			detail = "inconclusive: not found, but the downstream may have forgotten the key (first sent " +
				op.FirstClaimedAt.UTC().Format(time.RFC3339) + ", key retention " + b.settings.KeyRetention.String() + ")"
		}
		if executing {
			return apply(StateOutcomeUnknown, EventOutcomeUnknown, detail, setUnknown(detail))
		}
		l.obs.Reconciled(op.Tool, "inconclusive")
		return op, detail, nil
	default:
		detail := "inconclusive: " + lr.Detail
		if executing {
			return apply(StateOutcomeUnknown, EventOutcomeUnknown, detail, setUnknown(detail))
		}
		l.obs.Reconciled(op.Tool, "inconclusive")
		return op, detail, nil
	}
}

func setUnknown(detail string) func(*store.TransitionParams) {
	return func(t *store.TransitionParams) {
		t.SetError = true
		t.Error = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN, executor.Result{Detail: detail})
	}
}

// RunReconciler resolves stuck operations (OUTCOME_UNKNOWN, or EXECUTING
// with an expired lease) until ctx ends. Every replica runs one; the store
// hands each stuck operation to one replica at a time (FOR UPDATE SKIP
// LOCKED) and backs off exponentially between attempts on it.
func (l *Ledger) RunReconciler(ctx context.Context) {
	t := time.NewTicker(l.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			n, err := l.ReconcileBatch(ctx)
			if err != nil {
				l.logger.Warn("reconciler: batch failed", "error", err)
				break
			}
			if n == 0 {
				break
			}
		}
	}
}

// ReconcileBatch reconciles one batch of due operations and returns how
// many it took.
func (l *Ledger) ReconcileBatch(ctx context.Context) (int, error) {
	ops, err := l.store.OperationClaimUnresolved(ctx, 32, l.cfg.ReconcileBackoff, l.cfg.ReconcileMaxBackoff)
	if err != nil {
		return 0, err
	}
	for _, op := range ops {
		if _, _, err := l.reconcileOne(ctx, "server:"+l.cfg.ServerID, op); err != nil {
			l.opLogger(op).Warn("reconciler: could not reconcile", "error", err)
		}
	}
	return len(ops), nil
}
