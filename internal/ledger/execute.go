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
	"github.com/opledger/opledger/store"
)

// The Execute path, top to bottom (docs/design.md walks it hop by hop):
//
//	Execute → execute: the loop of rounds, bounded by maxClaimRounds
//	  round: one claim statement, then
//	    attempt (claimed): send → record
//	    unclaimed: replay, refuse, judge again, expire, take over or wait
//
// No error travels back up as a signal: a round says what the loop does
// next (next), and an attempt that sent nothing for a reason of its claim's
// own says so in its reply (reply.again).

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

// reply is what an Execute answers: the operation and whether its outcome
// was replayed, or a refusal. again, set only by an attempt, says instead
// that the attempt sent nothing and released the operation for a reason of
// its claim's own (the approval ended first, or the lease was spent waiting
// for the row lock): the caller claims again, and that claim answers (a
// lapsed approval is refused; a fresh lease runs the call).
type reply struct {
	op       Operation
	replayed bool
	err      error
	again    bool
}

func (r reply) answer() (Operation, bool, error) { return r.op, r.replayed, r.err }

func refused(err error) reply { return reply{err: err} }

// next is what Execute's loop does after a round.
type next int

const (
	// answered: the round's reply is the Execute's.
	answered next = iota
	// claimAgain: the operation changed under the round (a lost race, or a
	// release); the next round reads it afresh. Counted against
	// maxClaimRounds.
	claimAgain
	// waited: the round waited for another attempt's outcome. Not counted:
	// the caller's wait bounds these.
	waited
)

// maxClaimRounds bounds Execute's loop of claim attempts against concurrent
// state changes; each round reads the database afresh.
const maxClaimRounds = 50

// Execute performs the operation's downstream effect at most once and
// answers every repeat from the ledger; see the Execute RPC's contract.
// replayed reports that the outcome was already recorded and no downstream
// request was made by this call.
func (l *Ledger) Execute(ctx context.Context, a Actor, id string, wait time.Duration) (Operation, bool, error) {
	// A cached finished operation is answered in this small frame, without
	// entering the loop's.
	if f, ok := l.finished.Get(opKey{a.Tenant, id}); ok {
		return l.replayFinished(f.op).answer()
	}
	return l.execute(ctx, a, id, wait)
}

// execution is one Execute's state across its rounds.
type execution struct {
	a        Actor
	id       string
	deadline time.Time       // how long the caller waits for an attempt in flight
	sub      <-chan struct{} // this process's notifications of the operation, when waiting
	cl       store.Claim
}

// execute is Execute's one loop: rounds until one answers, at most
// maxClaimRounds of them lost to concurrent changes.
func (l *Ledger) execute(ctx context.Context, a Actor, id string, wait time.Duration) (Operation, bool, error) {
	if err := checkID(id); err != nil {
		return Operation{}, false, err
	}
	wait = min(max(wait, 0), l.cfg.MaxWait)
	x := &execution{a: a, id: id, deadline: time.Now().Add(wait), cl: l.claimStatement(a.Tenant, id)}
	if wait > 0 && l.listener != nil {
		// Subscribe before the first read: a notification between reading
		// EXECUTING and subscribing would otherwise be lost, and the
		// caller would sleep until the next poll.
		ch, cancel := l.listener.Subscribe(id)
		defer cancel()
		x.sub = ch
	}
	for lost := 0; lost < maxClaimRounds; {
		r, n := l.round(ctx, x)
		switch n {
		case answered:
			return r.answer()
		case claimAgain:
			lost++
		case waited:
		}
	}
	return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS,
		Message: "the operation is changing under concurrent callers; retry", RetryAfter: 100 * time.Millisecond}
}

// claimStatement is the claim an Execute of (tenant, id) runs: the table's
// (guards.go), with the policies this process holds current and, for the
// first round, the copy this process wrote at the Prepare or approval, if
// any (the claim then returns only what it changes: store.Claim.Base).
func (l *Ledger) claimStatement(tenant, id string) store.Claim {
	cl := claim
	cl.PolicyDigests = l.policyDigests
	cl.Base, _ = l.takeLive(tenant, id)
	return cl
}

// round is one claim statement and what follows it: the attempt it handed
// this process, or the answer to the state it found.
func (l *Ledger) round(ctx context.Context, x *execution) (reply, next) {
	// Taken before the claim: the lease and the approval the claim
	// measures on the database's clock end no earlier than this instant
	// plus what the claim reports as left (see attempt).
	claimStart := time.Now()
	var op Operation
	var err, gone error
	if l.handing(func() bool {
		var claimed bool
		op, claimed, err, gone = l.claimOnce(ctx, x)
		return claimed && err == nil
	}) {
		defer l.attempts.end()
		if r := l.attempt(ctx, op, claimStart, false); !r.again {
			return r, answered
		}
		return reply{}, claimAgain // released: the next claim judges the approval
	}
	if gone != nil {
		return refused(gone), answered
	}
	if errors.Is(err, store.ErrNotFound) {
		return refused(notFound(x.id)), answered
	}
	if err != nil {
		return refused(storeErr(err)), answered
	}
	return l.unclaimed(ctx, x, op, claimStart)
}

// claimOnce runs the claim statement detached from the caller's
// cancellation (handingCtx); gone is the caller's end, when it came first.
func (l *Ledger) claimOnce(ctx context.Context, x *execution) (op Operation, claimed bool, err, gone error) {
	claimCtx, cancel, gone := handingCtx(ctx)
	if gone != nil {
		return Operation{}, false, nil, gone
	}
	defer cancel()
	owner := l.leaseOwner()
	op, claimed, err = l.stmts.OperationClaim(claimCtx, x.a.Tenant, x.id, x.cl, store.Lease{Owner: owner, Duration: l.maxLease, Actor: x.a.Name})
	x.cl.Base = Operation{} // a later round follows a change this copy missed
	if store.MayHaveCommitted(err) {
		l.recoverClaim(x.a.Tenant, x.id, owner)
	}
	return op, claimed, err, nil
}

// unclaimed answers a claim that did not take, from the state it found.
func (l *Ledger) unclaimed(ctx context.Context, x *execution, op Operation, claimStart time.Time) (reply, next) {
	switch State(op.State) {
	case StateSucceeded, StateFailed, StateRejected, StateCancelled:
		l.remember(op, claimStart)
		return l.replayFinished(op), answered
	case StateOutcomeUnknown:
		l.obs.DuplicatePrevented("Execute", op.Tool, true)
		return reply{op: op, replayed: true}, answered
	case StateAwaitingApproval:
		return refused(refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED,
			"the operation waits for an approver's decision")), answered
	case StateReady:
		return l.readyUnclaimed(ctx, x, op)
	case StateExecuting:
		if op.LeaseExpired() {
			if r, done := l.abandoned(ctx, x.a, op); done {
				return r, answered
			}
			return reply{}, claimAgain
		}
		return l.awaitAttempt(ctx, x, op)
	}
	return reply{}, claimAgain
}

// readyUnclaimed answers a READY operation the claim refused: judged under a
// policy no longer in force here, or its approval lapsed (both on the
// database's clock, in the claim's guards), or changed since it was read.
func (l *Ledger) readyUnclaimed(ctx context.Context, x *execution, op Operation) (reply, next) {
	if op.FirstSentFence == 0 && !l.policyCurrent(op) {
		// Judged under a policy no longer in force here: judged again
		// before anything is sent.
		if err := l.rejudge(ctx, x.a, op); err != nil {
			return refused(err), answered
		}
		return reply{}, claimAgain
	}
	// The claim refuses a lapsed approval on the database's clock;
	// expireApproval's guard uses the same clock, so this process's clock
	// never decides. An approval is consumed by the first send (sendrule.go):
	// a claim that was released with nothing sent consumes nothing.
	if op.ApprovalRequired && op.FirstSentFence == 0 {
		if l.hooks != nil && l.hooks.BeforeApprovalExpiry != nil {
			l.hooks.BeforeApprovalExpiry(ctx, op)
		}
		if err := l.expireApproval(ctx, x.a, op); err != nil {
			return refused(err), answered
		}
	}
	// Someone released it, or renewed its approval, between our claim and
	// read: claim again.
	return reply{}, claimAgain
}

// awaitAttempt waits, within the caller's wait, for the outcome of the
// attempt another holder has in flight, and answers "pending" once the wait
// is spent.
func (l *Ledger) awaitAttempt(ctx context.Context, x *execution, op Operation) (reply, next) {
	remaining := time.Until(x.deadline)
	if remaining <= 0 {
		l.obs.DuplicatePrevented("Execute", op.Tool, false)
		return reply{op: op}, answered // pending: the same operation, still executing
	}
	if x.sub != nil && !op.Waited && !l.holdsLease(op.LeaseOwner) {
		// The holder is another replica: ask for a notification when its
		// attempt ends (only waited-on outcomes notify). A holder in this
		// process wakes us itself.
		marked, err := l.store.OperationMarkWaited(ctx, op.Tenant, op.ID, op.Fence)
		if err != nil {
			return refused(storeErr(err)), answered
		}
		if !marked {
			return reply{}, claimAgain // the attempt already ended: read its outcome
		}
	}
	if l.hooks != nil && l.hooks.Waiting != nil {
		l.hooks.Waiting(ctx, op)
	}
	// Poll as well as listen: a notification can be lost while the
	// listener reconnects, and a lease can expire silently.
	timer := time.NewTimer(min(remaining, op.LeaseRemaining()+10*time.Millisecond, l.cfg.WaitPoll))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return reply{op: op}, answered
	case <-x.sub:
	case <-timer.C:
	}
	return reply{}, waited // waiting is not a lost race
}

// replayFinished answers an Execute of a finished operation: its recorded
// outcome, or the refusal that a rejected or cancelled one always gets.
func (l *Ledger) replayFinished(op Operation) reply {
	switch State(op.State) {
	case StateRejected:
		if op.SupersededBy != "" {
			return refused(&Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_SUPERSEDED,
				Message: fmt.Sprintf("an approver approved this operation with edited arguments: execute %s, which carries them "+
					"(Get it to see what will run); this one will never run", op.SupersededBy),
				Metadata: map[string]string{"superseded_by": op.SupersededBy, "operation_id": op.ID}})
		}
		if op.ApprovalDecision != DecisionDeny {
			// Rejected by a changed policy before anything was sent
			// (OperationPolicyApply records no decision).
			return refused(&Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED,
				Message:  "the policy in force refused the operation before anything was sent (its event log names the rule); it will never run",
				Metadata: map[string]string{"operation_id": op.ID}})
		}
		return refused(refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_REJECTED,
			"an approver denied the operation"))
	case StateCancelled:
		return refused(refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED,
			"the operation was cancelled"))
	}
	l.obs.DuplicatePrevented("Execute", op.Tool, true)
	return reply{op: op, replayed: true}
}

// expireApproval moves a READY operation whose approval lapsed back to
// AWAITING_APPROVAL, so its state tells the truth, and refuses the Execute.
// It returns nil when the guarded update finds the approval renewed (or the
// state moved) since op was read: the caller then claims again rather than
// refusing an operation that is executable.
func (l *Ledger) expireApproval(ctx context.Context, a Actor, op Operation) error {
	d, err := l.decision(op, EventApprovalExpired, StateAwaitingApproval, ByClaimant)
	if err != nil {
		return storeErr(err)
	}
	d.Actor, d.Detail = a.Name, "approval expired at "+op.ApprovalExpiresAt.UTC().Format(time.RFC3339)
	d.Notify = l.notifyOn()
	_, err = l.store.OperationDecide(ctx, d)
	if errors.Is(err, store.ErrConditionFailed) {
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
func (l *Ledger) abandoned(ctx context.Context, a Actor, op Operation) (reply, bool) {
	b, err := l.toolOf(op)
	if err != nil {
		return refused(err), true
	}
	// The takeover's request may reach the downstream as late as the end of
	// its lease: the key must still be remembered then. The statement checks
	// that on the database's clock; a refusal falls through to
	// OUTCOME_UNKNOWN below.
	if b.caps.DedupesKeys || l.hooks != nil && l.hooks.TakeOverUndeduped != nil && l.hooks.TakeOverUndeduped(op) {
		if r, done := l.takeOverAndSend(ctx, a, op, b); done {
			return r, true
		}
	}
	detail := "lease expired; the downstream does not dedupe keys, so it is never resubmitted"
	if b.caps.DedupesKeys {
		detail = "lease expired; the downstream may have forgotten the key by the time a resubmission reached it, so it is not resubmitted"
	}
	t, err := l.transition(op, EventOutcomeUnknown, StateOutcomeUnknown, ByWatcher)
	if err != nil {
		return refused(storeErr(err)), true
	}
	t.SetError, t.ReconcileAfter, t.Actor, t.Detail = true, l.cfg.ReconcileBackoff, a.Name, detail
	t.Error = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN,
		executor.Result{Detail: "the executor's lease expired before it recorded an outcome: " + detail})
	out, err := l.store.OperationTransition(ctx, t)
	if errors.Is(err, store.ErrConditionFailed) {
		return reply{}, false
	}
	if err != nil {
		return refused(storeErr(err)), true
	}
	return reply{op: out}, true
}

// takeOverAndSend takes op's expired lease over, if its statement's guards
// (the fence, the lease, the key window) let it, and runs the attempt;
// done=false means the takeover was refused.
func (l *Ledger) takeOverAndSend(ctx context.Context, a Actor, op Operation, b bound) (reply, bool) {
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
		defer cancel()
		taken, err = l.store.OperationTakeOver(takeCtx, l.takeOver(op, b, l.lease(b)),
			store.Lease{Owner: l.leaseOwner(), Duration: l.lease(b), Actor: a.Name})
		return err == nil
	}) {
		defer l.attempts.end()
	}
	switch {
	case gone != nil:
		return refused(gone), true
	case err == nil:
		l.opLogger(taken).Warn("took over an expired lease", "previous_fence", op.Fence)
		// A takeover never releases for its claim's reasons (attempt), so
		// its reply is never again.
		return l.attempt(ctx, taken, takeStart, true), true
	case !errors.Is(err, store.ErrConditionFailed):
		return refused(storeErr(err)), true
	}
	return reply{}, false
}

// attempt runs the attempt this process holds (state EXECUTING, fence
// op.Fence): it checks the send rule (sendrule.go), sends, and records the
// outcome. claimStart is this process's clock just before the statement
// that gave it the operation: the lease and the approval, which the
// statement measured on the database's clock, last at least until
// claimStart plus what it reported as left, so that bounds the call and the
// first send on this process's monotonic clock. tookOver says this process
// took the operation over from a holder whose lease expired, and who may
// have sent.
func (l *Ledger) attempt(ctx context.Context, op Operation, claimStart time.Time, tookOver bool) reply {
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
		return refused(err)
	}
	if resubmissionTooLate(op, b, l.lease(b)) {
		return l.refuseResubmission(ctx, op, b)
	}
	callDeadline := sendDeadline(op, claimStart, l.lease(b))
	if !tookOver && !time.Now().Before(callDeadline) {
		// The claim's statement waited (for the row lock) until its lease
		// was spent: nothing may start now. Released, and claimed again by
		// the caller with a fresh lease, rather than told the downstream
		// could not be reached. (A takeover that sends nothing is unknown,
		// in record: the holder it took over from may have sent.)
		l.releaseUnsent(ctx, op, "the lease was spent before the request could start")
		return reply{again: true}
	}
	res := l.send(ctx, b, op, downstreamCall(op, claimStart), callDeadline)
	return l.record(ctx, op, res, tookOver)
}

// send calls the downstream once for the attempt op holds (the executor
// retries within the call's deadline) and returns what it answered. The
// call runs detached from the caller's cancellation: a client that goes
// away must not leave a request half-recorded. It is l.sendFn:
// callDownstream, or what Hooks.Send made of it.
func (l *Ledger) send(ctx context.Context, b bound, op Operation, call executor.Call, deadline time.Time) executor.Result {
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	res := l.sendFn(callCtx, op, b.exec, call)
	if l.hooks != nil && l.hooks.AfterDownstream != nil {
		l.hooks.AfterDownstream(ctx, op)
	}
	return res
}

// callDownstream is the ledger's SendFunc: exec's Send of call, with the
// observer's metrics, the downstream span and its log line around it.
func (l *Ledger) callDownstream(ctx context.Context, op Operation, exec executor.Executor, call executor.Call) executor.Result {
	l.obs.ExecutionStarted(op.Tool)
	callCtx, span := l.startDownstreamSpan(ctx, op)
	started := time.Now()
	res := exec.Send(callCtx, call)
	l.sent(ctx, span, op, res, time.Since(started))
	return res
}

// sent ends the downstream span and reports the call to the observer and
// the log. This is the call's one log line (the executor logs none of its
// own, and the refusal it may become is not logged again: Error.Logged): a
// success at the first send is in the event log (SUCCEEDED, with the
// reference), so its line is at debug, like a successful call's access log
// line; an unknown outcome at warn; every other outcome, and a success after
// retries, at info.
func (l *Ledger) sent(ctx context.Context, span trace.Span, op Operation, res executor.Result, took time.Duration) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("opledger.outcome", res.Outcome.String()),
			attribute.Int("http.response.status_code", res.HTTPStatus), attribute.Int("opledger.sends", res.Attempts))
	}
	span.End()
	l.obs.DownstreamCalled(op.Tool, res.Outcome.String(), took)
	level := slog.LevelInfo
	switch {
	case res.Outcome == executor.OutcomeSucceeded && res.Attempts <= 1:
		level = slog.LevelDebug
	case res.Outcome == executor.OutcomeUnknown:
		level = slog.LevelWarn
	}
	if l.logger.Enabled(ctx, level) {
		l.opLogger(op).Log(ctx, level, "downstream answered", "outcome", res.Outcome.String(), "http_status", res.HTTPStatus,
			"sends", res.Attempts, "duration_ms", took.Milliseconds(), "external_ref", res.ExternalRef, "detail", res.Detail)
	}
}

// record writes what the downstream answered for the attempt op holds and
// turns it into the Execute's reply. A write the fence no longer permits
// changes nothing: the reply is then what the ledger holds.
func (l *Ledger) record(ctx context.Context, op Operation, res executor.Result, tookOver bool) reply {
	if tookOver && res.Outcome == executor.OutcomeNotSubmitted {
		// This attempt sent nothing, but the holder it took over from may
		// have: READY would say nothing happened, and nothing would look
		// the downstream up. Unknown, for the reconciler to settle.
		res.Outcome = executor.OutcomeUnknown
		res.Detail = "this attempt sent nothing, but the attempt whose lease it took over may have reached the downstream: " + res.Detail
	}
	t, err := l.outcome(op, res)
	if err != nil {
		return refused(storeErr(err))
	}
	asked := time.Now()
	out, err := l.commitOutcome(ctx, t)
	if errors.Is(err, store.ErrConditionFailed) && t.RequireFirstSend {
		// A refusal of this attempt, but an earlier one may have reached the
		// downstream and taken effect: the refusal proves nothing about it.
		if t, err = l.outcome(op, executor.Result{Outcome: executor.OutcomeUnknown, HTTPStatus: res.HTTPStatus, Body: res.Body,
			Detail: "an earlier attempt may have reached the downstream, so this refusal does not prove that nothing happened: " + res.Detail}); err != nil {
			return refused(storeErr(err))
		}
		out, err = l.commitOutcome(ctx, t)
	}
	if errors.Is(err, store.ErrConditionFailed) {
		// Our fence is stale: someone took over or reconciled. Our answer
		// changes nothing; report what the ledger holds.
		l.opLogger(op).Warn("stale commit ignored: the fence moved on", "outcome", res.Outcome.String())
		return l.current(ctx, op)
	}
	if err != nil {
		l.opLogger(op).Error("could not record the downstream outcome; the reconciler will resolve it", "error", err)
		return refused(logged(storeErr(err)))
	}
	if l.hooks != nil && l.hooks.AfterCommit != nil {
		l.hooks.AfterCommit(ctx, out)
	}
	if State(out.State) != StateExecuting {
		l.wake(out.ID) // this process's waiters; others were notified if they asked
	}
	l.remember(out, asked)
	switch {
	case res.Outcome == executor.OutcomeNotSubmitted && res.ApprovalEnded:
		// The approval bounded the first send and ended first (the claim
		// may have waited for the row lock past it). Released; the caller
		// claims again, which refuses the lapsed approval on the database's
		// clock and tells its caller so, instead of "unreachable".
		return reply{again: true}
	case res.Outcome == executor.OutcomeNotSubmitted:
		return refused(&Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_UNAVAILABLE,
			Message:    "the downstream could not be reached and nothing was sent; the operation is READY again",
			RetryAfter: time.Second, Metadata: map[string]string{"operation_id": op.ID},
			Logged: true}) // "downstream answered", in sent
	}
	return reply{op: out}
}

// current is the reply once a write of this attempt found its fence moved
// on: what the ledger holds now. Whatever ended this attempt, this
// process's waiters relied on it, and are woken.
func (l *Ledger) current(ctx context.Context, op Operation) reply {
	cur, err := l.store.OperationGet(context.WithoutCancel(ctx), op.Tenant, op.ID)
	if err != nil {
		return refused(storeErr(err))
	}
	l.wake(op.ID)
	return reply{op: cur}
}

// outcome is the guarded transition that records what the downstream said
// about the attempt holding op's fence.
func (l *Ledger) outcome(op Operation, res executor.Result) (store.TransitionParams, error) {
	// What a downstream (or a registered executor) answered, as it is
	// stored (executor.Bound): it must never keep its outcome from being
	// recorded (the statement would fail on every attempt), nor make the
	// operation too large to read.
	res = executor.Bound(res)
	var event EventKind
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
// landed, a retry finds the fence's state gone and reports ErrConditionFailed,
// which the caller answers by reading the operation.
func (l *Ledger) commitOutcome(ctx context.Context, t store.TransitionParams) (Operation, error) {
	ctx = context.WithoutCancel(ctx)
	giveUp := time.Now().Add(l.cfg.OutcomeRetry)
	wait := 50 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, statementTimeout)
		out, err := l.stmts.OperationTransition(attemptCtx, t)
		cancel()
		if err == nil || errors.Is(err, store.ErrConditionFailed) || !retryableStoreErr(err) || time.Now().Add(wait).After(giveUp) {
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
func (l *Ledger) refuseResubmission(ctx context.Context, op Operation, b bound) reply {
	detail := fmt.Sprintf("not resubmitted: the downstream may have forgotten the key (first sent %s, key retention %s) and an earlier attempt may have taken effect",
		op.FirstClaimedAt.UTC().Format(time.RFC3339), b.settings.KeyRetention)
	t, err := l.outcome(op, executor.Result{Outcome: executor.OutcomeUnknown, Detail: detail})
	if err != nil {
		return refused(storeErr(err))
	}
	t.Detail = detail
	out, err := l.commitOutcome(ctx, t)
	if errors.Is(err, store.ErrConditionFailed) {
		return l.current(ctx, op)
	}
	if err != nil {
		return refused(storeErr(err))
	}
	l.wake(op.ID) // this process's waiters, who did not ask for a notification
	l.opLogger(out).Warn("resubmission refused: past the downstream's key retention")
	return reply{op: out}
}
