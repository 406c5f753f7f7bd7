package ledger

import (
	"context"
	"errors"
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
	err := l.store.InTx(ctx, func(c *store.Conn) error {
		replayed = false
		op, err := c.OperationGetForUpdate(ctx, a.Tenant, in.OperationID)
		if errors.Is(err, store.ErrNotFound) {
			return notFound(in.OperationID)
		}
		if err != nil {
			return err
		}
		d, err := decideApproval(op, a, in)
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
		st, err := decision(op, d.event, d.to, ByApprover)
		if err != nil {
			return err
		}
		st.Decision, st.DecidedBy, st.ApprovedFingerprint, st.Reason = in.Decision, a.ID, in.Fingerprint, in.Reason
		st.Actor, st.Detail = a.Name, d.detail
		out, err = c.OperationDecide(ctx, st)
		if errors.Is(err, store.ErrNotFound) && d.onlyIfLapsed != nil {
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
	if !replayed {
		// Both times the database's: this replica's clock may be off.
		l.obs.Decided(out.Tool, in.Decision, out.ApprovalDecidedAt.Sub(out.CreatedAt))
		l.holdLive(out)
	}
	return out, replayed, nil
}

type approval struct {
	replay bool
	event  Event
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

// decideApproval is the pure rule book of Approve. It never reads a clock:
// whether a READY operation's approval has lapsed is for the statement to
// judge.
func decideApproval(op Operation, a Actor, in ApproveInput) (approval, error) {
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
	switch in.Decision {
	case DecisionApprove:
		switch {
		case state == StateAwaitingApproval:
			return approval{event: EventApproved, to: StateReady, detail: "approved"}, nil
		case lapsable:
			return approval{event: EventApproved, to: StateReady, detail: "approved again after the approval expired",
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
