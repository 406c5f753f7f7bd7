package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/failpoint"
	"github.com/opledger/opledger/store"
)

// StoredError is the JSON form of Operation.error: why an operation FAILED
// or why its outcome is unknown. The server renders it as a
// google.rpc.Status whose code is the reason's (package reason).
type StoredError struct {
	Reason     string          `json:"reason"`
	Message    string          `json:"message"`
	HTTPStatus int             `json:"http_status,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
}

func storedError(reason opledgerv1.ErrorReason, res executor.Result) []byte {
	b, _ := json.Marshal(StoredError{Reason: reason.String()[len("ERROR_REASON_"):],
		Message: res.Detail, HTTPStatus: res.HTTPStatus, Body: res.Body})
	return b
}

// errReleasedUnsent is run's report that its attempt sent nothing, for a
// reason of the claim's own (the approval ended first, or the lease was
// spent waiting for the row lock), and that it released the operation:
// Execute claims again, and that claim answers (a lapsed approval is
// refused; a fresh lease runs the call).
var errReleasedUnsent = errors.New("ledger: released unsent; claim again")

// maxClaimRounds bounds Execute's loop of claim attempts against concurrent
// state changes; each round reads the database afresh.
const maxClaimRounds = 50

// Execute performs the operation's downstream effect at most once and
// answers every repeat from the ledger; see the Execute RPC's contract.
// replayed reports that the outcome was already recorded and no downstream
// request was made by this call.
func (l *Ledger) Execute(ctx context.Context, a Actor, id string, wait time.Duration) (Operation, bool, error) {
	// A cached finished operation is answered in this small frame: execute's
	// frame is large, and entering it would grow the goroutine's stack (a
	// stack copy) on every replay.
	if f, ok := l.finished.Get(opKey{a.Tenant, id}); ok {
		return l.replayFinished(f.op)
	}
	return l.execute(ctx, a, id, wait)
}

func (l *Ledger) execute(ctx context.Context, a Actor, id string, wait time.Duration) (Operation, bool, error) {
	if err := checkID(id); err != nil {
		return Operation{}, false, err
	}
	wait = min(max(wait, 0), l.cfg.MaxWait)
	deadline := time.Now().Add(wait)
	var sub <-chan struct{}
	if wait > 0 && l.listener != nil {
		// Subscribe before the first read: a notification between reading
		// EXECUTING and subscribing would otherwise be lost, and the
		// caller would sleep until the next poll.
		ch, cancel := l.listener.Subscribe(id)
		defer cancel()
		sub = ch
	}
	cl := claim
	cl.PolicyDigests = l.policyDigests
	if failpoint.Defect(failpoint.DefectPolicyClaim) {
		// Test-only, failpoints builds: the claim ignores the policy
		// digest (the policy decides only at Prepare), for the chaos
		// suite's control run.
		cl.RequirePolicyCurrent = false
	}
	// The copy this process wrote at the Prepare or approval, if any: the
	// first claim returns only what it changes (store.Claim.Base).
	cl.Base, _ = l.takeLive(a.Tenant, id)
	for round := 0; round < maxClaimRounds; round++ {
		// Taken before the claim: the lease and the approval the claim
		// measures on the database's clock end no earlier than this instant
		// plus what the claim reports as left (see run).
		claimStart := time.Now()
		var op Operation
		var claimed bool
		var err, gone error
		if l.handing(func() bool {
			claimCtx, cancel, herr := handingCtx(ctx)
			if herr != nil {
				gone = herr
				return false
			}
			owner := l.leaseOwner()
			op, claimed, err = l.store.OperationClaim(claimCtx, a.Tenant, id, cl, store.Lease{Owner: owner, Duration: l.maxLease, Actor: a.Name})
			cancel()
			if store.MayHaveCommitted(err) {
				l.recoverClaim(a.Tenant, id, owner)
			}
			return claimed && err == nil
		}) {
			res, replayed, err := func() (Operation, bool, error) {
				defer l.attempts.end()
				return l.run(ctx, op, claimStart, false)
			}()
			if errors.Is(err, errReleasedUnsent) {
				cl.Base = Operation{}
				continue // released: the next claim judges the approval
			}
			return res, replayed, err
		}
		if gone != nil {
			return Operation{}, false, gone
		}
		cl.Base = Operation{} // a later round follows a change this copy missed
		if errors.Is(err, store.ErrNotFound) {
			return Operation{}, false, notFound(id)
		}
		if err != nil {
			return Operation{}, false, storeErr(err)
		}
		switch State(op.State) {
		case StateSucceeded, StateFailed, StateRejected, StateCancelled:
			l.remember(op, claimStart)
			return l.replayFinished(op)
		case StateOutcomeUnknown:
			l.obs.DuplicatePrevented("Execute", op.Tool, true)
			return op, true, nil
		case StateAwaitingApproval:
			return Operation{}, false, refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED,
				"the operation waits for an approver's decision")
		case StateReady:
			if op.FirstSentFence == 0 && !l.policyCurrent(op) {
				// Judged under a policy no longer in force here: judged again
				// before anything is sent.
				if err := l.rejudge(ctx, a, op); err != nil {
					return Operation{}, false, err
				}
				continue
			}
			// The claim refuses a lapsed approval on the database's clock;
			// expireApproval's guard uses the same clock, so this process's
			// clock never decides.
			// An approval is consumed by the first send: once the operation
			// may have reached the downstream it may have taken effect, so it
			// never goes back to AWAITING_APPROVAL, where it could be denied;
			// the next claim resubmits the same key instead. A claim that was
			// released with nothing sent consumes nothing.
			if op.ApprovalRequired && op.FirstSentFence == 0 && op.Fence > 0 && cl.RequireApprovalInForce &&
				failpoint.Defect(failpoint.DefectApprovalClaim) {
				// Test-only, failpoints builds: the fixed defect of the first
				// claim consuming the approval, for the chaos suite's control
				// run: an operation claimed before is claimed again whatever
				// its approval says.
				cl.RequireApprovalInForce = false
				continue
			}
			if op.ApprovalRequired && op.FirstSentFence == 0 {
				if l.hooks != nil && l.hooks.BeforeApprovalExpiry != nil {
					l.hooks.BeforeApprovalExpiry(ctx, op)
				}
				if err := l.expireApproval(ctx, a, op); err != nil {
					return Operation{}, false, err
				}
			}
			// Someone released it, or renewed its approval, between our
			// claim and read: claim again.
			continue
		case StateExecuting:
			if op.LeaseExpired() {
				res, done, err := l.abandoned(ctx, a, op)
				if done || err != nil {
					return res, false, err
				}
				continue
			}
			remaining := time.Until(deadline)
			if remaining <= 0 {
				l.obs.DuplicatePrevented("Execute", op.Tool, false)
				return op, false, nil // pending: the same operation, still executing
			}
			if sub != nil && !op.Waited && !l.holdsLease(op.LeaseOwner) {
				// The holder is another replica: ask for a notification when
				// its attempt ends (only waited-on outcomes notify). A holder
				// in this process wakes us itself.
				marked, err := l.store.OperationMarkWaited(ctx, op.Tenant, op.ID, op.Fence)
				if err != nil {
					return Operation{}, false, storeErr(err)
				}
				if !marked {
					continue // the attempt already ended: read its outcome
				}
			}
			if l.hooks != nil && l.hooks.Waiting != nil {
				l.hooks.Waiting(ctx, op)
			}
			// Poll as well as listen: a notification can be lost while the
			// listener reconnects, and a lease can expire silently.
			timer := time.NewTimer(min(remaining, op.LeaseRemaining()+10*time.Millisecond, l.cfg.WaitPoll))
			select {
			case <-ctx.Done():
				timer.Stop()
				return op, false, nil
			case <-sub:
			case <-timer.C:
			}
			timer.Stop()
			round-- // waiting is not a lost race
		}
	}
	return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS,
		Message: "the operation is changing under concurrent callers; retry", RetryAfter: 100 * time.Millisecond}
}

// replayFinished answers an Execute of a finished operation: its recorded
// outcome, or the refusal that a rejected or cancelled one always gets.
func (l *Ledger) replayFinished(op Operation) (Operation, bool, error) {
	switch State(op.State) {
	case StateRejected:
		if op.SupersededBy != "" {
			return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_SUPERSEDED,
				Message: fmt.Sprintf("an approver approved this operation with edited arguments: execute %s, which carries them "+
					"(Get it to see what will run); this one will never run", op.SupersededBy),
				Metadata: map[string]string{"superseded_by": op.SupersededBy, "operation_id": op.ID}}
		}
		if op.ApprovalDecision != DecisionDeny {
			// Rejected by a changed policy before anything was sent
			// (OperationPolicyApply records no decision).
			return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED,
				Message:  "the policy in force refused the operation before anything was sent (its event log names the rule); it will never run",
				Metadata: map[string]string{"operation_id": op.ID}}
		}
		return Operation{}, false, refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_REJECTED,
			"an approver denied the operation")
	case StateCancelled:
		return Operation{}, false, refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED,
			"the operation was cancelled")
	}
	l.obs.DuplicatePrevented("Execute", op.Tool, true)
	return op, true, nil
}

// expireApproval moves a READY operation whose approval lapsed back to
// AWAITING_APPROVAL, so its state tells the truth, and refuses the Execute.
// It returns nil when the guarded update finds the approval renewed (or the
// state moved) since op was read: the caller then claims again rather than
// refusing an operation that is executable.
func (l *Ledger) expireApproval(ctx context.Context, a Actor, op Operation) error {
	d, err := decision(op, EventApprovalExpired, StateAwaitingApproval, ByClaimant)
	if err != nil {
		return storeErr(err)
	}
	d.Actor, d.Detail = a.Name, "approval expired at "+op.ApprovalExpiresAt.UTC().Format(time.RFC3339)
	d.Notify = l.notifyOn()
	_, err = l.store.OperationDecide(ctx, d)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return storeErr(err)
	}
	if l.notifyOn() {
		l.kickNotifier()
	}
	return refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_EXPIRED,
		"the approval expired at %s; it must be approved again", op.ApprovalExpiresAt.UTC().Format(time.RFC3339))
}

// abandoned handles an EXECUTING operation whose lease expired: a downstream
// that dedupes keys lets us take over with a new fence and resubmit the same
// key; otherwise nobody can know whether the first attempt landed, and the
// operation becomes OUTCOME_UNKNOWN. done=false means someone else moved
// first: read again.
func (l *Ledger) abandoned(ctx context.Context, a Actor, op Operation) (Operation, bool, error) {
	b, err := l.toolOf(op)
	if err != nil {
		return Operation{}, true, err
	}
	// The takeover's request may reach the downstream as late as the end of
	// its lease: the key must still be remembered then. The statement checks
	// that on the database's clock; a refusal falls through to
	// OUTCOME_UNKNOWN below.
	if b.caps.DedupesKeys || failpoint.Defect(failpoint.DefectTakeoverNoDedupe) {
		var taken Operation
		var err, gone error
		// The takeover's lease starts when its statement does (now()), which
		// may be long before the statement returns: it may wait for the row
		// lock. Its deadline is counted from before the statement, so the
		// request never reaches the downstream after the lease ended.
		takeStart := time.Now()
		if l.handing(func() bool {
			takeCtx, cancel, herr := handingCtx(ctx)
			if herr != nil {
				gone = herr
				return false
			}
			taken, err = l.store.OperationTakeOver(takeCtx, l.takeOver(op, b, l.lease(b)),
				store.Lease{Owner: l.leaseOwner(), Duration: l.lease(b), Actor: a.Name})
			cancel()
			return err == nil
		}) {
			defer l.attempts.end()
		}
		if gone != nil {
			return Operation{}, true, gone
		}
		switch {
		case err == nil:
			l.opLogger(taken).Warn("took over an expired lease", "previous_fence", op.Fence)
			res, _, err := l.run(ctx, taken, takeStart, true)
			return res, true, err
		case !errors.Is(err, store.ErrNotFound):
			return Operation{}, true, storeErr(err)
		}
	}
	detail := "lease expired; the downstream does not dedupe keys, so it is never resubmitted"
	if b.caps.DedupesKeys {
		detail = "lease expired; the downstream may have forgotten the key by the time a resubmission reached it, so it is not resubmitted"
	}
	t, err := l.transition(op, EventOutcomeUnknown, StateOutcomeUnknown, ByWatcher)
	if err != nil {
		return Operation{}, true, storeErr(err)
	}
	t.SetError, t.ReconcileAfter, t.Actor, t.Detail = true, l.cfg.ReconcileBackoff, a.Name, detail
	t.Error = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN,
		executor.Result{Detail: "the executor's lease expired before it recorded an outcome: " + detail})
	res, err := l.store.OperationTransition(ctx, t)
	if errors.Is(err, store.ErrNotFound) {
		return Operation{}, false, nil
	}
	if err != nil {
		return Operation{}, true, storeErr(err)
	}
	return res, true, nil
}

// run calls the downstream for an operation this process holds (state
// EXECUTING, fence op.Fence) and records the outcome. claimStart is this
// process's clock just before the statement that gave it the operation:
// the lease and the approval, which the statement measured on the
// database's clock, last at least until claimStart plus what it reported as
// left, so that bounds the call and the first send on this process's
// monotonic clock. The call and the commit use a context detached from the
// caller's cancellation: a client that goes away must not leave a request
// half-recorded. tookOver says this process took the operation over from a
// holder whose lease expired, and who may have sent.
func (l *Ledger) run(ctx context.Context, op Operation, claimStart time.Time, tookOver bool) (Operation, bool, error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(opAttrs(op)...)
	}
	b, err := l.toolOf(op)
	if err != nil {
		// This process holds an operation of a tool it does not serve (its
		// tools file lacks that version: a rolling deploy). Nothing was
		// sent, so the claim is released as an attempt that reached
		// nothing is, for a process that serves the tool.
		l.releaseUnsent(ctx, op, err.Error())
		return Operation{}, false, err
	}
	lease := l.lease(b)
	if op.FirstSentFence != 0 && b.caps.DedupesKeys && b.settings.KeyRetention > 0 && !l.keyStillDedupes(b, op, lease) {
		return l.refuseResubmission(ctx, op, b)
	}
	callDeadline := claimStart.Add(min(lease, op.LeaseRemaining()) * 4 / 5)
	if !tookOver && !time.Now().Before(callDeadline) {
		// The claim's statement waited (for the row lock) until its lease
		// was spent: nothing may start now. Released, and claimed again by
		// the caller with a fresh lease, rather than told the downstream
		// could not be reached. (A takeover that sends nothing is unknown,
		// below: the holder it took over from may have sent.)
		l.releaseUnsent(ctx, op, "the lease was spent before the request could start")
		return Operation{}, false, errReleasedUnsent
	}
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), callDeadline)
	defer cancel()
	call := executor.Call{Tenant: op.Tenant, Tool: op.Tool, ToolVersion: op.ToolVersion,
		OperationID: op.ID, DownstreamKey: op.DownstreamKey, Args: op.Args}
	if op.ApprovalRequired && op.FirstSentFence == 0 && (op.Fence == 1 || !failpoint.Defect(failpoint.DefectApprovalClaim)) {
		// The approval bounds when the first send may start.
		call.SendBy = claimStart.Add(op.ApprovalExpiresAt.Sub(op.DBNow))
		if failpoint.Defect(failpoint.DefectServerClock) {
			// Test-only, failpoints builds: the database's timestamp read on
			// this server's clock, for the chaos suite's control run.
			call.SendBy = op.ApprovalExpiresAt
		}
	}
	if failpoint.Defect(failpoint.DefectServerClock) {
		var cancelSkewed context.CancelFunc
		callCtx, cancelSkewed = context.WithDeadline(context.WithoutCancel(ctx), op.LeaseExpiresAt)
		defer cancelSkewed()
	}
	failpoint.Inject(failpoint.BeforeDownstream)
	if failpoint.Enabled && !call.SendBy.IsZero() {
		failpoint.Inject(failpoint.BeforeFirstSend + "/" + op.Tool)
	}
	l.obs.ExecutionStarted(op.Tool)
	if failpoint.FreshDownstreamKeys() {
		// Test-only, failpoints builds: a new key per claim defeats the
		// downstream's deduplication, for the chaos suite's control run.
		call.DownstreamKey = fmt.Sprintf("%s.%d", call.DownstreamKey, op.Fence)
	}
	callCtx, span := l.startDownstreamSpan(callCtx, op)
	started := time.Now()
	res := b.exec.Execute(callCtx, call)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("opledger.outcome", res.Outcome.String()),
			attribute.Int("http.response.status_code", res.HTTPStatus), attribute.Int("opledger.sends", res.Attempts))
	}
	span.End()
	took := time.Since(started)
	l.obs.DownstreamCalled(op.Tool, res.Outcome.String(), took)
	// A success at the first send is in the event log (SUCCEEDED, with the
	// reference), so its line is at debug, like a successful call's access
	// log line; every other outcome, and a success after retries, at info.
	level := slog.LevelInfo
	if res.Outcome == executor.OutcomeSucceeded && res.Attempts <= 1 {
		level = slog.LevelDebug
	}
	if l.logger.Enabled(ctx, level) {
		l.opLogger(op).Log(ctx, level, "downstream answered", "outcome", res.Outcome.String(), "http_status", res.HTTPStatus,
			"sends", res.Attempts, "duration_ms", took.Milliseconds())
	}
	failpoint.Inject(failpoint.AfterDownstream)
	if failpoint.Enabled {
		failpoint.Inject(failpoint.AfterDownstream + "/" + op.Tool)
	}
	if l.hooks != nil && l.hooks.AfterDownstream != nil {
		l.hooks.AfterDownstream(ctx, op)
	}
	if tookOver && res.Outcome == executor.OutcomeNotSubmitted {
		// This attempt sent nothing, but the holder it took over from may
		// have: READY would say nothing happened, and nothing would look
		// the downstream up. Unknown, for the reconciler to settle.
		res.Outcome = executor.OutcomeUnknown
		res.Detail = "this attempt sent nothing, but the attempt whose lease it took over may have reached the downstream: " + res.Detail
	}
	t, err := l.outcome(op, res)
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	asked := time.Now()
	out, err := l.commitOutcome(ctx, t)
	if errors.Is(err, store.ErrNotFound) && t.RequireFirstSend {
		// A refusal of this attempt, but an earlier one may have reached the
		// downstream and taken effect: the refusal proves nothing about it.
		if t, err = l.outcome(op, executor.Result{Outcome: executor.OutcomeUnknown, HTTPStatus: res.HTTPStatus, Body: res.Body,
			Detail: "an earlier attempt may have reached the downstream, so this refusal does not prove that nothing happened: " + res.Detail}); err != nil {
			return Operation{}, false, storeErr(err)
		}
		out, err = l.commitOutcome(ctx, t)
	}
	if errors.Is(err, store.ErrNotFound) {
		// Our fence is stale: someone took over or reconciled. Our answer
		// changes nothing; report what the ledger holds.
		l.opLogger(op).Warn("stale commit ignored: the fence moved on", "outcome", res.Outcome.String())
		cur, gerr := l.store.OperationGet(context.WithoutCancel(ctx), op.Tenant, op.ID)
		if gerr != nil {
			return Operation{}, false, storeErr(gerr)
		}
		l.wake(op.ID) // whatever ended this attempt, this process's waiters relied on it
		return cur, false, nil
	}
	if err != nil {
		l.opLogger(op).Error("could not record the downstream outcome; the reconciler will resolve it", "error", err)
		return Operation{}, false, storeErr(err)
	}
	failpoint.Inject(failpoint.AfterCommit)
	if State(out.State) != StateExecuting {
		l.wake(out.ID) // this process's waiters; others were notified if they asked
	}
	l.remember(out, asked)
	if res.Outcome == executor.OutcomeNotSubmitted && res.ApprovalEnded {
		// The approval bounded the first send and ended first (the claim
		// may have waited for the row lock past it). Released; the caller
		// claims again, which refuses the lapsed approval on the database's
		// clock and tells its caller so, instead of "unreachable".
		return Operation{}, false, errReleasedUnsent
	}
	if res.Outcome == executor.OutcomeNotSubmitted {
		return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_UNAVAILABLE,
			Message:    "the downstream could not be reached and nothing was sent; the operation is READY again",
			RetryAfter: time.Second, Metadata: map[string]string{"operation_id": op.ID}}
	}
	return out, false, nil
}

// outcome is the guarded transition that records what the downstream said
// about the attempt holding op's fence.
func (l *Ledger) outcome(op Operation, res executor.Result) (store.Transition, error) {
	// What a downstream (or a registered executor) answered, as it is
	// stored (executor.Bound): it must never keep its outcome from being
	// recorded (the statement would fail on every attempt), nor make the
	// operation too large to read.
	res = executor.Bound(res)
	var event Event
	var to State
	var stored []byte
	var detail string
	switch res.Outcome {
	case executor.OutcomeSucceeded:
		event, to, detail = EventSucceeded, StateSucceeded, "downstream succeeded; external ref recorded"
	case executor.OutcomeFailed:
		// FAILED promises that nothing happened: the table guards it so that
		// only a refusal of the first request that may have reached the
		// downstream earns it.
		event, to = EventFailed, StateFailed
		stored = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_REJECTED, res)
		detail = fmt.Sprintf("downstream refused (HTTP %d)", res.HTTPStatus)
	case executor.OutcomeNotSubmitted:
		event, to = EventReleased, StateReady
		stored = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_UNAVAILABLE, res)
		detail = "nothing reached the downstream: " + res.Detail
	default:
		event, to = EventOutcomeUnknown, StateOutcomeUnknown
		stored = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN, res)
		detail = "the request may have reached the downstream: " + res.Detail
	}
	t, err := l.transition(op, event, to, ByHolder)
	if err != nil {
		return t, err
	}
	if failpoint.Defect(failpoint.DefectRefusalOverrides) {
		// Test-only, failpoints builds: the fixed defect of a refusal after
		// an earlier possible send recorded as FAILED, for the chaos suite's
		// control run.
		t.RequireFirstSend = false
	}
	t.Actor, t.Detail, t.SetError, t.Error = "server:"+l.cfg.ServerID, detail, true, stored
	if to == StateSucceeded {
		t.ExternalRef, t.Result = res.ExternalRef, res.Body
	}
	if to == StateOutcomeUnknown {
		t.ReconcileAfter = l.cfg.ReconcileBackoff
	}
	return t, nil
}

// statementTimeout bounds one statement the ledger runs detached from its
// caller (a claim, an outcome's write), so a database that stopped
// answering cannot hold a request forever.
const statementTimeout = 10 * time.Second

// handingCtx is the context of a statement that may hand this process an
// operation to run (a claim, the one-call path's insert, a takeover):
// detached from the caller's cancellation. Once such a statement commits,
// the attempt it gives must run to its outcome whether or not the caller
// still waits, as run's call and commit do; a statement abandoned by a
// caller that gave up can still commit on the database (a closed connection
// does not stop it), leaving a claim nobody runs. A caller already gone
// starts nothing.
func handingCtx(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	return c, cancel, nil
}

// wake wakes this process's waiters on the operation: those that wait on an
// attempt this process holds rely on it, and did not ask the database for
// a notification (OperationMarkWaited).
func (l *Ledger) wake(id string) {
	if l.listener != nil {
		l.listener.Wake(id)
	}
}

// releaseUnsent gives back a claim this process will not run, with nothing
// sent: the operation is READY again under a new fence, and its approval is
// not consumed. A failure is logged; the lease's end then decides.
func (l *Ledger) releaseUnsent(ctx context.Context, op Operation, why string) {
	t, err := l.transition(op, EventReleased, StateReady, ByHolder)
	if err == nil {
		t.Actor, t.Detail = "server:"+l.cfg.ServerID, "released unsent: "+why
		_, err = l.commitOutcome(ctx, t)
		if err == nil {
			l.wake(op.ID) // this process's waiters, who did not ask for a notification
		}
	}
	if err != nil {
		l.opLogger(op).Error("could not release a claim this process will not run; its lease's end decides", "error", err)
	}
}

// commitOutcome writes an attempt's outcome, retrying (same fence, with
// backoff, for up to Config.OutcomeRetry) while the database cannot be
// reached: the downstream's answer is known only to this process, and for a
// downstream without deduplication or lookup, losing it would turn a known
// outcome into an unknown one for good. The write is idempotent: once it
// landed, a retry finds the fence's state gone and reports ErrNotFound,
// which the caller answers by reading the operation.
func (l *Ledger) commitOutcome(ctx context.Context, t store.Transition) (Operation, error) {
	ctx = context.WithoutCancel(ctx)
	giveUp := time.Now().Add(l.cfg.OutcomeRetry)
	wait := 50 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, statementTimeout)
		out, err := l.store.OperationTransition(attemptCtx, t)
		cancel()
		if err == nil || errors.Is(err, store.ErrNotFound) || !retryableStoreErr(err) || time.Now().Add(wait).After(giveUp) {
			return out, err
		}
		l.logger.Warn("could not record a downstream outcome yet; retrying", "operation_id", t.ID, "fence", t.Fence,
			"to", t.To, "retry_in_ms", wait.Milliseconds(), "error", err)
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
}

// refuseResubmission ends a claim that would resubmit a key the downstream
// may have forgotten by the time the request reaches it: whatever made the
// operation READY again (a lookup miss, a release) was decided inside the
// key's retention, but this attempt comes too late to rely on it, and an
// earlier attempt may have landed (a lookup miss can race the first request
// still on its way), so a resubmission the downstream no longer dedupes
// could be a second effect.
func (l *Ledger) refuseResubmission(ctx context.Context, op Operation, b bound) (Operation, bool, error) {
	detail := fmt.Sprintf("not resubmitted: the downstream may have forgotten the key (first sent %s, key retention %s) and an earlier attempt may have taken effect",
		op.FirstClaimedAt.UTC().Format(time.RFC3339), b.settings.KeyRetention)
	t, err := l.outcome(op, executor.Result{Outcome: executor.OutcomeUnknown, Detail: detail})
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	t.Detail = detail
	out, err := l.commitOutcome(ctx, t)
	if errors.Is(err, store.ErrNotFound) {
		cur, gerr := l.store.OperationGet(context.WithoutCancel(ctx), op.Tenant, op.ID)
		if gerr != nil {
			return Operation{}, false, storeErr(gerr)
		}
		l.wake(op.ID)
		return cur, false, nil
	}
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	l.wake(op.ID) // this process's waiters, who did not ask for a notification
	l.opLogger(out).Warn("resubmission refused: past the downstream's key retention")
	return out, false, nil
}
