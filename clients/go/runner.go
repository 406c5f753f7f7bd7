package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/clients/go/fingerprint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// The texts ForModel puts in front of the model, the same in every opledger
// client (docs/clients/go.md, "Wrap a tool").
const (
	// MessageAwaitingApproval tells the model that a person has to decide
	// first and how to get the result later.
	MessageAwaitingApproval = "A person must approve this call before it can run; it is recorded under operation_id. Do not call the tool again for it: a new call would be a second, separate request. Call check_operation with the operation_id later to learn its outcome."
	// MessageOutcomeUnknown tells the model that the effect may have
	// happened, so it must not try again under another identity.
	MessageOutcomeUnknown = "The outcome is not known yet: the request may have reached the service. Do not call the tool again for it, or do it another way: a new call would be a second, separate request. Call check_operation with the operation_id later to learn its outcome."
	// MessageKeyNamesEarlierCall (with the earlier call's state, as
	// StateWords gives it, for %s) tells the model that this call was
	// refused but its key already names an earlier one, which may have
	// taken effect: a *Failed with that Operation (IDEMPOTENCY_KEY_REUSED,
	// or a tool, version or args refused under a key already used).
	MessageKeyNamesEarlierCall = "This call was not made: its idempotency key already names an earlier call, which is %s. If that was this same action, it is done or under way: do not make it again under a new key."
	// MessageKeyNamesUndoneCall is MessageKeyNamesEarlierCall for an
	// earlier call that did not take effect (failed, rejected, cancelled).
	MessageKeyNamesUndoneCall = "This call was not made: its idempotency key already names an earlier call, which is %s and did not take effect."
)

// StateWords is how the model's texts name a state: "outcome unknown" for
// STATE_OUTCOME_UNKNOWN, and "in a state this client does not know" for
// one newer than this client.
func StateWords(s opledgerv1.State) string {
	if _, ok := opledgerv1.State_name[int32(s)]; !ok || s == opledgerv1.State_STATE_UNSPECIFIED {
		return "in a state this client does not know"
	}
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(s.String(), "STATE_"), "_", " "))
}

// KeyNamesEarlierCall is the message of a refusal under a key that names
// an earlier call in state s.
func KeyNamesEarlierCall(s opledgerv1.State) string {
	switch s {
	case opledgerv1.State_STATE_FAILED, opledgerv1.State_STATE_REJECTED, opledgerv1.State_STATE_CANCELLED:
		return fmt.Sprintf(MessageKeyNamesUndoneCall, StateWords(s))
	}
	return fmt.Sprintf(MessageKeyNamesEarlierCall, StateWords(s))
}

// RunnerOptions configures a ToolRunner. The zero value returns
// AwaitingApproval at once for a call that needs approval.
type RunnerOptions struct {
	// ApprovalWait is how long Run waits for a person's decision on a call
	// that needs approval before it returns AwaitingApproval (polling Get,
	// bounded by the context's deadline too). 0 returns at once.
	ApprovalWait time.Duration
	// OnApprovalRequired, when set, is called each time Run finds the
	// operation awaiting approval (a repeated Run included), before it
	// waits: notify the approvers, or ask a person in-process and Approve
	// with an approver's client. An error from it ends Run with that error.
	OnApprovalRequired func(ctx context.Context, op *opledgerv1.Operation) error
	// ExecuteWait is how long Execute waits for the outcome when another
	// caller is executing the operation (default 30 s, capped by the server).
	ExecuteWait time.Duration
	// ToolVersion pins the version of every tool Run prepares; "" lets the
	// server use each tool's current version.
	ToolVersion string
}

// ToolRunner runs an agent's tool calls through the ledger end to end:
// Prepare, the approval (wait for a person's decision, or answer that the
// call awaits approval), Execute with a wait, and one typed final answer. It
// also builds the model's tool list from ListTools. Safe for concurrent use.
//
// Running the same call again (same tool, args and idempotency key) is how an
// agent resumes it: after AwaitingApproval, after OutcomeUnknown, or after a
// crash. The ledger replays the operation and Run continues from its state;
// it never causes a second effect. A call that needs no approval takes one
// request (Prepare with execute, the one-call path).
type ToolRunner struct {
	c    *Client
	opts RunnerOptions
}

// NewToolRunner returns a runner that calls the ledger with c (an agent's
// key).
func NewToolRunner(c *Client, opts RunnerOptions) *ToolRunner {
	if opts.ExecuteWait <= 0 {
		opts.ExecuteWait = 30 * time.Second
	}
	return &ToolRunner{c: c, opts: opts}
}

// ModelTool is one tool as a model sees it: put these in the model's tool
// list (OpenAI: {"type":"function","function":{name, description,
// parameters: ArgsSchema}}; Anthropic: {name, description, input_schema:
// ArgsSchema}).
type ModelTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// ArgsSchema is the JSON Schema of the tool's arguments, which the
	// ledger enforces on Prepare.
	ArgsSchema map[string]any `json:"args_schema"`
	// Version is the tool's current version.
	Version string `json:"version"`
	// ApprovalRequired tells whether a person must approve each call.
	ApprovalRequired bool `json:"approval_required"`
	// Effect is read_only, idempotent or side_effect.
	Effect string `json:"effect"`
}

// CheckOperationTool is the runner's own model tool (as the MCP gateway
// has): it reports an earlier call's outcome by its operation_id, and runs
// it if a person approved it since; it never makes a new call. The
// messages of AwaitingApproval and OutcomeUnknown point the model to it.
const CheckOperationTool = "check_operation"

// CheckOperationModelTool is the model tool ModelTools adds for
// CheckOperationTool.
func CheckOperationModelTool() ModelTool {
	return ModelTool{
		Name: CheckOperationTool,
		Description: "Report the outcome of an earlier tool call by the operation_id its answer gave, and run it if a person approved it since. " +
			"It never makes a new call: use it, not the original tool, for a call that awaited approval or whose outcome was not known.",
		ArgsSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"operation_id"},
			"properties": map[string]any{"operation_id": map[string]any{"type": "string", "description": "the operation_id of an earlier answer"}}},
		Effect: "idempotent",
	}
}

// ModelTools returns the tools the server enforces, current versions only,
// in the server's order, then CheckOperationModelTool. A tool's description
// carries its policy's summary (ModelDescription). A server tool named
// check_operation is an error: rename it in the tools file.
func (r *ToolRunner) ModelTools(ctx context.Context) ([]ModelTool, error) {
	resp, err := r.c.ListTools(ctx)
	if err != nil {
		return nil, err
	}
	var out []ModelTool
	for _, t := range resp.GetTools() {
		if !t.GetCurrent() {
			continue
		}
		if t.GetName() == CheckOperationTool {
			return nil, fmt.Errorf("opledger: the ledger has a tool named %q, which is the runner's own tool; rename it in the tools file", CheckOperationTool)
		}
		out = append(out, ModelTool{
			Name:             t.GetName(),
			Description:      ModelDescription(t.GetDescription(), t.GetPolicy().GetSummary()),
			ArgsSchema:       t.GetArgsSchema().AsMap(),
			Version:          t.GetVersion(),
			ApprovalRequired: t.GetApprovalRequired(),
			Effect:           effectName(t.GetEffect()),
		})
	}
	return append(out, CheckOperationModelTool()), nil
}

func effectName(e opledgerv1.Effect) string {
	switch e {
	case opledgerv1.Effect_EFFECT_READ_ONLY:
		return "read_only"
	case opledgerv1.Effect_EFFECT_IDEMPOTENT:
		return "idempotent"
	case opledgerv1.Effect_EFFECT_SIDE_EFFECT:
		return "side_effect"
	}
	return ""
}

// Outcome is Run's final answer: *Succeeded, *Failed, *OutcomeUnknown or
// *AwaitingApproval. Switch on the type; OutcomeUnknown is never a Failed,
// because an agent may retry a failure under a new key but must not retry an
// unknown outcome.
type Outcome interface {
	// OperationID is the ledger's operation, or "" when the call was
	// refused before one was recorded.
	OperationID() string
	// ForModel is the answer to hand the model as the tool result: RFC 8785
	// JSON with a "status" of succeeded, failed, outcome_unknown or
	// awaiting_approval, byte for byte the same in every opledger client.
	ForModel() string
	// Edited is the approver's edit when the operation is not the one the
	// agent prepared (approve-with-edit: the runner followed the link and
	// ran the edited one), else nil.
	Edited() *Edit
	outcome()
}

// Succeeded is a call whose effect happened once.
type Succeeded struct {
	Operation *opledgerv1.Operation
	// Result is the downstream's answer (Operation.result) as JSON values.
	Result map[string]any
	// Edit, when set, says that an approver changed the arguments: what ran
	// is Edit.Args.
	Edit *Edit
}

// Failed is a call that definitively did not happen: the downstream refused
// it (DOWNSTREAM_REJECTED), a person denied it (OPERATION_REJECTED), it was
// cancelled, the tool's policy or a budget refused it (POLICY_DENIED,
// LIMIT_EXCEEDED: the same call is refused again, RefusalMessage), the same
// action is recorded under another key (OPERATION_DUPLICATE: Operation is
// that call, MessageOperationDuplicate), or the ledger refused the request
// itself (ARGS_INVALID, TOOL_UNKNOWN, IDEMPOTENCY_KEY_REUSED …). Nothing was done, so the agent
// may correct the call and make it under a new key, except when a refusal
// of the request carries an Operation: then its key already names an
// earlier call, which may have taken effect (MessageKeyNamesEarlierCall),
// and a new key could make it twice. An approval that expired is not a
// Failed: see AwaitingApproval.
type Failed struct {
	// Operation is nil when the ledger refused the request before recording
	// an operation.
	Operation *opledgerv1.Operation
	Reason    Reason
	Message   string
	// Edit, when set, says that an approver changed the arguments of the
	// call that failed (Operation's).
	Edit *Edit
}

// OutcomeUnknown is a call that may or may not have taken effect: the
// downstream did not answer conclusively (OUTCOME_UNKNOWN), or another caller
// is still executing it (Pending). Never make it again under a new key; the
// server's reconciler resolves it, and a later Run with the same key
// returns the outcome.
type OutcomeUnknown struct {
	Operation *opledgerv1.Operation
	// Pending is true when the operation is still EXECUTING.
	Pending bool
	// Edit, when set, says that an approver changed the arguments of the
	// call that was sent.
	Edit *Edit
}

// AwaitingApproval is a call that waits for a person's decision, also when
// an approval given earlier expired before the call ran (APPROVAL_EXPIRED:
// the ledger put it back before its approvers). Run the same call again
// (same key) later to continue it.
type AwaitingApproval struct {
	Operation *opledgerv1.Operation
	// Edit, when set, says that an approver changed the arguments, and the
	// edited call awaits another approval (a quorum).
	Edit *Edit
}

func (o *Succeeded) OperationID() string        { return o.Operation.GetId() }
func (o *Failed) OperationID() string           { return o.Operation.GetId() }
func (o *OutcomeUnknown) OperationID() string   { return o.Operation.GetId() }
func (o *AwaitingApproval) OperationID() string { return o.Operation.GetId() }

func (o *Succeeded) Edited() *Edit        { return o.Edit }
func (o *Failed) Edited() *Edit           { return o.Edit }
func (o *OutcomeUnknown) Edited() *Edit   { return o.Edit }
func (o *AwaitingApproval) Edited() *Edit { return o.Edit }

func (*Succeeded) outcome()        {}
func (*Failed) outcome()           {}
func (*OutcomeUnknown) outcome()   {}
func (*AwaitingApproval) outcome() {}

// ForModel: {"edited" (with an Edit), "operation_id", "result",
// "status":"succeeded"}.
func (o *Succeeded) ForModel() string {
	result := o.Result
	if result == nil {
		result = map[string]any{}
	}
	return forModel(map[string]any{"status": "succeeded", "operation_id": o.OperationID(), "result": result}, o.Edit)
}

// ForModel: {"edited" (with an Edit), "message", "operation_id" (when there
// is one), "reason", "status":"failed"}.
func (o *Failed) ForModel() string {
	m := map[string]any{"status": "failed", "reason": string(o.Reason), "message": o.Message}
	if id := o.OperationID(); id != "" {
		m["operation_id"] = id
	}
	return forModel(m, o.Edit)
}

// ForModel: {"edited" (with an Edit), "message", "operation_id",
// "status":"outcome_unknown"}.
func (o *OutcomeUnknown) ForModel() string {
	return forModel(map[string]any{"status": "outcome_unknown", "operation_id": o.OperationID(), "message": MessageOutcomeUnknown}, o.Edit)
}

// ForModel: {"edited" (with an Edit), "message", "operation_id",
// "status":"awaiting_approval"}.
func (o *AwaitingApproval) ForModel() string {
	return forModel(map[string]any{"status": "awaiting_approval", "operation_id": o.OperationID(), "message": MessageAwaitingApproval}, o.Edit)
}

// forModel renders m, with an edit as its "edited" member: {"args",
// "changes": [{"field", "from", "to"}], "message" (MessageEdited),
// "supersedes"}.
func forModel(m map[string]any, edit *Edit) string {
	if edit != nil {
		m["edited"] = edit.forModel(m["status"].(string), m["operation_id"].(string))
	}
	b, err := fingerprint.Canonicalize(m)
	if err != nil { // only strings and a Struct's values: cannot happen
		return fmt.Sprintf(`{"status":"failed","message":%q}`, err.Error())
	}
	return string(b)
}

// Run runs one tool call to its final answer. idempotencyKey is the call's
// business identity (DeriveKey); args takes the shapes Prepare accepts (a
// model's arguments as json.RawMessage, say). Empty or blank argument text
// is no arguments ({}), as a model may write for a tool that takes none.
//
// The returned error is for the runtime, not the model: the ledger could not
// be reached (after the client's retries), the key was refused as a key,
// the context ended, OnApprovalRequired failed. The same Run can simply be
// repeated. Refusals of the call itself come back as *Failed.
func (r *ToolRunner) Run(ctx context.Context, tool string, args any, idempotencyKey string) (Outcome, error) {
	if tool == CheckOperationTool {
		return r.Check(ctx, operationIDArg(args))
	}
	if text, ok := args.(json.RawMessage); ok && len(bytes.TrimSpace(text)) == 0 {
		args = nil // {}, as the Python, TypeScript and Java runners read blank text
	}
	// The one-call path: Prepare also executes a call that needs no
	// approval, and answers one that does as it stands.
	popts := []PrepareOption{WithExecute(r.opts.ExecuteWait)}
	if r.opts.ToolVersion != "" {
		popts = append(popts, WithToolVersion(r.opts.ToolVersion))
	}
	var op *opledgerv1.Operation
	prep, err := r.c.Prepare(ctx, tool, args, idempotencyKey, popts...)
	switch {
	case err == nil:
		op = prep.GetOperation()
	case errors.Is(err, ReasonApprovalExpired):
		// The approval lapsed before the call ran: the ledger put the
		// operation back to AWAITING_APPROVAL and asked its approvers
		// again. It is the same call waiting for a new decision.
		if op, err = r.reawaiting(ctx, err, nil); err != nil {
			return nil, err
		}
	case supersededBy(err) != "":
		// The key names a call an approver approved with edits (the
		// one-call path's Execute of it answered OPERATION_SUPERSEDED):
		// the edited operation is the one to run.
		if op, err = r.successor(ctx, supersededBy(err), 0); err != nil {
			return nil, err
		}
	default:
		return r.refused(ctx, err, nil)
	}
	return r.carryOn(ctx, op, false)
}

// Check is the check_operation tool (CheckOperationTool): the outcome of an
// earlier call by its operation id. An unknown outcome is looked up at the
// downstream first (Reconcile); an operation approved since, or executing
// now, is executed or waited for, as Run would; anything else is answered
// as it stands. It never prepares anything. An id the ledger does not know
// (or that is not an operation id) is a *Failed the model can read.
func (r *ToolRunner) Check(ctx context.Context, operationID string) (Outcome, error) {
	got, err := r.c.Get(ctx, operationID)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && (e.Reason == ReasonOperationNotFound || e.Reason == ReasonFieldInvalid) {
			return &Failed{Reason: e.Reason, Message: MessageCheckUnknownOperation}, nil
		}
		return nil, err
	}
	op := got.GetOperation()
	if op.GetState() == opledgerv1.State_STATE_OUTCOME_UNKNOWN {
		// The ledger may know more now: a lookup, or READY when the
		// downstream trustworthily says nothing arrived.
		if rec, rerr := r.c.Reconcile(ctx, op.GetId()); rerr == nil {
			op = rec.GetOperation()
		}
	}
	return r.carryOn(ctx, op, true)
}

// MessageCheckUnknownOperation is the message of a check_operation call
// whose operation_id the ledger does not know.
const MessageCheckUnknownOperation = "No operation has this id. This says nothing about the earlier call: do not make it again; pass the operation_id its answer gave."

// operationIDArg reads check_operation's operation_id from the arguments in
// any shape Run accepts; "" when there is none.
func operationIDArg(args any) string {
	var raw []byte
	switch a := args.(type) {
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	case string:
		raw = []byte(a)
	case *structpb.Struct:
		return a.GetFields()["operation_id"].GetStringValue()
	default:
		raw, _ = json.Marshal(a)
	}
	var in struct {
		OperationID string `json:"operation_id"`
	}
	_ = json.Unmarshal(raw, &in)
	return in.OperationID
}

// carryOn takes an operation Prepare (or Get, for Check) returned to its
// answer: it waits for a decision, executes a READY one (and, for a check,
// waits for an EXECUTING one), and answers a settled one as it is. An
// operation an approver approved with edits (REJECTED, superseded_by, or an
// Execute answered OPERATION_SUPERSEDED) is followed to the edited one,
// which is run (it may still await another approver), and the answer says
// what the approver changed (Edit).
func (r *ToolRunner) carryOn(ctx context.Context, op *opledgerv1.Operation, check bool) (Outcome, error) {
	out, err := r.settle(ctx, op, check)
	if err != nil {
		return nil, err
	}
	return r.withEdit(ctx, out)
}

func (r *ToolRunner) settle(ctx context.Context, op *opledgerv1.Operation, check bool) (Outcome, error) {
	var err error
	for hops := 0; ; hops++ {
		if next := op.GetSupersededBy(); next != "" && op.GetState() == opledgerv1.State_STATE_REJECTED {
			if op, err = r.successor(ctx, next, hops); err != nil {
				return nil, err
			}
			continue
		}
		switch op.GetState() {
		case opledgerv1.State_STATE_AWAITING_APPROVAL:
			if op, err = r.awaitDecision(ctx, op); err != nil {
				return nil, err
			}
			if op.GetState() == opledgerv1.State_STATE_REJECTED && op.GetSupersededBy() != "" {
				continue // approved with edits meanwhile: follow the link
			}
			if op.GetState() == opledgerv1.State_STATE_AWAITING_APPROVAL {
				return &AwaitingApproval{Operation: op}, nil
			}
		case opledgerv1.State_STATE_READY:
			// Not executed by the Prepare (a server without the one-call
			// path), or approved since a check's earlier call: Execute below.
		case opledgerv1.State_STATE_REJECTED, opledgerv1.State_STATE_CANCELLED:
			// Execute answers it as a refusal (a *Failed with the operation).
		case opledgerv1.State_STATE_EXECUTING:
			if !check {
				return final(op) // pending; a check waits for its outcome
			}
		default:
			return final(op)
		}
		// Execute answers every other state: it runs a READY operation, waits
		// for an EXECUTING one, replays a finished one and refuses a rejected,
		// cancelled or expired one.
		ex, err := r.c.Execute(ctx, op.GetId(), WithWait(r.opts.ExecuteWait))
		if err != nil {
			if next := supersededBy(err); next != "" {
				// Approved with edits between our read and the Execute.
				if op, err = r.successor(ctx, next, hops); err != nil {
					return nil, err
				}
				continue
			}
			if errors.Is(err, ReasonApprovalRequired) {
				return &AwaitingApproval{Operation: op}, nil
			}
			if errors.Is(err, ReasonApprovalExpired) {
				if op, err = r.reawaiting(ctx, err, op); err != nil {
					return nil, err
				}
				return &AwaitingApproval{Operation: op}, nil
			}
			out, rerr := r.refused(ctx, err, op)
			if f, ok := out.(*Failed); ok && rerr == nil && !settledRefusal(f.Reason) {
				// An Execute refused for another reason (a replica
				// without the tool's version, say): the operation is not
				// settled, and "failed" would say nothing happened.
				return &OutcomeUnknown{Operation: op, Pending: true}, nil
			}
			return out, rerr
		}
		return final(ex.GetOperation())
	}
}

// settledRefusal reports a refusal of an Execute that settles the
// operation: a person denied it, it was cancelled, or the policy in force
// at its claim refused it (POLICY_DENIED: now REJECTED).
func settledRefusal(r Reason) bool {
	return r == ReasonOperationRejected || r == ReasonOperationCancelled || r == ReasonPolicyDenied
}

// reawaiting reads the operation an APPROVAL_EXPIRED refusal is about (the
// refusal's operation_id, else op) as it stands now: back in
// AWAITING_APPROVAL. An expired approval is never a *Failed: the call is
// the same and must not be made again under a new key.
func (r *ToolRunner) reawaiting(ctx context.Context, err error, op *opledgerv1.Operation) (*opledgerv1.Operation, error) {
	id := op.GetId()
	var e *Error
	if errors.As(err, &e) && e.Metadata["operation_id"] != "" {
		id = e.Metadata["operation_id"]
	}
	if id == "" {
		return nil, err
	}
	got, gerr := r.c.Get(ctx, id)
	if gerr != nil {
		return nil, gerr
	}
	return got.GetOperation(), nil
}

// refused answers an error of Prepare or Execute: a refusal of the call
// itself becomes a *Failed (with the operation the refusal names), anything
// else is returned as the error it is. A refusal of the request under a key
// that already names an earlier call (IDEMPOTENCY_KEY_REUSED, or a tool,
// version or args refused) carries that call, and says so
// (MessageKeyNamesEarlierCall): it may have taken effect, so "nothing
// happened, use a new key" would make it twice.
func (r *ToolRunner) refused(ctx context.Context, err error, op *opledgerv1.Operation) (Outcome, error) {
	f := refusal(err, op)
	if f == nil {
		return nil, err
	}
	var e *Error
	if f.Operation == nil && errors.As(err, &e) && e.Metadata["operation_id"] != "" {
		// A refusal that names another call than this one (its key's
		// earlier call; the same action under another key) says so: that
		// call may have taken effect.
		names := KeyedRefusal(f.Reason) || f.Reason == ReasonPolicyDenied || f.Reason == ReasonOperationDuplicate
		got, gerr := r.c.Get(ctx, e.Metadata["operation_id"])
		switch {
		case gerr == nil:
			f.Operation = got.GetOperation()
			state := f.Operation.GetState()
			switch {
			case f.Reason == ReasonOperationDuplicate:
				f.Message = fmt.Sprintf(MessageOperationDuplicate, StateWords(state))
			case KeyedRefusal(f.Reason) || (f.Reason == ReasonPolicyDenied && state != opledgerv1.State_STATE_REJECTED):
				// (A POLICY_DENIED naming a REJECTED operation is this
				// call's own, refused at its claim.)
				f.Message = KeyNamesEarlierCall(state)
			}
		case names:
			// The other call cannot be read now: not a final answer.
			return nil, err
		}
	}
	return f, nil
}

// KeyedRefusal reports a refusal of a Prepare as a request, before anything
// was recorded, which names the key's earlier call when there is one (its
// operation_id): that call may have taken effect.
func KeyedRefusal(r Reason) bool {
	switch r {
	case ReasonIdempotencyKeyReused, ReasonToolUnknown, ReasonToolVersionUnknown, ReasonArgsInvalid, ReasonArgsTooLarge:
		return true
	}
	return false
}

// final maps an Execute answer to an Outcome.
func final(op *opledgerv1.Operation) (Outcome, error) {
	switch op.GetState() {
	case opledgerv1.State_STATE_SUCCEEDED:
		return &Succeeded{Operation: op, Result: op.GetResult().AsMap()}, nil
	case opledgerv1.State_STATE_FAILED:
		reason := OperationErrorReason(op)
		if reason == "" {
			reason = ReasonDownstreamRejected
		}
		return &Failed{Operation: op, Reason: reason, Message: op.GetError().GetMessage()}, nil
	case opledgerv1.State_STATE_OUTCOME_UNKNOWN:
		return &OutcomeUnknown{Operation: op}, nil
	case opledgerv1.State_STATE_EXECUTING, opledgerv1.State_STATE_READY:
		// Another caller holds it past our wait (or released it unsent):
		// not known yet.
		return &OutcomeUnknown{Operation: op, Pending: true}, nil
	}
	return nil, fmt.Errorf("opledger: Execute answered with state %s", op.GetState())
}

// refusal turns the errors that are answers about the call itself (nothing
// was done) into a *Failed; any other error is nil here and goes to the
// caller.
func refusal(err error, op *opledgerv1.Operation) *Failed {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	switch e.Reason {
	case ReasonArgsInvalid, ReasonArgsTooLarge, ReasonToolUnknown, ReasonToolVersionUnknown,
		ReasonIdempotencyKeyReused, ReasonOperationRejected, ReasonOperationCancelled,
		ReasonPolicyDenied, ReasonLimitExceeded, ReasonOperationDuplicate:
		return &Failed{Operation: op, Reason: e.Reason, Message: RefusalMessage(e.Reason, e.Message)}
	}
	return nil
}

// awaitDecision calls the hook, then polls Get until the operation leaves
// AWAITING_APPROVAL or the approval wait (or the context's deadline) ends.
func (r *ToolRunner) awaitDecision(ctx context.Context, op *opledgerv1.Operation) (*opledgerv1.Operation, error) {
	if r.opts.OnApprovalRequired != nil {
		if err := r.opts.OnApprovalRequired(ctx, op); err != nil {
			return nil, err
		}
	} else if r.opts.ApprovalWait <= 0 {
		return op, nil
	}
	deadline := time.Now().Add(r.opts.ApprovalWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	interval := 200 * time.Millisecond
	for {
		got, err := r.c.Get(ctx, op.GetId())
		if err != nil {
			return nil, err
		}
		op = got.GetOperation()
		left := time.Until(deadline)
		if op.GetState() != opledgerv1.State_STATE_AWAITING_APPROVAL || left <= 0 {
			return op, nil
		}
		t := time.NewTimer(min(interval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return op, nil
		case <-t.C:
		}
		interval = min(interval*3/2, 2*time.Second)
	}
}
