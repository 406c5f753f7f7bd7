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
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/ledger"
)

// codeOf is the gRPC code for each reason the ledger can refuse with.
var codeOf = map[opledgerv1.ErrorReason]codes.Code{
	opledgerv1.ErrorReason_ERROR_REASON_API_KEY_MISSING:               codes.Unauthenticated,
	opledgerv1.ErrorReason_ERROR_REASON_API_KEY_INVALID:               codes.Unauthenticated,
	opledgerv1.ErrorReason_ERROR_REASON_ROLE_REQUIRED:                 codes.PermissionDenied,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATOR_REQUIRED:             codes.PermissionDenied,
	opledgerv1.ErrorReason_ERROR_REASON_SELF_APPROVAL_FORBIDDEN:       codes.PermissionDenied,
	opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_MISSING:       codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_INVALID:       codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED:        codes.AlreadyExists,
	opledgerv1.ErrorReason_ERROR_REASON_TOOL_UNKNOWN:                  codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_TOOL_VERSION_UNKNOWN:          codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID:                  codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_ARGS_TOO_LARGE:                codes.ResourceExhausted,
	opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID:                 codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_DEADLINE_INVALID:              codes.InvalidArgument,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND:           codes.NotFound,
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED:             codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_EXPIRED:              codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH: codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT:             codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_NOT_APPLICABLE:       codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_REJECTED:            codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_CANCELLED:           codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_RESOLUTION_NOT_APPLICABLE:     codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS:         codes.Aborted,
	opledgerv1.ErrorReason_ERROR_REASON_LEDGER_UNAVAILABLE:            codes.Unavailable,
	opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_UNAVAILABLE:        codes.Unavailable,
	opledgerv1.ErrorReason_ERROR_REASON_INTERNAL:                      codes.Internal,
	opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_REJECTED:           codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN:    codes.Unknown,
	opledgerv1.ErrorReason_ERROR_REASON_RATE_LIMITED:                  codes.ResourceExhausted,
	opledgerv1.ErrorReason_ERROR_REASON_CANCEL_NOT_APPLICABLE:         codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED:                codes.ResourceExhausted,
}

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
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "the call was cancelled")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	}
	var le *ledger.Error
	if !errors.As(err, &le) {
		s.logger.ErrorContext(ctx, "unexpected error", "error", err)
		return interceptors.Status(codes.Internal, opledgerv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
	}
	code, ok := codeOf[le.Reason]
	if !ok {
		code = codes.Internal
	}
	if code == codes.Internal || code == codes.Unavailable {
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
	return interceptors.Status(code, le.Reason, le.Message, le.Metadata, details...)
}
