package interceptors

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// ErrorDomain is the ErrorInfo domain of every error opledger returns.
const ErrorDomain = "opledger.v1"

// ReasonString is the ErrorInfo reason for r: its enum name without the
// ERROR_REASON_ prefix, e.g. "IDEMPOTENCY_KEY_REUSED".
func ReasonString(r opledgerv1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), "ERROR_REASON_")
}

// Status builds the gRPC status error for a refusal: the code, a message for
// people, exactly one ErrorInfo carrying the reason, and any further details
// (BadRequest, PreconditionFailure, RetryInfo). It is the one constructor of
// status errors, shared by the interceptors and the server's error mapper.
func Status(code codes.Code, reason opledgerv1.ErrorReason, msg string, metadata map[string]string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	all := make([]protoadapt.MessageV1, 0, len(details)+1)
	all = append(all, &errdetails.ErrorInfo{Reason: ReasonString(reason), Domain: ErrorDomain, Metadata: metadata})
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
