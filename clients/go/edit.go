package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/clients/go/fingerprint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// The texts a runner gives the model about a tool's policy, the same in
// every opledger client (docs/clients/go.md, "Policies").
const (
	// MessageEdited (with the changes, the verb of the outcome's status,
	// the arguments that ran, the edited operation and the original) tells
	// the model that an approver changed the call's arguments before
	// approving it (approve-with-edit): what ran is not what the model
	// asked for, and the call as made never runs.
	MessageEdited = "An approver changed %s; %s: %s. Operation %s replaces %s, the call as it was made, which will not run."
	// MessagePolicyDenied (with the ledger's refusal, which names the rule
	// and says its message) tells the model that the tool's policy refuses
	// the call and that the same call is refused again.
	MessagePolicyDenied = "The tool's policy refuses this call: %s. Calling the tool again with the same arguments will be refused again: tell the user, and do not try to get around the rule."
	// MessageLimitExceeded (with the ledger's refusal) tells the model that
	// a budget of the tools file refused the call.
	MessageLimitExceeded = "This call was not made: %s. Nothing was recorded; the same call may be accepted once the limit's window has room again, but do not split or change it to get around the limit: tell the user."
	// MessageOperationDuplicate (with the other call's state, as StateWords
	// gives it) tells the model that the same action (the tool's business
	// identity) is already recorded under another key.
	MessageOperationDuplicate = "This call was not made: the same action is already recorded as another call, operation_id, which is %s. Do not make it again, under this key or another; call check_operation with that operation_id to learn its outcome."
	// MaxPolicySummary is the longest Policy.summary (in characters) that
	// ModelDescription adds to a tool's description; a longer one is left
	// to ListTools, so as not to crowd the model's tool list.
	MaxPolicySummary = 300
)

// editVerbs says, per ForModel status, what became of the edited
// arguments.
var editVerbs = map[string]string{
	"succeeded":         "this ran",
	"failed":            "this did not take effect",
	"outcome_unknown":   "this was sent, and its outcome is not known yet",
	"awaiting_approval": "this awaits approval",
}

// Edit is an approver's change of a call's arguments (approve-with-edit,
// docs/policy.md): the operation an Outcome is about is not the one the
// agent prepared, but the one an approver approved "the same, but with
// these arguments". The runner followed the link (Operation.superseded_by)
// and ran that one.
type Edit struct {
	// Supersedes is the operation the agent prepared: the call as it was
	// made, REJECTED and superseded, which never runs.
	Supersedes string
	// Args are the arguments of the operation the outcome is about: what
	// ran (or awaits approval, or failed).
	Args map[string]any
	// Changes are the top-level fields the approver changed, in the order
	// canonical JSON (RFC 8785) gives their names.
	Changes []Change
}

// Change is one argument an approver changed.
type Change struct {
	Field string
	// From is the value in the call as made (none when Added), To the value
	// that ran (none when Removed).
	From, To       any
	Added, Removed bool
}

// NewEdit describes the edit from the arguments of the call as made
// (original, operation supersedes) to args.
func NewEdit(supersedes string, original, args map[string]any) *Edit {
	e := &Edit{Supersedes: supersedes, Args: args}
	names := map[string]bool{}
	for k := range original {
		names[k] = true
	}
	for k := range args {
		names[k] = true
	}
	for k := range names {
		from, had := original[k]
		to, has := args[k]
		if had && has && jsonText(from) == jsonText(to) {
			continue
		}
		e.Changes = append(e.Changes, Change{Field: k, From: from, To: to, Added: !had, Removed: !has})
	}
	slices.SortFunc(e.Changes, func(a, b Change) int { return fingerprint.CompareUTF16(a.Field, b.Field) })
	return e
}

// Message is the sentence ForModel gives the model about the edit, for an
// outcome whose ForModel status is status, about operation operationID.
func (e *Edit) Message(status, operationID string) string {
	var parts []string
	for _, c := range e.Changes {
		from, to := "nothing", "nothing"
		if !c.Added {
			from = jsonText(c.From)
		}
		if !c.Removed {
			to = jsonText(c.To)
		}
		parts = append(parts, fmt.Sprintf("%s from %s to %s", c.Field, from, to))
	}
	changed := strings.Join(parts, ", ")
	if changed == "" {
		changed = "nothing" // cannot happen: the ledger refuses an edit that changes nothing
	}
	args := e.Args
	if args == nil {
		args = map[string]any{}
	}
	return fmt.Sprintf(MessageEdited, changed, editVerbs[status], jsonText(args), operationID, e.Supersedes)
}

// forModel is the edit as ForModel's "edited" member: {"args", "changes":
// [{"field", "from", "to"}], "message", "supersedes"}, the operation's id
// filled in.
func (e *Edit) forModel(status, operationID string) map[string]any {
	changes := []any{}
	for _, c := range e.Changes {
		m := map[string]any{"field": c.Field}
		if !c.Added {
			m["from"] = c.From
		}
		if !c.Removed {
			m["to"] = c.To
		}
		changes = append(changes, m)
	}
	args := e.Args
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"args": args, "changes": changes, "supersedes": e.Supersedes,
		"message": e.Message(status, operationID)}
}

// jsonText is a value as canonical JSON, as the model's texts show it.
func jsonText(v any) string {
	b, err := fingerprint.Canonicalize(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// RefusalMessage is what a runner tells the model about a refusal of the
// call with reason r, whose ledger message is message: the message itself,
// or for POLICY_DENIED (MessagePolicyDenied) and LIMIT_EXCEEDED
// (MessageLimitExceeded) the message with what it means for the model.
func RefusalMessage(r Reason, message string) string {
	switch r {
	case ReasonPolicyDenied:
		return fmt.Sprintf(MessagePolicyDenied, message)
	case ReasonLimitExceeded:
		return fmt.Sprintf(MessageLimitExceeded, message)
	}
	return message
}

// ModelDescription is a tool's description for a model: the tools file's
// description, then the policy's plain-words summary (Policy.summary) when
// there is one of at most MaxPolicySummary characters, as "\n\nPolicy:
// <summary>.", so that the model knows before calling what is refused and
// what a person must approve.
func ModelDescription(description, summary string) string {
	if summary == "" || utf8.RuneCountInString(summary) > MaxPolicySummary {
		return description
	}
	if description == "" {
		return "Policy: " + summary + "."
	}
	return description + "\n\nPolicy: " + summary + "."
}

// maxEdits bounds the supersede links a run follows (an edit of an edited
// operation, …), and the way back to the call as made.
const maxEdits = 8

// successor reads the operation that supersedes the one a run was on.
func (r *ToolRunner) successor(ctx context.Context, id string, hops int) (*opledgerv1.Operation, error) {
	if hops >= maxEdits {
		return nil, fmt.Errorf("opledger: more than %d approver edits in a row; stopped at %s", maxEdits, id)
	}
	got, err := r.c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return got.GetOperation(), nil
}

// supersededBy is the operation an OPERATION_SUPERSEDED refusal names, or
// "".
func supersededBy(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Reason == ReasonOperationSuperseded {
		return e.Metadata["superseded_by"]
	}
	return ""
}

// withEdit adds the approver's edit to an outcome whose operation
// supersedes another: it walks the links back to the call as made.
func (r *ToolRunner) withEdit(ctx context.Context, out Outcome) (Outcome, error) {
	op := operationOf(out)
	if op.GetSupersedes() == "" {
		return out, nil
	}
	root := op
	for i := 0; root.GetSupersedes() != ""; i++ {
		if i >= maxEdits {
			return nil, fmt.Errorf("opledger: more than %d approver edits in a row before %s", maxEdits, op.GetId())
		}
		got, err := r.c.Get(ctx, root.GetSupersedes())
		if err != nil {
			return nil, err
		}
		root = got.GetOperation()
	}
	e := NewEdit(root.GetId(), root.GetArgs().AsMap(), op.GetArgs().AsMap())
	switch o := out.(type) {
	case *Succeeded:
		o.Edit = e
	case *Failed:
		o.Edit = e
	case *OutcomeUnknown:
		o.Edit = e
	case *AwaitingApproval:
		o.Edit = e
	}
	return out, nil
}

func operationOf(out Outcome) *opledgerv1.Operation {
	switch o := out.(type) {
	case *Succeeded:
		return o.Operation
	case *Failed:
		return o.Operation
	case *OutcomeUnknown:
		return o.Operation
	case *AwaitingApproval:
		return o.Operation
	}
	return nil
}

// ApproveEdited approves operationID "the same, but with these arguments"
// (approve-with-edit, docs/policy.md): editedArgs (the shapes Prepare
// accepts) may differ from the operation's only in the fields its tool's
// policy lists as editable. The ledger records a new operation with them,
// which this approval approves (it may still need another approver) and
// which the policy judges again, and rejects the original
// (Operation.superseded_by); the answer's Edited is the new one, its
// Operation the original. fingerprint is the original's, as the approver
// was shown it. The same edit again is Replayed; another edit of the same
// operation is APPROVAL_CONFLICT.
func (c *Client) ApproveEdited(ctx context.Context, operationID, fingerprint string, editedArgs any, reason string) (*opledgerv1.ApproveResponse, error) {
	s, err := toStruct(editedArgs)
	if err != nil {
		return nil, err
	}
	req := &opledgerv1.ApproveRequest{OperationId: operationID, Fingerprint: fingerprint,
		Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: reason, EditedArgs: s}
	var resp *opledgerv1.ApproveResponse
	err = c.call(ctx, "", 0, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Approve(ctx, req)
		return err
	})
	return resp, err
}

// ApprovalsOf is an operation's quorum progress: the distinct approvals
// counted so far in the current round and how many its policy needs (0
// when none is required).
func ApprovalsOf(op *opledgerv1.Operation) (have, needed int) {
	n := 0
	for _, d := range op.GetApproval().GetApprovals() {
		if d.GetDecision() == opledgerv1.Decision_DECISION_APPROVE {
			n++
		}
	}
	return n, int(op.GetApproval().GetApprovalsNeeded())
}
