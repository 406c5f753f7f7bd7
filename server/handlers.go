package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/ledger"
)

// Prepare implements LedgerService.Prepare.
func (s *Server) Prepare(ctx context.Context, r *opledgerv1.PrepareRequest) (*opledgerv1.PrepareResponse, error) {
	s.advertiseRetention(ctx)
	idem, _ := interceptors.IdempotencyFrom(ctx)
	op, replayed, err := s.ledger.Prepare(ctx, actorOf(ctx), ledger.PrepareInput{
		Tool: r.GetTool(), ToolVersion: r.GetToolVersion(), Args: r.GetArgs(),
		IdempotencyKey: idem.Key, KeyDigest: idem.Digest, Method: MethodPrepare,
	})
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
	if s.retention > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(RetentionHeader, s.retention.String()))
	}
}

// Approve implements LedgerService.Approve.
func (s *Server) Approve(ctx context.Context, r *opledgerv1.ApproveRequest) (*opledgerv1.ApproveResponse, error) {
	op, replayed, err := s.ledger.Approve(ctx, actorOf(ctx), ledger.ApproveInput{
		OperationID: r.GetOperationId(), Fingerprint: r.GetFingerprint(),
		Decision: strings.TrimPrefix(r.GetDecision().String(), "DECISION_"), Reason: r.GetReason(),
	})
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
			ExternalRef: pr.GetExternalRef(), Note: pr.GetNote()}
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
