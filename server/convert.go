package server

import (
	"encoding/json"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/internal/reason"
	"github.com/opledger/opledger/tool"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// structOf decodes a stored JSON object straight into a Struct (see
// jsonStruct); nil when there is none.
func structOf(b []byte) *structpb.Struct {
	if len(b) == 0 {
		return nil
	}
	s, err := jsonStruct(b)
	if err != nil {
		return nil
	}
	return s
}

func stateOf(s string) opledgerv1.State {
	return opledgerv1.State(opledgerv1.State_value["STATE_"+s])
}

func decisionOf(s string) opledgerv1.Decision {
	return opledgerv1.Decision(opledgerv1.Decision_value["DECISION_"+s])
}

// statusOf turns a stored error into a google.rpc.Status with one ErrorInfo
// (and the downstream's body as a Struct, when there is one).
func statusOf(b []byte) *status.Status {
	if len(b) == 0 {
		return nil
	}
	var se ledger.StoredError
	if err := json.Unmarshal(b, &se); err != nil {
		return &status.Status{Code: 2, Message: readBoundText(string(b))}
	}
	se.Body, se.Message = readBound(se.Body), readBoundText(se.Message)
	st := &status.Status{Code: int32(reason.Code(reason.Parse(se.Reason))), Message: se.Message}
	info := &errdetails.ErrorInfo{Reason: se.Reason, Domain: reason.Domain}
	if se.HTTPStatus != 0 {
		info.Metadata = map[string]string{"http_status": itoa(se.HTTPStatus)}
	}
	if a, err := anypb.New(info); err == nil {
		st.Details = append(st.Details, a)
	}
	if body := structOf(se.Body); body != nil {
		if a, err := anypb.New(body); err == nil {
			st.Details = append(st.Details, a)
		}
	}
	return st
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// operationPB encodes op. A finished operation's encoding is computed once,
// when the ledger caches the operation (Ledger.SetEncoder), and shared
// between answers (nothing mutates a response after the handler returns
// it): decoding args and result into Structs is most of what an answer
// costs.
func (s *Server) operationPB(op ledger.Operation) *opledgerv1.Operation {
	if pb, ok := s.ledger.Encoded(op).(*opledgerv1.Operation); ok {
		return pb
	}
	return operationPB(op)
}

// Rows written before every stored value was bounded (issue 39) may hold
// more than any answer can carry: such a value is served as the bound
// would have stored it (executor.Bound), the row unchanged. The thresholds
// leave room for what the database adds when it prints a JSON object it
// holds (a space after each comma and colon: at most half again) and for a
// text's prefix, so that no value bounded when written is cut when read.
const (
	maxReadBytes = 2 * executor.MaxStoredBytes
	maxReadText  = 2 * executor.MaxStoredText
)

// readBound is a stored JSON object as served (see maxReadBytes).
func readBound(b []byte) []byte {
	if len(b) <= maxReadBytes {
		return b
	}
	return executor.Bound(executor.Result{Body: b}).Body
}

// readBoundText is a stored text as served (see maxReadText).
func readBoundText(s string) string {
	if len(s) <= maxReadText {
		return s
	}
	return executor.BoundText(s)
}

func operationPB(op ledger.Operation) *opledgerv1.Operation {
	op.Result, op.ExternalRef, op.ApprovalReason = readBound(op.Result), readBoundText(op.ExternalRef), readBoundText(op.ApprovalReason)
	out := &opledgerv1.Operation{
		Id: op.ID, Tool: op.Tool, ToolVersion: op.ToolVersion, Fingerprint: op.Fingerprint,
		State: stateOf(op.State), Attempts: op.Attempts, Fence: op.Fence, DownstreamKey: op.DownstreamKey,
		ExternalRef: op.ExternalRef, Error: statusOf(op.Error),
		CreateTime: ts(op.CreatedAt), UpdateTime: ts(op.UpdatedAt), Tenant: op.Tenant, PreparedBy: op.PreparedBy,
		Approval: &opledgerv1.Approval{
			Required: op.ApprovalRequired, Decision: decisionOf(op.ApprovalDecision), DecidedBy: op.ApprovalDecidedBy,
			DecideTime: ts(op.ApprovalDecidedAt), ExpireTime: ts(op.ApprovalExpiresAt),
			ApprovedFingerprint: op.ApprovalFingerprint, Reason: op.ApprovalReason,
			ApprovalsNeeded: op.ApprovalsNeeded, Approvals: approvalsPB(op.Approvals), Rule: op.ApprovalRule,
		},
		Supersedes: op.Supersedes, SupersededBy: op.SupersededBy, PolicyDigest: op.PolicyDigest, Identity: op.Identity,
	}
	for i, name := range op.BudgetNames {
		b := &opledgerv1.Budget{Limit: name}
		if i < len(op.BudgetScopes) {
			b.Scope = op.BudgetScopes[i]
		}
		out.Budgets = append(out.Budgets, b)
	}
	if ledger.State(op.State) == ledger.StateExecuting {
		out.LeaseExpireTime = ts(op.LeaseExpiresAt)
	}
	raw := make([]byte, 0, len(op.Args)+len(op.Result)+64)
	raw, out.Args = structField(raw, argsField, op.Args)
	raw, out.Result = structField(raw, resultField, op.Result)
	if len(raw) > 0 {
		out.ProtoReflect().SetUnknown(raw)
	}
	return out
}

// approvalsPB decodes the stored approvals of the current round; a list that
// does not decode (none is ever written so) shows as none.
func approvalsPB(b []byte) []*opledgerv1.ApprovalDecision {
	entries := ledger.ApprovalsOf(b)
	if len(entries) == 0 {
		return nil
	}
	out := make([]*opledgerv1.ApprovalDecision, len(entries))
	for i, e := range entries {
		out[i] = &opledgerv1.ApprovalDecision{PrincipalId: e.PrincipalID, PrincipalName: e.PrincipalName,
			Decision: decisionOf(e.Decision), DecideTime: ts(e.DecidedAt), Fingerprint: e.Fingerprint,
			Reason: readBoundText(e.Reason), PolicyDigest: e.PolicyDigest}
	}
	return out
}

// The field numbers of an Operation's args and result.
var (
	argsField   = fieldNumber("args")
	resultField = fieldNumber("result")
)

func fieldNumber(name protoreflect.Name) protowire.Number {
	return (&opledgerv1.Operation{}).ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// structField encodes the stored JSON object b as field num of an Operation.
// It appends the field's wire bytes to raw, which the message carries as
// unknown fields: proto.Marshal writes them as they are, and every reader of
// the answer decodes them as the field they are (appendStructField). An
// object nested too deep for that comes back as a Struct instead; no object
// (none stored, or one jsonb could not have printed) is no field.
func structField(raw []byte, num protowire.Number, b []byte) ([]byte, *structpb.Struct) {
	if len(b) == 0 {
		return raw, nil
	}
	raw, err := appendStructField(raw, num, b)
	if errors.Is(err, errTooDeep) {
		return raw, structOf(b)
	}
	return raw, nil
}

func eventPB(e ledger.OperationEvent) *opledgerv1.OperationEvent {
	return &opledgerv1.OperationEvent{
		Seq: int64(e.Seq), Type: opledgerv1.EventType(opledgerv1.EventType_value["EVENT_TYPE_"+e.Type]), Actor: e.Actor,
		FromState: stateOf(e.FromState), ToState: stateOf(e.ToState), Attempt: e.Attempt, Fence: e.Fence,
		Detail: readBoundText(e.Detail), CreateTime: ts(e.CreatedAt),
	}
}

// policyPB is a tool version's rules as ListTools serves them.
func policyPB(t *tool.Tool) *opledgerv1.Policy {
	p := &opledgerv1.Policy{Digest: t.Policy.Digest, ApprovalRequired: t.Approval.Required, ApprovalWhen: t.Approval.When,
		Approvers: int32(t.Approval.Approvers), Editable: t.Approval.Editable, Summary: t.Summary()}
	if t.Approval.ApproversExpr != "" {
		p.Approvers = 0
		p.ApproversExpr = t.Approval.ApproversExpr
	}
	for _, d := range t.Policy.Deny {
		p.Deny = append(p.Deny, &opledgerv1.DenyRule{Name: d.Name, When: d.When, Message: d.Message})
	}
	return p
}

// budgetsPB is how much of each budget an operation counts against is used.
func budgetsPB(states []ledger.BudgetState) []*opledgerv1.Budget {
	out := make([]*opledgerv1.Budget, len(states))
	for i, s := range states {
		l := s.Limit
		out[i] = &opledgerv1.Budget{Limit: l.Name, Scope: s.Scope, Window: durationpb.New(l.Window), Count: int64(s.Count),
			MaxCount: int64(l.Count), Sum: l.Sum, Total: s.Sum, MaxTotal: l.Max, Over: string(l.Over)}
		if !s.FreesAt.IsZero() {
			out[i].FreesTime = timestamppb.New(s.FreesAt)
		}
	}
	return out
}
