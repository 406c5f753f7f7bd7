package mcpgateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// Statuses of an answer's structured content (docs/mcp.md, "Answers").
const (
	StatusSucceeded        = "succeeded"
	StatusAwaitingApproval = "awaiting_approval"
	StatusExecuting        = "executing"
	StatusPending          = "pending"
	StatusOutcomeUnknown   = "outcome_unknown"
	StatusFailed           = "failed"
	StatusRejected         = "rejected"
	StatusCancelled        = "cancelled"
	StatusError            = "error"
)

// Answer is the structured content of every tools/call result.
type Answer struct {
	// Status says what happened; see the Status constants.
	Status string `json:"status"`
	// OperationID is the ledger's operation, when one was recorded.
	OperationID string `json:"operation_id,omitempty"`
	// Tool and ToolVersion name the operation's tool.
	Tool        string `json:"tool,omitempty"`
	ToolVersion string `json:"tool_version,omitempty"`
	// State is the operation's ledger state, e.g. "STATE_SUCCEEDED".
	State string `json:"state,omitempty"`
	// Replayed is true when this answer was recorded before the call: the
	// call sent nothing to the downstream.
	Replayed bool `json:"replayed"`
	// Result is the downstream's answer of a succeeded operation.
	Result map[string]any `json:"result,omitempty"`
	// ExternalRef is the downstream's reference of the effect (a charge id).
	ExternalRef string `json:"external_ref,omitempty"`
	// Fingerprint is the operation's fingerprint, which an approver sees.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Error explains a refusal, a failure or an unknown outcome.
	Error *AnswerError `json:"error,omitempty"`
	// Edited says that an approver changed the call's arguments before
	// approving it (approve-with-edit): the answer is about the edited
	// operation, which is what ran (or awaits approval), never the call as
	// made.
	Edited *AnswerEdit `json:"edited,omitempty"`
	// Next says what to do now, for the model.
	Next string `json:"next"`
}

// AnswerError is the error part of an Answer.
type AnswerError struct {
	// Code is the gRPC code of a refused call, e.g. "INVALID_ARGUMENT".
	Code string `json:"code,omitempty"`
	// Reason is the ErrorInfo reason, e.g. "ARGS_INVALID" or
	// "DOWNSTREAM_REJECTED".
	Reason string `json:"reason,omitempty"`
	// Message is for people.
	Message string `json:"message"`
	// Violations lists the arguments that do not match the tool's schema.
	Violations []Violation `json:"violations,omitempty"`
}

// AnswerEdit is an approver's edit of a call (Answer.Edited).
type AnswerEdit struct {
	// Supersedes is the operation the call recorded, as it was made: it is
	// REJECTED and never runs.
	Supersedes string `json:"supersedes"`
	// Args are the arguments of the answer's operation: what ran.
	Args map[string]any `json:"args"`
	// Changes are the arguments the approver changed.
	Changes []AnswerChange `json:"changes"`
}

// AnswerChange is one argument an approver changed; From is absent for an
// argument the approver added, To for one removed.
type AnswerChange struct {
	Field string `json:"field"`
	From  any    `json:"from,omitempty"`
	To    any    `json:"to,omitempty"`
}

// Violation is one field of a google.rpc.BadRequest.
type Violation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// maxArgsWireBytes bounds the arguments the gateway sends the ledger: the
// ledger's transport refuses a message over 1 MiB (server.MaxMessageBytes)
// before any of its code runs, with no reason, and the MCP SDK accepts
// larger requests. A KiB is left for the rest of the Prepare. The ledger's
// own bound (64 KiB of canonical JSON) refuses smaller ones with the same
// reason.
const maxArgsWireBytes = 1<<20 - 1<<10

// toolHandler turns a tools/call of ledger tool t into one Prepare that also
// executes (the one-call path; a tool that needs approval is prepared and
// answered as awaiting approval).
func (g *Gateway) toolHandler(t *opledgerv1.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(ctx, g.opts.CallTimeout)
		defer cancel()
		args := &structpb.Struct{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := protojson.Unmarshal(raw, args); err != nil {
				msg := "the arguments must be a JSON object: " + err.Error()
				if esc, at, ok := unpairedSurrogate(raw); ok {
					msg = fmt.Sprintf("the arguments hold an unpaired UTF-16 surrogate (%s at byte %d): "+
						"JSON strings must be Unicode text, so half of a pair cannot stand alone", esc, at)
				}
				return refusal(codes.InvalidArgument, "ARGS_INVALID", msg,
					"Call again with the arguments as one JSON object matching the tool's input schema."), nil
			}
			if lit, carried, ok := client.InexactNumber(raw); ok {
				return refusal(codes.InvalidArgument, "ARGS_INVALID", fmt.Sprintf("the arguments hold the number %s, which the ledger "+
					"cannot pass on exactly: its numbers are IEEE-754 doubles, and the downstream would receive %s", lit, carried),
					"Nothing was recorded. Do not round the value: tell the user it is too large or too precise for this tool."), nil
			}
		}
		if n := proto.Size(args); n > maxArgsWireBytes {
			return refusal(codes.ResourceExhausted, "ARGS_TOO_LARGE", fmt.Sprintf("the arguments take %d bytes as a protobuf Struct, "+
				"more than the ledger's transport accepts", n),
				"Fix the arguments: the ledger accepts at most 64 KiB of them as canonical JSON."), nil
		}
		key, explicit, err := explicitKey(req.Params.Meta)
		if err != nil {
			return refusal(codes.InvalidArgument, "IDEMPOTENCY_KEY_INVALID", err.Error(), "The host must pass the key as a string."), nil
		}
		if !explicit {
			if key, err = DeriveKey(g.sessions.of(req.Session), t.GetName(), t.GetVersion(), args); err != nil {
				return refusal(codes.InvalidArgument, "ARGS_INVALID", err.Error(), "Call again with plain JSON arguments."), nil
			}
		}
		log := g.log.With("tool", t.GetName(), "key_digest", digest(key), "explicit_key", explicit)
		prep, err := g.ledger.Prepare(ctx, t.GetName(), args, key, client.WithToolVersion(t.GetVersion()), client.WithExecute(g.opts.Wait))
		if err != nil {
			id := client.OperationIDOf(err)
			if id == "" && unanswered(err) {
				// The call was cut short (its deadline, a lost connection,
				// a server error) with no operation named: the ledger may
				// have recorded it, and its downstream call, once started,
				// never follows the caller's cancellation.
				if explicit && !errors.Is(ctx.Err(), context.Canceled) {
					// (Not for a call the host withdrew: nobody reads this
					// answer, and asking would record what it gave up.)
					// The host's key: the model's next tools/call would come
					// with another key, so "call again" is no advice. Ask the
					// ledger under this key, without executing, which
					// operation the call recorded (or record it now, not run).
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordedTimeout)
					again, rerr := g.ledger.Prepare(rctx, t.GetName(), args, key, client.WithToolVersion(t.GetVersion()))
					cancel()
					if rerr == nil {
						op := again.GetOperation()
						log.Info("prepare cut short; the operation it recorded", "code", status.Code(err).String(), "operation_id", op.GetId())
						res, _ := render(op, again.GetReplayed(), fmt.Sprintf("(The call was cut short (%s); this is the operation its idempotency key names.)",
							answerError(err).short()))
						return res, nil
					}
				}
				res, a := cutShort(t, err, explicit)
				log.Info("prepare cut short", "code", status.Code(err).String(), "status", a.Status)
				return res, nil
			}
			if id == "" {
				log.Info("prepare refused", "reason", client.ReasonOf(err), "code", status.Code(err).String())
				return errorResult(err, nil, explicit), nil
			}
			switch client.ReasonOf(err) {
			case client.ReasonOperationDuplicate:
				// The same action under another key: the answer names
				// that call, which may have taken effect.
				op := &opledgerv1.Operation{Id: id}
				if got, gerr := g.ledger.Get(ctx, id); gerr == nil {
					op = got.GetOperation()
				}
				log.Info("prepare refused as a duplicate", "operation_id", id, "state", op.GetState().String())
				return errorResult(err, op, explicit), nil
			case client.ReasonPolicyDenied:
				// Refused by the policy: at the one-call path's claim (the
				// operation is now REJECTED), or as a request under a key
				// that names an earlier call (answered below as such).
				if got, gerr := g.ledger.Get(ctx, id); gerr == nil && got.GetOperation().GetState() == opledgerv1.State_STATE_REJECTED {
					log.Info("tools/call", "operation_id", id, "status", StatusError, "reason", client.ReasonOf(err))
					return errorResult(err, got.GetOperation(), explicit), nil
				}
			}
			if client.KeyedRefusal(client.ReasonOf(err)) || client.ReasonOf(err) == client.ReasonPolicyDenied {
				// Refused as a request, under a key that already names an
				// earlier call (the host's key reused with other arguments,
				// a tool version that moved on): that call may have taken
				// effect, and the model must hear so, not "nothing happened".
				got, gerr := g.ledger.Get(ctx, id)
				if gerr != nil {
					return keyedErrorResult(err, &opledgerv1.Operation{Id: id}), nil
				}
				op := got.GetOperation()
				log.Info("prepare refused under a used key", "reason", client.ReasonOf(err), "operation_id", id, "state", op.GetState().String())
				switch op.GetState() {
				case opledgerv1.State_STATE_SUCCEEDED, opledgerv1.State_STATE_FAILED, opledgerv1.State_STATE_REJECTED, opledgerv1.State_STATE_CANCELLED:
					// Settled: a refusal that names it, and says it may
					// have taken effect.
					return keyedErrorResult(err, op), nil
				}
				// Unsettled (awaiting approval, ready, running, unknown): its
				// state is the answer, so that the model does not retry.
				res, _ := render(op, true, fmt.Sprintf("(This answer is the earlier call's, operation %s: this call, with these arguments, was not made, "+
					"because its idempotency key already names that call (%s). If that was this same action, it is done or under way: "+
					"do not make it again with other arguments.)", id, client.ReasonOf(err)))
				return res, nil
			}
			// The operation was prepared and its execution refused: answer
			// as a refused Execute of it would be answered.
			op := &opledgerv1.Operation{Id: id}
			if got, gerr := g.ledger.Get(ctx, id); gerr == nil {
				op = got.GetOperation()
			}
			var res *mcp.CallToolResult
			var a Answer
			if supersededBy(err) != "" || op.GetSupersededBy() != "" {
				// The key names a call an approver approved with edits:
				// the edited operation is the one to run.
				res, a = g.drive(ctx, op, true, false)
			} else {
				res, a = g.executeError(op, err)
			}
			log.Info("tools/call", "operation_id", id, "status", a.Status, "reason", client.ReasonOf(err))
			return res, nil
		}
		op := prep.GetOperation()
		var res *mcp.CallToolResult
		var a Answer
		switch op.GetState() {
		case opledgerv1.State_STATE_SUCCEEDED, opledgerv1.State_STATE_FAILED, opledgerv1.State_STATE_EXECUTING:
			res, a = render(op, prep.GetExecutionReplayed(), "")
		case opledgerv1.State_STATE_OUTCOME_UNKNOWN:
			if prep.GetReplayed() {
				res, a = g.drive(ctx, op, true, false) // a repeat: the ledger may know more now
			} else {
				res, a = render(op, prep.GetExecutionReplayed(), "")
			}
		default: // awaiting approval, or a server without the one-call path
			res, a = g.drive(ctx, op, prep.GetReplayed(), false)
		}
		log.Info("tools/call", "operation_id", op.GetId(), "prepare_replayed", prep.GetReplayed(), "status", a.Status)
		return res, nil
	}
}

// checkOperationTool describes check_operation. It may run an approved
// operation, so it is not read-only; repeating it never adds an effect.
func checkOperationTool() *mcp.Tool {
	yes := true
	return &mcp.Tool{
		Name: CheckOperationTool,
		Description: "Report the outcome of an operation by its operation_id, as returned by an earlier call. " +
			"If the operation was approved and has not run yet, this runs it (once; it is the call that was approved) and reports the outcome. " +
			"If its outcome was unknown, this asks the ledger to reconcile it with the downstream first. It never starts a new operation.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"operation_id": map[string]any{"type": "string", "minLength": 1, "description": "The operation_id of an earlier answer, e.g. op_01J…"},
			},
			"required":             []any{"operation_id"},
			"additionalProperties": false,
		},
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes, OpenWorldHint: &yes},
	}
}

// checkOperation reads an operation and drives it to an answer.
func (g *Gateway) checkOperation(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.CallTimeout)
	defer cancel()
	var in struct {
		OperationID string `json:"operation_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.OperationID == "" {
		return refusal(codes.InvalidArgument, "FIELD_INVALID", "operation_id is required: a string from an earlier answer",
			"Call check_operation with the operation_id of an earlier answer."), nil
	}
	resp, err := g.ledger.Get(ctx, in.OperationID)
	if err != nil {
		return errorResult(err, nil, false), nil
	}
	res, a := g.drive(ctx, resp.GetOperation(), true, true)
	g.log.Info("check_operation", "operation_id", in.OperationID, "status", a.Status)
	return res, nil
}

// drive takes an operation found by Prepare or Get to the answer of this
// call: it executes a READY (or EXECUTING) one with a bounded wait, asks for
// reconciliation of an unknown outcome found on a repeated call, and
// otherwise reports the recorded state. seen says the operation existed
// before this call. An operation an approver approved with edits (REJECTED
// with superseded_by, or an Execute answered OPERATION_SUPERSEDED) is
// followed to the edited one, which is driven instead, and the answer says
// what the approver changed.
func (g *Gateway) drive(ctx context.Context, op *opledgerv1.Operation, seen, check bool) (*mcp.CallToolResult, Answer) {
	for hops := 0; ; hops++ {
		if next := op.GetSupersededBy(); next != "" && op.GetState() == opledgerv1.State_STATE_REJECTED {
			nop, res, a := g.successor(ctx, op, next, hops)
			if nop == nil {
				return res, a
			}
			op, seen = nop, true
			continue
		}
		if op.GetState() == opledgerv1.State_STATE_OUTCOME_UNKNOWN && seen {
			// A repeat or a check_operation: the ledger may know more now. A
			// Reconcile only looks the downstream up, or makes the operation
			// READY when the downstream trustworthily says nothing arrived.
			if rec, err := g.ledger.Reconcile(ctx, op.GetId()); err == nil {
				op = rec.GetOperation()
			} else {
				g.log.Info("reconcile refused", "operation_id", op.GetId(), "reason", client.ReasonOf(err))
			}
		}
		switch op.GetState() {
		case opledgerv1.State_STATE_READY, opledgerv1.State_STATE_EXECUTING:
			resp, err := g.ledger.Execute(ctx, op.GetId(), client.WithWait(g.opts.Wait))
			if next := supersededBy(err); next != "" {
				nop, res, a := g.successor(ctx, op, next, hops)
				if nop == nil {
					return res, a
				}
				op, seen = nop, true
				continue
			}
			if err != nil {
				res, a := g.executeError(op, err)
				return g.withEdit(ctx, op, res, a)
			}
			res, a := render(resp.GetOperation(), resp.GetReplayed(), "")
			return g.withEdit(ctx, resp.GetOperation(), res, a)
		default:
			res, a := render(op, seen, "")
			return g.withEdit(ctx, op, res, a)
		}
	}
}

// maxEdits bounds the supersede links a call follows (an edit of an
// edited operation, …), and the way back to the call as made.
const maxEdits = 8

// supersededBy is the operation an OPERATION_SUPERSEDED refusal names, or
// "".
func supersededBy(err error) string {
	var e *client.Error
	if errors.As(err, &e) && e.Reason == client.ReasonOperationSuperseded {
		return e.Metadata["superseded_by"]
	}
	return ""
}

// successor reads the operation next that supersedes op. When it cannot,
// the answer (pending: the edited operation exists and runs when checked)
// comes back instead.
func (g *Gateway) successor(ctx context.Context, op *opledgerv1.Operation, next string, hops int) (*opledgerv1.Operation, *mcp.CallToolResult, Answer) {
	if hops < maxEdits {
		got, err := g.ledger.Get(ctx, next)
		if err == nil {
			g.log.Info("following an approver's edit", "operation_id", op.GetId(), "superseded_by", next)
			return got.GetOperation(), nil, Answer{}
		}
		g.log.Info("edited operation unreadable", "operation_id", op.GetId(), "superseded_by", next, "reason", client.ReasonOf(err))
	}
	a := baseAnswer(&opledgerv1.Operation{Id: next, Tool: op.GetTool(), ToolVersion: op.GetToolVersion()}, false)
	a.Status = StatusPending
	a.Next = fmt.Sprintf("Do not call %s again for this action. Call check_operation with operation_id %s in a moment.", op.GetTool(), next)
	text := fmt.Sprintf("Pending: an approver approved %s (operation %s) with edited arguments, as operation %s, which could not be read now. Operation %s will not run. %s",
		op.GetTool(), op.GetId(), next, op.GetId(), a.Next)
	return nil, result(text, a, false), a
}

// withEdit adds to the answer about op, when op supersedes another (an
// approver's edit), what the approver changed: Answer.Edited, and the
// client's MessageEdited sentence in front of the text.
func (g *Gateway) withEdit(ctx context.Context, op *opledgerv1.Operation, res *mcp.CallToolResult, a Answer) (*mcp.CallToolResult, Answer) {
	if op.GetSupersedes() == "" || a.OperationID != op.GetId() {
		return res, a
	}
	root := op
	for i := 0; root.GetSupersedes() != ""; i++ {
		got, err := g.ledger.Get(ctx, root.GetSupersedes())
		if i >= maxEdits || err != nil {
			// The call as made cannot be read now: say what ran.
			args, _ := json.Marshal(op.GetArgs().AsMap())
			return prepend(res, a, fmt.Sprintf("An approver edited the arguments of this call before approving it (operation %s replaces %s, which will not run); its arguments are: %s.",
				op.GetId(), op.GetSupersedes(), args))
		}
		root = got.GetOperation()
	}
	e := client.NewEdit(root.GetId(), root.GetArgs().AsMap(), op.GetArgs().AsMap())
	a.Edited = &AnswerEdit{Supersedes: e.Supersedes, Args: e.Args, Changes: []AnswerChange{}}
	for _, c := range e.Changes {
		a.Edited.Changes = append(a.Edited.Changes, AnswerChange{Field: c.Field, From: c.From, To: c.To})
	}
	return prepend(res, a, e.Message(editStatus(a.Status), op.GetId()))
}

// editStatus is the runners' outcome status (client.Edit.Message) of an
// answer's status.
func editStatus(s string) string {
	switch s {
	case StatusSucceeded, StatusAwaitingApproval:
		return s
	case StatusFailed, StatusRejected, StatusCancelled, StatusError:
		return "failed"
	}
	return "outcome_unknown"
}

// prepend puts sentence in front of an answer's text.
func prepend(res *mcp.CallToolResult, a Answer, sentence string) (*mcp.CallToolResult, Answer) {
	return result(sentence+"\n"+text(res), a, res.IsError), a
}

func text(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if t, ok := res.Content[0].(*mcp.TextContent); ok {
		return t.Text
	}
	return ""
}

// executeError answers an Execute that did not return the operation. A
// refusal with a reason about the operation's state is that state's
// answer; a call that was cut short (deadline, lost connection, a server
// bug) is pending, never a failure: the operation exists and a repeat
// cannot duplicate it.
func (g *Gateway) executeError(op *opledgerv1.Operation, err error) (*mcp.CallToolResult, Answer) {
	switch client.ReasonOf(err) {
	case client.ReasonApprovalRequired:
		return render(withState(op, opledgerv1.State_STATE_AWAITING_APPROVAL), false, "")
	case client.ReasonApprovalExpired:
		return render(withState(op, opledgerv1.State_STATE_AWAITING_APPROVAL), false, "Its approval expired before it ran, so a person must approve it again.")
	case client.ReasonOperationRejected:
		return render(withState(op, opledgerv1.State_STATE_REJECTED), true, "")
	case client.ReasonOperationCancelled:
		return render(withState(op, opledgerv1.State_STATE_CANCELLED), true, "")
	case client.ReasonDownstreamUnavailable:
		return errorResult(err, op, false), Answer{}
	case client.ReasonPolicyDenied:
		// The policy in force at the claim refused it: REJECTED now.
		return errorResult(err, withState(op, opledgerv1.State_STATE_REJECTED), false), Answer{}
	}
	switch op.GetState() {
	case opledgerv1.State_STATE_EXECUTING, opledgerv1.State_STATE_OUTCOME_UNKNOWN:
		// It may have reached the downstream: whatever this refusal (a
		// replica without the tool version, say) is about, that is what the
		// model must know, not "nothing changed".
		g.log.Info("execute refused", "operation_id", op.GetId(), "reason", client.ReasonOf(err), "state", op.GetState().String())
		return render(op, false, fmt.Sprintf("(The ledger refused this check: %s.)", answerError(err).short()))
	}
	g.log.Info("execute cut short", "operation_id", op.GetId(), "reason", client.ReasonOf(err), "code", status.Code(err).String())
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition, codes.ResourceExhausted:
		return errorResult(err, op, false), Answer{}
	}
	a := baseAnswer(op, false)
	a.Status = StatusPending
	a.Error = answerError(err)
	a.Next = fmt.Sprintf("Do not retry with other arguments. Call check_operation with operation_id %s in a moment for the outcome.", op.GetId())
	text := fmt.Sprintf("Pending: %s was recorded as operation %s, but the ledger did not report its outcome in time (%s). It may be running now; it will not run twice. %s",
		op.GetTool(), op.GetId(), a.Error.short(), a.Next)
	return result(text, a, false), a
}

// unanswered reports whether err leaves open whether the ledger recorded
// the call: no ledger refusal (a deadline, a lost connection) or an
// internal error ("the request may or may not have been recorded").
func unanswered(err error) bool {
	r := client.ReasonOf(err)
	return r == "" || r == client.ReasonInternal
}

// recordedTimeout bounds the Prepare that asks, under the host's key, which
// operation a call cut short recorded.
const recordedTimeout = 5 * time.Second

// cutShort answers a one-call Prepare that ended without an answer: pending,
// because it may have been recorded and may be running. Under a derived key
// the same call again (same arguments in the same session, so the same key)
// answers with that operation, if there is one, and cannot run it twice;
// under the host's key a new call has a new key, so the model must not
// make one.
func cutShort(t *opledgerv1.Tool, err error, explicit bool) (*mcp.CallToolResult, Answer) {
	a := Answer{Status: StatusPending, Tool: t.GetName(), ToolVersion: t.GetVersion(), Error: answerError(err)}
	a.Next = "Do not retry with other arguments. Call this tool again in a moment with the same arguments: it answers with the same operation and cannot run it twice."
	if explicit {
		a.Next = "Do not call this tool again for this action: the host gives each call its own idempotency key, so another call would be a second one. " +
			"Its outcome is not known here; tell the user."
	}
	text := fmt.Sprintf("Pending: the ledger did not answer this call (%s); it may have been recorded and may be running now. %s",
		a.Error.short(), a.Next)
	return result(text, a, false), a
}

// render answers from an operation's state. note, when set, is added to
// the text.
func render(op *opledgerv1.Operation, replayed bool, note string) (*mcp.CallToolResult, Answer) {
	a := baseAnswer(op, replayed)
	id, tool := op.GetId(), op.GetTool()
	var text string
	isError := false
	switch op.GetState() {
	case opledgerv1.State_STATE_SUCCEEDED:
		a.Status = StatusSucceeded
		a.Result = op.GetResult().AsMap()
		a.ExternalRef = op.GetExternalRef()
		a.Next = "Done; report the result."
		text = fmt.Sprintf("Succeeded: %s ran as operation %s", tool, id)
		if a.ExternalRef != "" {
			text += fmt.Sprintf(" (reference %s)", a.ExternalRef)
		}
		text += "."
		if replayed {
			text += " This was already done earlier; nothing was done again."
		}
		if b, err := json.Marshal(a.Result); err == nil {
			text += "\nResult: " + string(b)
		}
	case opledgerv1.State_STATE_AWAITING_APPROVAL:
		a.Status = StatusAwaitingApproval
		a.Next = fmt.Sprintf("Tell the user that %s awaits a person's approval. After it is approved, call check_operation with operation_id %s to run it and get the result. Do not call %s again with other arguments.", tool, id, tool)
		text = fmt.Sprintf("Awaiting approval: %s was recorded as operation %s but has NOT been done. A person must approve it first (opledger's approval console, or the Approve call). %s", tool, id, a.Next)
	case opledgerv1.State_STATE_READY:
		a.Status = StatusPending
		a.Next = fmt.Sprintf("Call check_operation with operation_id %s to run it.", id)
		text = fmt.Sprintf("Ready: %s (operation %s) may run now but has not run yet. %s", tool, id, a.Next)
	case opledgerv1.State_STATE_EXECUTING:
		a.Status = StatusExecuting
		a.Next = fmt.Sprintf("Do not retry it. Call check_operation with operation_id %s in a moment for the outcome.", id)
		text = fmt.Sprintf("Executing: %s (operation %s) is running and its outcome is not known yet. It will not run twice. %s", tool, id, a.Next)
	case opledgerv1.State_STATE_OUTCOME_UNKNOWN:
		a.Status = StatusOutcomeUnknown
		a.Error = operationError(op)
		a.Next = fmt.Sprintf("Do NOT retry it, with these or other arguments: that could do it twice. Tell the user the outcome is unknown; call check_operation with operation_id %s later (opledger reconciles it with the downstream, or an operator settles it).", id)
		text = fmt.Sprintf("Outcome unknown: the request of %s (operation %s) may or may not have taken effect at the downstream (%s). %s", tool, id, a.Error.short(), a.Next)
	case opledgerv1.State_STATE_FAILED:
		a.Status = StatusFailed
		a.Error = operationError(op)
		a.Next = "Nothing happened. Tell the user why; repeating this same call returns this same refusal."
		text = fmt.Sprintf("Failed: the downstream refused %s (operation %s): %s. Nothing happened. %s", tool, id, a.Error.short(), strings.TrimPrefix(a.Next, "Nothing happened. "))
		isError = true
	case opledgerv1.State_STATE_REJECTED:
		a.Status = StatusRejected
		a.Next = "Nothing happened. Tell the user; do not try to get around the decision."
		text = fmt.Sprintf("Rejected: an approver denied %s (operation %s)", tool, id)
		if r := op.GetApproval().GetReason(); r != "" {
			text += ": " + r
		}
		text += ". " + a.Next
		isError = true
	case opledgerv1.State_STATE_CANCELLED:
		a.Status = StatusCancelled
		a.Next = "Nothing happened. Tell the user it was cancelled."
		text = fmt.Sprintf("Cancelled: %s (operation %s) was withdrawn before it ran. %s", tool, id, a.Next)
		isError = true
	default:
		a.Status = StatusPending
		a.Next = fmt.Sprintf("Call check_operation with operation_id %s later.", id)
		text = fmt.Sprintf("Operation %s of %s is in state %s. %s", id, tool, op.GetState(), a.Next)
	}
	if note != "" {
		text += " " + note
	}
	return result(text, a, isError), a
}

func baseAnswer(op *opledgerv1.Operation, replayed bool) Answer {
	return Answer{
		OperationID: op.GetId(), Tool: op.GetTool(), ToolVersion: op.GetToolVersion(),
		State: op.GetState().String(), Replayed: replayed, Fingerprint: op.GetFingerprint(),
	}
}

// withState is op as an Execute refusal reported it.
func withState(op *opledgerv1.Operation, s opledgerv1.State) *opledgerv1.Operation {
	c := &opledgerv1.Operation{Id: op.GetId(), Tool: op.GetTool(), ToolVersion: op.GetToolVersion(),
		Fingerprint: op.GetFingerprint(), State: s, Approval: op.GetApproval()}
	return c
}

// errorResult is a refused call as an MCP tool error: the gRPC code, the
// ErrorInfo reason, the message and, for bad arguments, the violations.
// op, when set, is the operation the refusal is about; explicit, that the
// call came with the host's idempotency key.
func errorResult(err error, op *opledgerv1.Operation, explicit bool) *mcp.CallToolResult {
	a := Answer{Status: StatusError, Error: answerError(err)}
	if op != nil {
		a = baseAnswer(op, false)
		a.Status, a.Error = StatusError, answerError(err)
	}
	a.Next = hint(client.ReasonOf(err), op, explicit)
	text := fmt.Sprintf("Error: opledger refused the call: %s.", a.Error.short())
	if len(a.Error.Violations) > 0 {
		var vs []string
		for _, v := range a.Error.Violations {
			vs = append(vs, v.Field+": "+v.Description)
		}
		text += " Violations: " + strings.Join(vs, "; ") + "."
	}
	return result(text+" "+a.Next, a, true)
}

// keyedErrorResult is a Prepare refused as a request under a key that
// names an earlier call, op, as an MCP tool error that says so.
func keyedErrorResult(err error, op *opledgerv1.Operation) *mcp.CallToolResult {
	a := baseAnswer(op, false)
	a.Status, a.Error, a.Next = StatusError, answerError(err), keyNamesEarlierCall(op)
	return result(fmt.Sprintf("Error: opledger refused the call: %s. %s", a.Error.short(), a.Next), a, true)
}

// refusal is the gateway's own refusal of a malformed call (nothing was
// sent to the ledger).
func refusal(code codes.Code, reason, msg, next string) *mcp.CallToolResult {
	a := Answer{Status: StatusError, Error: &AnswerError{Code: codeName(code), Reason: reason, Message: msg}, Next: next}
	return result(fmt.Sprintf("Error: %s. Nothing was recorded. %s", a.Error.short(), next), a, true)
}

// keyNamesEarlierCall is the hint of a Prepare refused as a request under a
// key that names an earlier call, op.
func keyNamesEarlierCall(op *opledgerv1.Operation) string {
	switch op.GetState() {
	case opledgerv1.State_STATE_FAILED, opledgerv1.State_STATE_REJECTED, opledgerv1.State_STATE_CANCELLED:
		return fmt.Sprintf("This call was not made: its idempotency key already names an earlier call, operation %s, which is %s and did not take effect. "+
			"The host must use a new key for a different call.", op.GetId(), client.StateWords(op.GetState()))
	}
	state := client.StateWords(op.GetState())
	return fmt.Sprintf("This call was not made, but its idempotency key already names an earlier call, operation %s, which is %s and may have taken effect. "+
		"If that was this same action, do not make it again, with these or other arguments; call check_operation with operation_id %s. "+
		"The host must use a new key only for a different call.", op.GetId(), state, op.GetId())
}

// hint says what a refusal means for the model. explicit: the call came
// with the host's idempotency key, so the model's next call has another.
func hint(r client.Reason, op *opledgerv1.Operation, explicit bool) string {
	// A refusal that names an operation (check_operation's) changed nothing
	// of it; one that names none recorded nothing.
	nothing := "Nothing was recorded."
	if op != nil {
		nothing = fmt.Sprintf("Nothing changed: operation %s is as it was.", op.GetId())
	}
	switch r {
	case client.ReasonArgsInvalid, client.ReasonArgsTooLarge, client.ReasonFieldInvalid, client.ReasonToolUnknown:
		return "Nothing was recorded. Fix the arguments to match the tool's input schema and call again."
	case client.ReasonToolVersionUnknown:
		return nothing + " The ledger no longer serves the tool version this gateway listed; tell the user the gateway must be restarted to offer the current tools."
	case client.ReasonIdempotencyKeyReused:
		if op != nil {
			return keyNamesEarlierCall(op)
		}
		return "This call was not made: its idempotency key was already used for a call with other arguments. If that was this same action, do not make it again; the host must use a new key only for a different call."
	case client.ReasonIdempotencyKeyInvalid, client.ReasonIdempotencyKeyMissing:
		return "Nothing was recorded. The host's idempotency key must be 1 to 255 printable ASCII characters."
	case client.ReasonAPIKeyMissing, client.ReasonAPIKeyInvalid, client.ReasonRoleRequired:
		return nothing + " The gateway's agent key is not accepted; tell the user to check the gateway's configuration."
	case client.ReasonRateLimited, client.ReasonQuotaExceeded:
		if op != nil {
			return nothing + fmt.Sprintf(" Wait a while, then call check_operation with operation_id %s again.", op.GetId())
		}
		return "Nothing was recorded. Wait a while, then call again with the same arguments."
	case client.ReasonPolicyDenied:
		// The error's message names the rule and says its message.
		refused := "Calling this tool again with the same arguments will be refused again: tell the user, and do not try to get around the rule."
		if op != nil {
			return fmt.Sprintf("Operation %s did not run and never will: the tool's policy refuses it. %s", op.GetId(), refused)
		}
		return "Nothing was recorded: the tool's policy refuses this call. " + refused
	case client.ReasonLimitExceeded:
		return "Nothing was recorded: a budget of the tools file refuses this call for now. The same call may be accepted once the limit's window has room again " +
			"(the error says which limit), but do not split or change it to get around the limit: tell the user."
	case client.ReasonOperationDuplicate:
		if op != nil {
			return fmt.Sprintf("This call was not made: the same action is already recorded as another call, operation %s, which is %s. "+
				"Do not make it again, with these or other arguments; call check_operation with operation_id %s to learn its outcome.", op.GetId(), client.StateWords(op.GetState()), op.GetId())
		}
	case client.ReasonOperationNotFound:
		return "No operation with this id exists for this agent; use the operation_id of an earlier answer."
	case client.ReasonDownstreamUnavailable:
		// Recorded and READY: check_operation runs it. Another tools/call
		// is no advice: under the host's key it is a second operation, and
		// this one would still run when checked.
		return fmt.Sprintf("Nothing was sent to the downstream yet; operation %s is recorded and runs when checked. "+
			"Do not call this tool again for this action: call check_operation with operation_id %s in a moment.", op.GetId(), op.GetId())
	}
	if op != nil {
		return fmt.Sprintf("Do not retry with other arguments; call check_operation with operation_id %s.", op.GetId())
	}
	if explicit {
		// (LEDGER_UNAVAILABLE among them.) Whether the ledger recorded the
		// call is not known, and the model's next tools/call comes with
		// another key.
		return "Whether this call was recorded is not known here. Do not call this tool again for this action: the host gives each call its own idempotency key, " +
			"so another call would be a second one. Tell the user."
	}
	return "Calling again with the same arguments is safe: it cannot do it twice."
}

func answerError(err error) *AnswerError {
	e := &AnswerError{Code: codeName(status.Code(err)), Reason: string(client.ReasonOf(err))}
	var ce *client.Error
	if errors.As(err, &ce) {
		e.Message = ce.Message
	} else {
		e.Message = err.Error()
	}
	if st, ok := status.FromError(err); ok {
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					e.Violations = append(e.Violations, Violation{Field: v.GetField(), Description: v.GetDescription()})
				}
			}
		}
	}
	return e
}

// operationError is the error stored in a FAILED or OUTCOME_UNKNOWN
// operation.
func operationError(op *opledgerv1.Operation) *AnswerError {
	e := &AnswerError{Reason: string(client.OperationErrorReason(op)), Message: op.GetError().GetMessage()}
	if e.Message == "" {
		e.Message = "no detail recorded"
	}
	return e
}

func (e *AnswerError) short() string {
	if e == nil {
		return ""
	}
	if e.Reason != "" {
		return e.Reason + ": " + e.Message
	}
	return e.Message
}

func result(text string, a Answer, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: a, IsError: isError}
}

// codeName is a gRPC code as the gRPC specification spells it, e.g.
// "INVALID_ARGUMENT" (codes.Code.String gives "InvalidArgument").
func codeName(c codes.Code) string {
	if c == codes.OK {
		return "OK"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// digest is what the logs show of an idempotency key.
func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// unpairedSurrogate finds the first \u escape in a JSON string of raw that
// names half of a UTF-16 surrogate pair without the other half, which
// protojson refuses with a message that does not say so ("unexpected EOF",
// or an "invalid escape code" naming the text after it). It returns the
// escape as written and its byte offset.
func unpairedSurrogate(raw []byte) (esc string, at int, ok bool) {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range raw[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			in = !in
		case in && c == '\\':
			r, isU := hex4(i)
			if !isU {
				i++ // a one-character escape: skip what it escapes
				continue
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				if low, ok := hex4(i + 6); ok && low >= 0xDC00 && low < 0xE000 {
					i += 11
					continue
				}
				return string(raw[i : i+6]), i, true
			case r >= 0xDC00 && r < 0xE000:
				return string(raw[i : i+6]), i, true
			}
			i += 5
		}
	}
	return "", 0, false
}
