package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/ledger"
)

// Prepare implements LedgerService.Prepare.
func (s *Server) Prepare(ctx context.Context, r *opledgerv1.PrepareRequest) (*opledgerv1.PrepareResponse, error) {
	s.advertiseRetention(ctx)
	idem, _ := interceptors.IdempotencyFrom(ctx)
	in := ledger.PrepareInput{
		Tool: r.GetTool(), ToolVersion: r.GetToolVersion(), Args: r.GetArgs(),
		IdempotencyKey: idem.Key, KeyDigest: idem.Digest, Method: MethodPrepare,
	}
	if r.GetExecute() {
		op, replayed, execReplayed, err := s.ledger.PrepareAndExecute(ctx, actorOf(ctx), in, r.GetWait().AsDuration())
		if err != nil {
			return nil, toStatus(ctx, s, err, "tool:"+r.GetTool())
		}
		return &opledgerv1.PrepareResponse{Operation: s.operationPB(op), Replayed: replayed, ExecutionReplayed: execReplayed}, nil
	}
	op, replayed, err := s.ledger.Prepare(ctx, actorOf(ctx), in)
	if err != nil {
		return nil, toStatus(ctx, s, err, "tool:"+r.GetTool())
	}
	return &opledgerv1.PrepareResponse{Operation: s.operationPB(op), Replayed: replayed}, nil
}

// RetentionHeader carries, on Prepare and Get responses, how long finished
// operations and their idempotency keys are kept (a Go duration string).
// A key reused after its operation was pruned starts a new operation.
const RetentionHeader = "opledger-retention"

func (s *Server) advertiseRetention(ctx context.Context) {
	if s.retentionHeader != nil {
		_ = grpc.SetHeader(ctx, s.retentionHeader) // SetHeader copies it into the call's header
	}
}

// Approve implements LedgerService.Approve.
func (s *Server) Approve(ctx context.Context, r *opledgerv1.ApproveRequest) (*opledgerv1.ApproveResponse, error) {
	in := ledger.ApproveInput{
		OperationID: r.GetOperationId(), Fingerprint: r.GetFingerprint(),
		Decision: strings.TrimPrefix(r.GetDecision().String(), "DECISION_"), Reason: r.GetReason(),
	}
	if r.EditedArgs != nil {
		res, err := s.ledger.ApproveEdited(ctx, actorOf(ctx), in, r.GetEditedArgs())
		if err != nil {
			return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
		}
		return &opledgerv1.ApproveResponse{Operation: s.operationPB(res.Original), Replayed: res.Replayed,
			Edited: s.operationPB(res.Edited)}, nil
	}
	op, replayed, err := s.ledger.Approve(ctx, actorOf(ctx), in)
	if err != nil {
		return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
	}
	return &opledgerv1.ApproveResponse{Operation: s.operationPB(op), Replayed: replayed}, nil
}

// Execute implements LedgerService.Execute.
func (s *Server) Execute(ctx context.Context, r *opledgerv1.ExecuteRequest) (*opledgerv1.ExecuteResponse, error) {
	op, replayed, err := s.ledger.Execute(ctx, actorOf(ctx), r.GetOperationId(), r.GetWait().AsDuration())
	if err != nil {
		return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
	}
	return &opledgerv1.ExecuteResponse{Operation: s.operationPB(op), Replayed: replayed}, nil
}

// Get implements LedgerService.Get.
func (s *Server) Get(ctx context.Context, r *opledgerv1.GetRequest) (*opledgerv1.GetResponse, error) {
	s.advertiseRetention(ctx)
	op, evs, err := s.ledger.Get(ctx, actorOf(ctx), r.GetOperationId(), r.GetIncludeEvents())
	if err != nil {
		return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
	}
	out := &opledgerv1.GetResponse{Operation: s.operationPB(op)}
	if len(op.BudgetNames) > 0 {
		// How much of each budget is used now. The encoding may be the
		// cached one other answers share: the room goes on a copy.
		states, err := s.ledger.Budgets(ctx, op)
		if err != nil {
			return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
		}
		pb := proto.CloneOf(out.Operation)
		pb.Budgets = budgetsPB(states)
		out.Operation = pb
	}
	for _, e := range evs {
		out.Events = append(out.Events, eventPB(e))
	}
	return out, nil
}

// Reconcile implements LedgerService.Reconcile.
func (s *Server) Reconcile(ctx context.Context, r *opledgerv1.ReconcileRequest) (*opledgerv1.ReconcileResponse, error) {
	var res *ledger.Resolution
	if pr := r.GetResolution(); pr != nil {
		res = &ledger.Resolution{Outcome: ledger.State(strings.TrimPrefix(pr.GetOutcome().String(), "STATE_")),
			ExternalRef: pr.GetExternalRef(), Note: pr.GetNote(), Fence: pr.GetFence()}
	}
	op, detail, err := s.ledger.Reconcile(ctx, actorOf(ctx), r.GetOperationId(), res)
	if err != nil {
		return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
	}
	return &opledgerv1.ReconcileResponse{Operation: s.operationPB(op), Detail: detail}, nil
}

// Cancel implements LedgerService.Cancel.
func (s *Server) Cancel(ctx context.Context, r *opledgerv1.CancelRequest) (*opledgerv1.CancelResponse, error) {
	op, replayed, err := s.ledger.Cancel(ctx, actorOf(ctx), r.GetOperationId(), r.GetReason())
	if err != nil {
		return nil, toStatus(ctx, s, err, "operations/"+r.GetOperationId())
	}
	return &opledgerv1.CancelResponse{Operation: s.operationPB(op), Replayed: replayed}, nil
}

// ListTools implements LedgerService.ListTools. The tools never change while
// the server runs, so the answer is built once and shared.
func (s *Server) ListTools(context.Context, *opledgerv1.ListToolsRequest) (*opledgerv1.ListToolsResponse, error) {
	s.toolsOnce.Do(func() {
		out := &opledgerv1.ListToolsResponse{}
		for _, t := range s.ledger.Tools() {
			pb := &opledgerv1.Tool{
				Name: t.Name, Version: t.Version, Description: t.Description,
				Effect:           opledgerv1.Effect(opledgerv1.Effect_value["EFFECT_"+strings.ToUpper(string(t.Effect))]),
				ApprovalRequired: t.Approval.MayRequire(), ArgsSchema: structOf(t.ArgsSchema), Current: s.ledger.IsCurrent(t),
				Policy: policyPB(t),
			}
			if t.Approval.MayRequire() {
				pb.ApprovalTtl = durationpb.New(t.Approval.TTL)
			}
			out.Tools = append(out.Tools, pb)
		}
		s.tools = out
	})
	return s.tools, nil
}

// ListOperations implements LedgerService.ListOperations.
func (s *Server) ListOperations(ctx context.Context, r *opledgerv1.ListOperationsRequest) (*opledgerv1.ListOperationsResponse, error) {
	in := ledger.ListInput{Tool: r.GetTool(), PageSize: int(r.GetPageSize()), PageToken: r.GetPageToken()}
	for _, st := range r.GetStates() {
		in.States = append(in.States, ledger.State(strings.TrimPrefix(st.String(), "STATE_")))
	}
	ops, next, err := s.ledger.ListOperations(ctx, actorOf(ctx), in)
	if err != nil {
		return nil, toStatus(ctx, s, err, "")
	}
	out := &opledgerv1.ListOperationsResponse{Operations: make([]*opledgerv1.Operation, 0, len(ops)), NextPageToken: next}
	size := 0
	for i, op := range ops {
		pb := operationPB(op)
		n := protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(pb))
		if i > 0 && size+n > MaxPageBytes {
			// The rest would not fit in the message a client receives:
			// a shorter page, and the next starts after the last one here.
			out.NextPageToken = s.ledger.PageTokenAfter(actorOf(ctx), in, ops[i-1])
			break
		}
		size += n
		out.Operations = append(out.Operations, pb)
	}
	return out, nil
}
