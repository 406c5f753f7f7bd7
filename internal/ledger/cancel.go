package ledger

import (
	"context"
	"errors"
	"time"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
)

// Cancel withdraws an operation nobody has claimed: AWAITING_APPROVAL or
// READY becomes CANCELLED through a transition guarded on the state and
// fence it read, so it can never race a claim into cancelling an effect
// that is under way. replayed reports an operation already cancelled.
func (l *Ledger) Cancel(ctx context.Context, a Actor, id, reason string) (Operation, bool, error) {
	if err := checkID(id); err != nil {
		return Operation{}, false, err
	}
	if err := storable("reason", reason); err != nil {
		return Operation{}, false, err
	}
	op, err := l.store.OperationGet(ctx, a.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Operation{}, false, notFound(id)
	}
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	switch State(op.State) {
	case StateCancelled:
		return op, true, nil
	case StateAwaitingApproval, StateReady:
		if op.FirstSentFence != 0 {
			return Operation{}, false, sentBefore()
		}
	default:
		return Operation{}, false, refuse(opledgerv1.ErrorReason_ERROR_REASON_CANCEL_NOT_APPLICABLE,
			"the operation is %s: only an operation nobody has executed can be cancelled", op.State)
	}
	t, err := l.transition(op, EventCancelled, StateCancelled, ByAgent)
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	t.Actor, t.Detail = a.Name, "cancelled"
	if reason != "" {
		t.Detail = "cancelled: " + reason
	}
	out, err := l.store.OperationTransition(ctx, t)
	if errors.Is(err, store.ErrConditionFailed) {
		return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS,
			Message: "the operation changed while it was being cancelled; read it and try again", RetryAfter: 100 * time.Millisecond}
	}
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	return out, false, nil
}

// sentBefore refuses to cancel an operation that is READY again after a
// send (reconciled after a lookup miss, which can race the request): an
// earlier attempt may have taken effect, so CANCELLED could be a lie. A
// claim that was released with nothing sent does not count.
func sentBefore() *Error {
	return refuse(opledgerv1.ErrorReason_ERROR_REASON_CANCEL_NOT_APPLICABLE,
		"the operation was sent to the downstream before and may have taken effect; execute it to learn its outcome")
}
