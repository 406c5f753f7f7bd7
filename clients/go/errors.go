package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// Domain is the google.rpc.ErrorInfo domain of every opledger error.
const Domain = "opledger.v1"

// Reason is the reason of an opledger error: an ErrorReason name without its
// ERROR_REASON_ prefix, exactly as the server puts it in the ErrorInfo.
//
// A Reason is also an error, so the constants below are sentinels:
// errors.Is(err, client.ReasonIdempotencyKeyReused) is true for an *Error
// with that reason. Branch on reasons, never on message text.
type Reason string

// The reasons the server sends (see docs/api.md for when). DownstreamRejected
// and DownstreamOutcomeUnknown only appear in Operation.error, never as an RPC
// error; OperationErrorReason reads them.
const (
	ReasonAPIKeyMissing               Reason = "API_KEY_MISSING"
	ReasonAPIKeyInvalid               Reason = "API_KEY_INVALID"
	ReasonRoleRequired                Reason = "ROLE_REQUIRED"
	ReasonIdempotencyKeyMissing       Reason = "IDEMPOTENCY_KEY_MISSING"
	ReasonIdempotencyKeyInvalid       Reason = "IDEMPOTENCY_KEY_INVALID"
	ReasonIdempotencyKeyReused        Reason = "IDEMPOTENCY_KEY_REUSED"
	ReasonToolUnknown                 Reason = "TOOL_UNKNOWN"
	ReasonToolVersionUnknown          Reason = "TOOL_VERSION_UNKNOWN"
	ReasonArgsInvalid                 Reason = "ARGS_INVALID"
	ReasonArgsTooLarge                Reason = "ARGS_TOO_LARGE"
	ReasonFieldInvalid                Reason = "FIELD_INVALID"
	ReasonOperationNotFound           Reason = "OPERATION_NOT_FOUND"
	ReasonApprovalRequired            Reason = "APPROVAL_REQUIRED"
	ReasonApprovalExpired             Reason = "APPROVAL_EXPIRED"
	ReasonApprovalFingerprintMismatch Reason = "APPROVAL_FINGERPRINT_MISMATCH"
	ReasonApprovalConflict            Reason = "APPROVAL_CONFLICT"
	ReasonSelfApprovalForbidden       Reason = "SELF_APPROVAL_FORBIDDEN"
	ReasonApprovalNotApplicable       Reason = "APPROVAL_NOT_APPLICABLE"
	ReasonOperationRejected           Reason = "OPERATION_REJECTED"
	ReasonOperationCancelled          Reason = "OPERATION_CANCELLED"
	ReasonOperationInProgress         Reason = "OPERATION_IN_PROGRESS"
	ReasonResolutionNotApplicable     Reason = "RESOLUTION_NOT_APPLICABLE"
	ReasonLedgerUnavailable           Reason = "LEDGER_UNAVAILABLE"
	ReasonInternal                    Reason = "INTERNAL"
	ReasonDownstreamUnavailable       Reason = "DOWNSTREAM_UNAVAILABLE"
	ReasonDeadlineInvalid             Reason = "DEADLINE_INVALID"
	ReasonDownstreamRejected          Reason = "DOWNSTREAM_REJECTED"
	ReasonDownstreamOutcomeUnknown    Reason = "DOWNSTREAM_OUTCOME_UNKNOWN"
	ReasonOperatorRequired            Reason = "OPERATOR_REQUIRED"
	ReasonRateLimited                 Reason = "RATE_LIMITED"
	ReasonQuotaExceeded               Reason = "QUOTA_EXCEEDED"
	ReasonCancelNotApplicable         Reason = "CANCEL_NOT_APPLICABLE"
	ReasonPolicyDenied                Reason = "POLICY_DENIED"
	ReasonLimitExceeded               Reason = "LIMIT_EXCEEDED"
	ReasonOperationDuplicate          Reason = "OPERATION_DUPLICATE"
	ReasonOperationSuperseded         Reason = "OPERATION_SUPERSEDED"
)

const reasonPrefix = "ERROR_REASON_"

// Error makes a Reason usable as an errors.Is target; it is the bare reason,
// so that printing a Reason shows "IDEMPOTENCY_KEY_REUSED".
func (r Reason) Error() string { return string(r) }

// Enum returns the generated enum value of r, or ERROR_REASON_UNSPECIFIED for
// a reason this client version does not know (a newer server may add some).
func (r Reason) Enum() opledgerv1.ErrorReason {
	return opledgerv1.ErrorReason(opledgerv1.ErrorReason_value[reasonPrefix+string(r)])
}

// ReasonFromEnum returns the reason string of an enum value ("" for
// ERROR_REASON_UNSPECIFIED).
func ReasonFromEnum(e opledgerv1.ErrorReason) Reason {
	if e == opledgerv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return ""
	}
	return Reason(strings.TrimPrefix(e.String(), reasonPrefix))
}

// Error is every error returned by a Client method: the gRPC status decoded.
// Reason is "" when the status carries no opledger ErrorInfo, as with
// transport failures (connection refused, deadline exceeded, cancelled).
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason, e.g. ReasonIdempotencyKeyReused.
	Reason Reason
	// Message is the status message, for people; do not parse it.
	Message string
	// RetryDelay is the google.rpc.RetryInfo delay, when the server sent one.
	RetryDelay time.Duration
	// HasRetryInfo tells a RetryInfo apart from a zero delay.
	HasRetryInfo bool
	// Metadata is the ErrorInfo metadata (e.g. "operation_id" on
	// IDEMPOTENCY_KEY_REUSED).
	Metadata map[string]string

	status *status.Status
}

// Error describes the failure without secrets (the server never puts keys or
// args in messages).
func (e *Error) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("opledger: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("opledger: %s %s: %s", e.Code, e.Reason, e.Message)
}

// Is reports whether target is e's Reason, so that errors.Is(err,
// client.ReasonOperationNotFound) works through any wrapping.
func (e *Error) Is(target error) bool {
	r, ok := target.(Reason)
	return ok && r != "" && r == e.Reason
}

// GRPCStatus returns the original status (with every detail, including
// google.rpc.BadRequest and PreconditionFailure), so status.FromError(err)
// and status.Code(err) keep working on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.status == nil {
		return status.New(e.Code, e.Message)
	}
	return e.status
}

// Retryable reports whether the client's retry rule applies: UNAVAILABLE
// (any method), or ABORTED with a RetryInfo. Both mean the request can be
// repeated unchanged, with the same idempotency key.
func (e *Error) Retryable() bool {
	return e.Code == codes.Unavailable || (e.Code == codes.Aborted && e.HasRetryInfo)
}

// ReasonOf returns the opledger reason of err ("" when err carries none).
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if st, ok := status.FromError(err); ok {
		return fromStatus(st).Reason
	}
	return ""
}

// OperationIDOf returns the operation an error names in its ErrorInfo
// metadata ("operation_id": a refused execution of the one-call path, a
// reused key), or "".
func OperationIDOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Metadata["operation_id"]
	}
	if st, ok := status.FromError(err); ok {
		return fromStatus(st).Metadata["operation_id"]
	}
	return ""
}

// OperationErrorReason returns the reason stored in a FAILED or
// OUTCOME_UNKNOWN operation's error (e.g. ReasonDownstreamRejected), or "".
func OperationErrorReason(op *opledgerv1.Operation) Reason {
	if op.GetError() == nil {
		return ""
	}
	return fromStatus(status.FromProto(op.GetError())).Reason
}

// toError turns what a generated stub returned into an *Error.
func toError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	// status.FromError also maps context errors to Canceled/DeadlineExceeded
	// only when they are statuses; plain non-status errors become Unknown.
	st, _ := status.FromError(err)
	return fromStatus(st)
}

func fromStatus(st *status.Status) *Error {
	e := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == Domain && e.Reason == "" {
				e.Reason = Reason(d.GetReason())
				e.Metadata = d.GetMetadata()
			}
		case *errdetails.RetryInfo:
			e.HasRetryInfo = true
			if d.GetRetryDelay() != nil {
				e.RetryDelay = max(d.GetRetryDelay().AsDuration(), 0)
			}
		}
	}
	return e
}
