package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
)

// Decision values as stored.
const (
	DecisionApprove = "APPROVE"
	DecisionDeny    = "DENY"
)

// ApproveInput is an approver's decision.
type ApproveInput struct {
	OperationID, Fingerprint string
	// Decision is DecisionApprove or DecisionDeny.
	Decision string
	Reason   string
}

// Approve records a decision bound to the fingerprint the approver saw. It
// locks the operation, decides with the rules below, and applies the change
// with a statement guarded on the state it read and, where the rule depends
// on the approval having lapsed, on that too, on the database's clock. It
// returns replayed when the same decision was already in force.
func (l *Ledger) Approve(ctx context.Context, a Actor, in ApproveInput) (Operation, bool, error) {
	if err := checkID(in.OperationID); err != nil {
		return Operation{}, false, err
	}
	if err := storable("reason", in.Reason); err != nil {
		return Operation{}, false, err
	}
	var out Operation
	var replayed bool
	var after error
	err := l.store.InTx(ctx, func(c *store.Conn) error {
		replayed, after = false, nil
		op, err := c.OperationGetForUpdate(ctx, a.Tenant, in.OperationID)
		if errors.Is(err, store.ErrNotFound) {
			return notFound(in.OperationID)
		}
		if err != nil {
			return err
		}
		q, refused, err := l.quorum(ctx, c, a, op)
		if err != nil {
			return err
		}
		if refused != nil {
			// The rejection commits, then the approver is told.
			after = refused
			return nil
		}
		d, err := decideApproval(op, a, in, q.needed)
		if err != nil {
			return err
		}
		if d.ifLapsed != nil {
			// Judged on the database's clock, with the row locked: the
			// attempt holding it cannot end meanwhile.
			now, err := c.ClockNow(ctx)
			if err != nil {
				return err
			}
			if !op.ApprovalExpiresAt.After(now) {
				return d.ifLapsed
			}
		}
		if d.refused != nil {
			return d.refused
		}
		if d.replay {
			out, replayed = op, true
			return nil
		}
		if err := Check(State(op.State), d.event, d.to); err != nil {
			return err
		}
		st, err := l.decision(op, d.event, d.to, ByApprover)
		if err != nil {
			return err
		}
		st.Decision, st.DecidedBy, st.ApprovedFingerprint, st.Reason = in.Decision, a.ID, in.Fingerprint, in.Reason
		// What the approver was shown (the canonical args, on the console
		// and over RPC) and who they are (the credential's principal, a.ID):
		// the decision's event records both (docs/audit.md).
		st.ShownArgs = op.Args
		st.Actor, st.Detail, st.DecidedByName = a.Name, d.detail, a.Name
		needed := max(q.needed, 1)
		st.ApprovalsNeeded, st.PolicyDigest, st.ApprovalRule, st.ApprovalTTL = &needed, q.digest, q.rule, q.ttl
		out, err = c.OperationDecide(ctx, st)
		if err == nil && d.to == StateReady {
			// A lapsed approval released the operation's budget shares.
			err = l.reserveAgain(ctx, c, out)
		}
		if errors.Is(err, store.ErrConditionFailed) && d.onlyIfLapsed != nil {
			// The approval in force was not lapsed (or the operation was
			// sent): the rule for an approval in force applies.
			if d.onlyIfLapsed.replay {
				out, replayed = op, true
				return nil
			}
			return d.onlyIfLapsed.err
		}
		return err
	})
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	if after != nil {
		return Operation{}, false, after
	}
	if !replayed {
		// Both times the database's: this replica's clock may be off.
		l.obs.Decided(out.Tool, in.Decision, out.ApprovalDecidedAt.Sub(out.CreatedAt))
		l.holdLive(out)
	}
	return out, replayed, nil
}

type approval struct {
	replay bool
	event  EventKind
	to     State
	detail string
	// ifLapsed, when set, is the answer instead if the approval has lapsed
	// on the database's clock: an attempt that may have sent nothing holds
	// the operation, and its end decides whether the approval was used.
	ifLapsed error
	// refused, when set, is the answer otherwise (after ifLapsed).
	refused error
	// onlyIfLapsed, when set, is the answer if the statement finds the
	// approval still in force (the table guards a decision on a READY
	// operation by its approval having lapsed with nothing sent, judged on
	// the database's clock).
	onlyIfLapsed *inForce
}

// inForce is the answer to a decision on an approval still in force.
type inForce struct {
	replay bool
	err    error
}

// decideApproval is the pure rule book of Approve, for an operation whose
// quorum is needed. It never reads a clock: whether a READY operation's
// approval has lapsed is for the statement to judge.
func decideApproval(op Operation, a Actor, in ApproveInput, needed int32) (approval, error) {
	if op.PreparedBy == a.ID {
		return approval{}, refuse(opledgerv1.ErrorReason_ERROR_REASON_SELF_APPROVAL_FORBIDDEN,
			"the principal that prepared an operation cannot approve it")
	}
	if in.Fingerprint != op.Fingerprint {
		return approval{}, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH, Field: "fingerprint",
			Message: "the fingerprint is not this operation's: what you were shown is not what would run; nothing changed"}
	}
	if !op.ApprovalRequired {
		return approval{}, refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_NOT_APPLICABLE,
			"tool %s needs no approval", op.Tool)
	}
	state := State(op.State)
	conflict := refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT,
		"the operation already has the opposite decision (state %s)", state)
	// An approval that a send exercised does not lapse: the operation may
	// have taken effect, so it can be neither denied nor approved again,
	// only driven to its outcome. Until then a READY operation's approval
	// may have lapsed, which only the database's clock can tell.
	lapsable := state == StateReady && op.FirstSentFence == 0
	// An attempt holds it, and no earlier one was sent: if the approval
	// lapsed, the attempt sent its request in time or sends nothing and
	// the operation goes back to AWAITING_APPROVAL. Neither "approved" nor
	// "the opposite decision stands" is known to be true until it ends.
	var ifLapsed error
	if state == StateExecuting && op.FirstSentFence == 0 {
		ifLapsed = &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS, RetryAfter: time.Second,
			Message: "the approval has lapsed while an attempt holds the operation: whether its request was sent in time is known " +
				"when the attempt ends (if it sent nothing, the operation awaits approval again); decide again then",
			Metadata: map[string]string{"operation_id": op.ID}}
	}
	// The current round's approvals: the same approver twice is one
	// approval (the statement refuses a second entry too).
	have := int32(0)
	mine := false
	for _, e := range ApprovalsOf(op.Approvals) {
		if e.Decision == DecisionApprove {
			have++
			mine = mine || e.PrincipalID == a.ID
		}
	}
	needed = max(needed, 1)
	progress := func(n int32) (State, string) {
		if n >= needed {
			if needed == 1 {
				return StateReady, "approved"
			}
			return StateReady, fmt.Sprintf("approved (%d of %d: the quorum is complete)", n, needed)
		}
		return StateAwaitingApproval, fmt.Sprintf("approved (%d of %d)", n, needed)
	}
	switch in.Decision {
	case DecisionApprove:
		switch {
		case state == StateAwaitingApproval && mine:
			// Counted already: the answer says replayed, and the operation
			// shows the quorum's progress.
			return approval{replay: true}, nil
		case state == StateAwaitingApproval:
			to, detail := progress(have + 1)
			return approval{event: EventApproved, to: to, detail: detail}, nil
		case lapsable:
			to, detail := progress(1)
			return approval{event: EventApproved, to: to, detail: detail + " again after the approval expired",
				onlyIfLapsed: &inForce{replay: true}}, nil
		case state == StateRejected:
			return approval{}, conflict
		case state == StateCancelled:
			return approval{}, refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED, "the operation was cancelled")
		default: // READY (sent), EXECUTING and outcomes: approved before
			return approval{replay: true, ifLapsed: ifLapsed}, nil
		}
	case DecisionDeny:
		switch {
		case state == StateAwaitingApproval && mine:
			return approval{}, refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT,
				"you approved this operation (%d of %d approvals so far); another approver may deny it", have, needed)
		case state == StateAwaitingApproval:
			return approval{event: EventDenied, to: StateRejected, detail: "denied"}, nil
		case lapsable:
			return approval{event: EventDenied, to: StateRejected, detail: "denied after the approval expired",
				onlyIfLapsed: &inForce{err: conflict}}, nil
		case state == StateRejected:
			return approval{replay: true}, nil
		case state == StateCancelled:
			return approval{}, refuse(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED, "the operation was cancelled")
		case ifLapsed != nil:
			return approval{ifLapsed: ifLapsed, refused: conflict}, nil
		default:
			return approval{}, conflict
		}
	}
	return approval{}, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "decision",
		Message: "decision must be DECISION_APPROVE or DECISION_DENY"}
}

// quorumOf is what a decision on an operation is judged against: the
// approvals needed under the policy in force, the digest and rule that
// say so, and the approval window.
type quorumOf struct {
	needed       int32
	digest, rule string
	ttl          time.Duration
}

// quorum judges op, locked in c's transaction, under the policy in force
// when it awaits a decision (or is READY with nothing sent, so that a
// decision may renew its approval) and was judged under another: the
// quorum only grows, and a deny rule now holding rejects it (POLICY_DENIED
// to the approver), READY too: a renewal records the digest of the policy
// in force, and the claim would then send an operation that policy
// refuses. Otherwise the operation's own quorum stands.
func (l *Ledger) quorum(ctx context.Context, c *store.Conn, a Actor, op Operation) (q quorumOf, refused, err error) {
	q = quorumOf{needed: op.ApprovalsNeeded, digest: op.PolicyDigest, rule: op.ApprovalRule, ttl: op.ApprovalTTL}
	undecided := State(op.State) == StateAwaitingApproval || State(op.State) == StateReady && op.FirstSentFence == 0
	if _, configured := l.bound[op.Tool+"@"+op.ToolVersion]; !configured || !undecided || !op.ApprovalRequired || l.policyCurrent(op) {
		return q, nil, nil
	}
	t, j, err := l.judgeAgain(ctx, c, op)
	if err != nil {
		return q, nil, err
	}
	if j.Denied != nil {
		p, err := l.policyApply(op, EventPolicyChanged, StateRejected, ByApprover)
		if err != nil {
			return q, nil, err
		}
		p.PolicyDigest, p.Actor = t.Policy.Digest, a.Name
		p.Detail = fmt.Sprintf("refused by the policy in force (%s, policy %s): %s", j.Denied.Name, short(t.Policy.Digest), j.Denied.Message)
		if _, err := c.OperationPolicyApply(ctx, p); err != nil {
			return q, nil, err
		}
		le := policyDenied(t, j, nil).(*Error)
		le.Message += "; the operation is now REJECTED: nothing was sent"
		le.Metadata["operation_id"] = op.ID
		return q, le, nil
	}
	if int32(j.Needed) > q.needed {
		q.needed, q.rule, q.ttl = int32(j.Needed), j.Rule, t.Approval.TTL
	}
	q.digest = t.Policy.Digest
	return q, nil, nil
}
