package server

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/internal/reason"
)

// preconditionType is the PreconditionFailure type for reasons that are
// about the operation's state.
var preconditionType = map[opledgerv1.ErrorReason]string{
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED:             "APPROVAL",
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_EXPIRED:              "APPROVAL",
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH: "FINGERPRINT",
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT:             "APPROVAL",
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_REJECTED:            "STATE",
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED:           "STATE",
	opledgerv1.ErrorReason_ERROR_REASON_RESOLUTION_NOT_APPLICABLE:     "STATE",
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_NOT_APPLICABLE:       "APPROVAL",
	opledgerv1.ErrorReason_ERROR_REASON_CANCEL_NOT_APPLICABLE:         "STATE",
}

// toStatus is the one mapper from domain errors to gRPC status errors:
// exactly one ErrorInfo, plus BadRequest, PreconditionFailure or RetryInfo
// where they help. Errors that already are statuses pass through; unknown
// errors become INTERNAL without leaking their text.
func toStatus(ctx context.Context, s *Server, err error, subject string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	// Only the call's own end is answered as such: a bound of the ledger's
	// own (a statement's timeout) that ran out while the caller still
	// waits is the ledger's refusal, with its reason.
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "the call was cancelled")
	}
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	}
	var le *ledger.Error
	if !errors.As(err, &le) {
		s.logger.ErrorContext(ctx, "unexpected error", "error", err)
		return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
	}
	code := reason.Code(le.Reason)
	if (code == codes.Internal || code == codes.Unavailable) && !le.Logged {
		s.logger.WarnContext(ctx, "request failed", "reason", le.Reason.String(), "error", le.Error())
	}
	var details []protoadapt.MessageV1
	if len(le.Violations) > 0 || le.Field != "" && code == codes.InvalidArgument {
		br := &errdetails.BadRequest{}
		for _, v := range le.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
		}
		if len(br.FieldViolations) == 0 {
			br.FieldViolations = []*errdetails.BadRequest_FieldViolation{{Field: le.Field, Description: le.Message}}
		}
		details = append(details, br)
	}
	if t, ok := preconditionType[le.Reason]; ok {
		details = append(details, &errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{
			{Type: t, Subject: subject, Description: le.Message}}})
	}
	if le.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(le.RetryAfter)})
	}
	return reason.Status(le.Reason, le.Message, le.Metadata, details...)
}
