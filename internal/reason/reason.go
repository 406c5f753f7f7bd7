// Package reason is opledger's one table from an error reason (the API's
// ErrorReason enum) to its gRPC code, and the one constructor of the status
// errors the service returns: a reason always travels with the same code,
// whichever layer refuses (an interceptor, request validation, the ledger),
// and every status carries exactly one ErrorInfo.
package reason

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// Domain is the ErrorInfo domain of every error opledger returns.
const Domain = "opledger.v1"

// codeOf is the gRPC code of each reason. Reasons stored in an operation's
// error (DOWNSTREAM_REJECTED, DOWNSTREAM_OUTCOME_UNKNOWN) have one too: it
// is the code of the google.rpc.Status in Operation.error.
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
	opledgerv1.ErrorReason_ERROR_REASON_CANCEL_NOT_APPLICABLE:         codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED:                 codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_SUPERSEDED:          codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED:                codes.ResourceExhausted,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_DUPLICATE:           codes.AlreadyExists,
	opledgerv1.ErrorReason_ERROR_REASON_OPERATION_IN_PROGRESS:         codes.Aborted,
	opledgerv1.ErrorReason_ERROR_REASON_LEDGER_UNAVAILABLE:            codes.Unavailable,
	opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_UNAVAILABLE:        codes.Unavailable,
	opledgerv1.ErrorReason_ERROR_REASON_RATE_LIMITED:                  codes.ResourceExhausted,
	opledgerv1.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED:                codes.ResourceExhausted,
	opledgerv1.ErrorReason_ERROR_REASON_INTERNAL:                      codes.Internal,
	opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_REJECTED:           codes.FailedPrecondition,
	opledgerv1.ErrorReason_ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN:    codes.Unknown,
}

// Code is the gRPC code that goes with r; INTERNAL for a reason missing
// from the table (a test keeps the table complete).
func Code(r opledgerv1.ErrorReason) codes.Code {
	if c, ok := codeOf[r]; ok {
		return c
	}
	return codes.Internal
}

// String is r as an ErrorInfo reason: its enum name without the
// ERROR_REASON_ prefix, e.g. "IDEMPOTENCY_KEY_REUSED".
func String(r opledgerv1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), "ERROR_REASON_")
}

// Parse is the reason an ErrorInfo reason string names, or UNSPECIFIED.
func Parse(s string) opledgerv1.ErrorReason {
	return opledgerv1.ErrorReason(opledgerv1.ErrorReason_value["ERROR_REASON_"+s])
}

// Status builds the status error for a refusal: r's code, a message for
// people, exactly one ErrorInfo carrying r (with metadata), and any further
// details (BadRequest, PreconditionFailure, RetryInfo).
func Status(r opledgerv1.ErrorReason, msg string, metadata map[string]string, details ...protoadapt.MessageV1) error {
	st := status.New(Code(r), msg)
	all := make([]protoadapt.MessageV1, 0, len(details)+1)
	all = append(all, &errdetails.ErrorInfo{Reason: String(r), Domain: Domain, Metadata: metadata})
	all = append(all, details...)
	withDetails, err := st.WithDetails(all...)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// FieldViolation is a BadRequest detail naming one bad field.
func FieldViolation(field, description string) *errdetails.BadRequest {
	return &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: description}}}
}

// Of returns the ErrorInfo reason of a status error, or "" if it has none.
func Of(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
