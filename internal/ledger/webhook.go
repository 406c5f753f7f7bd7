package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
)

// WebhookEvent is a downstream's asynchronous report of an operation's
// outcome, matched to the operation by the downstream key it carries.
type WebhookEvent struct {
	// ID identifies the event at the sender; deliveries with the same ID
	// are duplicates.
	ID string `json:"id"`
	// Type is "succeeded" or "failed".
	Type string `json:"type"`
	// IdempotencyKey is the downstream key the operation sent.
	IdempotencyKey string `json:"idempotency_key"`
	// ExternalRef is the downstream's reference of the effect.
	ExternalRef string `json:"external_ref"`
	// Data is the downstream's object, stored as the result.
	Data json.RawMessage `json:"data"`
}

// ErrWebhookInvalid marks an event that cannot be applied as sent.
var ErrWebhookInvalid = errors.New("ledger: invalid webhook event")

// ErrWebhookUnsigned marks an event whose signature verified under a secret
// that is not the one of the operation's tool version.
var ErrWebhookUnsigned = errors.New("ledger: webhook event not signed for the operation's tool version")

// WebhookResult is what applying an event did, for the sender's answer and
// this server's log.
type WebhookResult struct {
	// Text says what happened, in a sentence.
	Text string
	// Operation is the id of the operation the event names ("" if none).
	Operation string
	// Contradicts reports an event that says the opposite of a finished
	// operation's recorded truth: "succeeded" for an operation that is
	// FAILED, CANCELLED or REJECTED, or that nothing was ever sent for; or
	// "failed" for a SUCCEEDED one. Nothing overwrites a finished operation,
	// so the ledger's answer stays; an operator must look.
	Contradicts bool
	// ended is the operation whose attempt the event ended, whose waiters
	// in this process must be woken after the commit.
	ended string
}

// contradicts reports whether an event of type typ says the opposite of op.
func contradicts(op Operation, typ string) bool {
	switch State(op.State) {
	case StateFailed, StateCancelled, StateRejected:
		return typ == "succeeded"
	case StateAwaitingApproval, StateReady:
		return typ == "succeeded" && op.FirstSentFence == 0
	case StateSucceeded:
		return typ == "failed"
	}
	return false
}

// Webhook applies a completion event for tool. The event is recorded and,
// for an operation still EXECUTING or OUTCOME_UNKNOWN, or READY after a
// send (a lookup missed a request in flight; an operator said so), the outcome applied
// through the same guarded transition as any other, in one transaction: a
// duplicate delivery, or an event for an operation already resolved, changes
// nothing; one that contradicts a finished operation is counted
// (reconciliation result "webhook_contradiction") and reported. It returns
// what happened, for the sender's answer and this server's log.
func (l *Ledger) Webhook(ctx context.Context, tool string, ev WebhookEvent) (WebhookResult, error) {
	return l.WebhookSigned(ctx, tool, nil, ev)
}

// WebhookSigned is Webhook for an event whose signature verified under the
// webhook secrets of the tool's versions listed (nil: any): an operation of
// another version, whose executor declares another secret or none, is not
// the signer's to settle (ErrWebhookUnsigned).
func (l *Ledger) WebhookSigned(ctx context.Context, tool string, versions []string, ev WebhookEvent) (WebhookResult, error) {
	if ev.ID == "" || len(ev.ID) > 255 || ev.IdempotencyKey == "" || (ev.Type != "succeeded" && ev.Type != "failed") {
		return WebhookResult{}, fmt.Errorf("%w: id, idempotency_key and type succeeded|failed are required", ErrWebhookInvalid)
	}
	if strings.IndexByte(ev.ID, 0) >= 0 || strings.IndexByte(ev.IdempotencyKey, 0) >= 0 {
		return WebhookResult{}, fmt.Errorf("%w: id and idempotency_key must not contain the NUL character", ErrWebhookInvalid)
	}
	var result WebhookResult
	err := l.store.InTx(ctx, func(c *store.Conn) error {
		op, err := c.OperationGetByDownstreamKeyForUpdate(ctx, ev.IdempotencyKey)
		opID := op.ID
		if errors.Is(err, store.ErrNotFound) {
			opID = ""
		} else if err != nil {
			return err
		}
		if opID != "" && op.Tool != tool {
			return fmt.Errorf("%w: the key belongs to another tool", ErrWebhookInvalid)
		}
		if opID != "" && versions != nil && !slices.Contains(versions, op.ToolVersion) {
			return ErrWebhookUnsigned
		}
		fresh, err := c.WebhookEventInsert(ctx, tool, ev.ID, opID)
		if err != nil {
			return err
		}
		result = WebhookResult{Operation: opID}
		switch {
		case !fresh:
			result.Text = "duplicate event: ignored"
			return nil
		case opID == "":
			result.Text = "no operation has this key: recorded, nothing changed"
			return nil
		case contradicts(op, ev.Type):
			result.Text = "the event (" + ev.Type + ") contradicts operation " + op.ID + ", which is " + op.State +
				": nothing changed; an operator must look"
			result.Contradicts = true
			return nil
		case State(op.State) != StateExecuting && State(op.State) != StateOutcomeUnknown &&
			(State(op.State) != StateReady || op.FirstSentFence == 0):
			result.Text = "operation is " + op.State + ": nothing changed"
			return nil
		}
		to := StateSucceeded
		if ev.Type == "failed" {
			to = StateFailed
		}
		if err := Check(State(op.State), EventReconciled, to); err != nil {
			return err
		}
		t, err := l.transition(op, EventReconciled, to, ByDownstream)
		if err != nil {
			return err
		}
		t.Actor, t.Detail, t.SetError = "webhook:"+tool, "webhook event "+ev.ID, true
		// The event's data and reference as they are stored: bounded like
		// any downstream's answer (executor.Bound), whatever the body
		// limit let through.
		res := executor.Bound(executor.Result{ExternalRef: ev.ExternalRef, Body: ev.Data,
			Detail: "the downstream reported failure by webhook"})
		if to == StateSucceeded {
			t.ExternalRef, t.Result, t.Error = res.ExternalRef, res.Body, nil
		} else {
			t.Error = storedError(opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_REJECTED, res)
		}
		if _, err := c.OperationTransition(ctx, t); err != nil {
			return err
		}
		if State(op.State) == StateExecuting {
			// The attempt's holder, not this transaction, wakes its own
			// replica's waiters, and they never asked the database to: the
			// holder may be blocked on the downstream for its whole lease.
			if err := c.OperationNotify(ctx, op.ID); err != nil {
				return err
			}
			result.ended = op.ID
		}
		result.Text = "operation " + op.ID + " is " + string(to)
		l.obs.Reconciled(op.Tool, "webhook_"+ev.Type)
		return nil
	})
	if err != nil {
		return WebhookResult{}, err
	}
	if result.ended != "" {
		l.wake(result.ended)
	}
	if result.Contradicts {
		// Counted after the commit: a retried transaction counts once.
		l.obs.Reconciled(tool, "webhook_contradiction")
	}
	return result, nil
}
