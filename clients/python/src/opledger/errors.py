"""errors turns opledger's gRPC statuses into typed exceptions.

Every error the service returns carries exactly one google.rpc.ErrorInfo (domain "opledger.v1")
whose reason names what happened; clients branch on that reason, never on the message text.
Each reason has its own subclass of OpledgerError, so callers can write
``except IdempotencyKeyReused:``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Type, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

#: ERROR_DOMAIN is the ErrorInfo domain of every opledger error.
ERROR_DOMAIN = "opledger.v1"

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class OpledgerError(Exception):
    """OpledgerError is any failed opledger call.

    Attributes:
        code: the gRPC status code.
        reason: the ErrorInfo reason (e.g. "IDEMPOTENCY_KEY_REUSED"), or None when the status had
            no opledger ErrorInfo (a transport failure, or a limit enforced by gRPC itself).
        message: the status message, for people; do not parse it.
        retry_delay: the RetryInfo delay in seconds, or None when the server sent none.
        metadata: the ErrorInfo metadata (e.g. {"operation_id": "op_…"}).
        status: the full google.rpc.Status, when the server sent one (BadRequest,
            PreconditionFailure and the rest are in its details).
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: Optional[str] = None,
        retry_delay: Optional[float] = None,
        metadata: Optional[Mapping[str, str]] = None,
        status: Optional[status_pb2.Status] = None,
    ) -> None:
        super().__init__(f"{code.name}: {reason + ': ' if reason else ''}{message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_delay = retry_delay
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.status = status

    @property
    def retryable(self) -> bool:
        """retryable says whether the same request may be sent again: UNAVAILABLE on any method, or
        ABORTED with a RetryInfo (a concurrent duplicate that is not answered yet)."""
        if self.code == grpc.StatusCode.UNAVAILABLE:
            return True
        return self.code == grpc.StatusCode.ABORTED and self.retry_delay is not None


# One subclass per ErrorReason an RPC can return. DOWNSTREAM_REJECTED and
# DOWNSTREAM_OUTCOME_UNKNOWN are not RPC errors (they are stored in Operation.error), so they have
# no class here.


class ApiKeyMissing(OpledgerError):
    """ApiKeyMissing (UNAUTHENTICATED): no `authorization: Bearer <key>` metadata."""


class ApiKeyInvalid(OpledgerError):
    """ApiKeyInvalid (UNAUTHENTICATED): the key is malformed, unknown or revoked."""


class RoleRequired(OpledgerError):
    """RoleRequired (PERMISSION_DENIED): the principal lacks the role the method needs."""


class IdempotencyKeyMissing(OpledgerError):
    """IdempotencyKeyMissing (INVALID_ARGUMENT): Prepare without an idempotency key."""


class IdempotencyKeyInvalid(OpledgerError):
    """IdempotencyKeyInvalid (INVALID_ARGUMENT): the key is empty, longer than 255 characters or
    not printable ASCII."""


class IdempotencyKeyReused(OpledgerError):
    """IdempotencyKeyReused (ALREADY_EXISTS): the key was already used for a request with a
    different fingerprint (args, tool version or method). Nothing changed; ``operation_id`` names
    the existing operation when the server said which."""

    @property
    def operation_id(self) -> Optional[str]:
        """operation_id is the operation that holds the key, if the server named it."""
        return self.metadata.get("operation_id")


class ToolUnknown(OpledgerError):
    """ToolUnknown (INVALID_ARGUMENT): no tool with that name is configured."""


class ToolVersionUnknown(OpledgerError):
    """ToolVersionUnknown (INVALID_ARGUMENT): the tool exists but not in that version."""


class ArgsInvalid(OpledgerError):
    """ArgsInvalid (INVALID_ARGUMENT): the args do not match the tool's JSON Schema; the
    google.rpc.BadRequest in ``status`` lists the violations."""


class ArgsTooLarge(OpledgerError):
    """ArgsTooLarge (RESOURCE_EXHAUSTED): the canonical args exceed the size limit."""


class FieldInvalid(OpledgerError):
    """FieldInvalid (INVALID_ARGUMENT): a request field is missing or malformed."""


class OperationNotFound(OpledgerError):
    """OperationNotFound (NOT_FOUND): no such operation in the caller's tenant."""


class ApprovalRequired(OpledgerError):
    """ApprovalRequired (FAILED_PRECONDITION): Execute of an operation that waits for approval."""


class ApprovalExpired(OpledgerError):
    """ApprovalExpired (FAILED_PRECONDITION): the approval expired; approve it again."""


class ApprovalFingerprintMismatch(OpledgerError):
    """ApprovalFingerprintMismatch (FAILED_PRECONDITION): the approver saw something other than
    the operation's arguments."""


class ApprovalConflict(OpledgerError):
    """ApprovalConflict (FAILED_PRECONDITION): the opposite decision is already recorded."""


class SelfApprovalForbidden(OpledgerError):
    """SelfApprovalForbidden (PERMISSION_DENIED): the preparer tried to approve its operation."""


class ApprovalNotApplicable(OpledgerError):
    """ApprovalNotApplicable (FAILED_PRECONDITION): the tool needs no approval, or the operation
    is past the point where a decision matters."""


class OperationRejected(OpledgerError):
    """OperationRejected (FAILED_PRECONDITION): an approver denied the operation."""


class OperationCancelled(OpledgerError):
    """OperationCancelled (FAILED_PRECONDITION): the operation was cancelled."""


class OperationInProgress(OpledgerError):
    """OperationInProgress (ABORTED): a concurrent duplicate holds the operation; retry the same
    request after ``retry_delay``."""


class ResolutionNotApplicable(OpledgerError):
    """ResolutionNotApplicable (FAILED_PRECONDITION): a manual resolution that does not apply."""


class LedgerUnavailable(OpledgerError):
    """LedgerUnavailable (UNAVAILABLE): the ledger's database could not be reached; safe to retry
    with the same idempotency key."""


class InternalError(OpledgerError):
    """InternalError (INTERNAL, reason "INTERNAL"): a server bug. The request may or may not have
    been recorded: retry with the same idempotency key, or Get, to find out."""


class DownstreamUnavailable(OpledgerError):
    """DownstreamUnavailable (UNAVAILABLE): nothing was sent downstream and the operation is READY
    again; Execute may be retried after ``retry_delay``."""


class DeadlineInvalid(OpledgerError):
    """DeadlineInvalid (INVALID_ARGUMENT): the request's deadline or wait is out of range."""


class OperatorRequired(OpledgerError):
    """OperatorRequired (PERMISSION_DENIED): a manual resolution needs the operator role."""


class RateLimited(OpledgerError):
    """RateLimited (RESOURCE_EXHAUSTED): the tenant sends requests faster than its rate limit.
    Not retried by the client (a retry loop would only add load): back off for at least
    ``retry_delay`` at the layer that decides what to do next."""


class QuotaExceeded(OpledgerError):
    """QuotaExceeded (RESOURCE_EXHAUSTED): the tenant created more operations this minute than its
    quota allows; nothing was stored. Not retried by the client; wait ``retry_delay``."""


class CancelNotApplicable(OpledgerError):
    """CancelNotApplicable (FAILED_PRECONDITION): the operation was already claimed by an executor
    or is finished, so it can no longer be cancelled."""


class PolicyDenied(OpledgerError):
    """PolicyDenied (FAILED_PRECONDITION): a deny rule of the tool's policy refused the call;
    ``metadata["rule"]`` names it. Nothing was stored (Prepare), or the operation was rejected
    before anything was sent (Execute under a changed policy)."""


class LimitExceeded(OpledgerError):
    """LimitExceeded (RESOURCE_EXHAUSTED): the call would take a budget past its limit within its
    window; nothing was stored. ``retry_delay`` says when room frees up."""


class OperationDuplicate(OpledgerError):
    """OperationDuplicate (ALREADY_EXISTS): an operation with the same business identity (e.g. the
    same invoice) is live or took effect under another idempotency key;
    ``metadata["operation_id"]`` names it. Nothing was stored."""


class OperationSuperseded(OpledgerError):
    """OperationSuperseded (FAILED_PRECONDITION): an approver approved the operation with edited
    arguments; ``metadata["superseded_by"]`` is the new operation, which is the one to execute."""


#: ERRORS_BY_REASON maps an ErrorInfo reason to its exception class.
ERRORS_BY_REASON: Dict[str, Type[OpledgerError]] = {
    "API_KEY_MISSING": ApiKeyMissing,
    "API_KEY_INVALID": ApiKeyInvalid,
    "ROLE_REQUIRED": RoleRequired,
    "IDEMPOTENCY_KEY_MISSING": IdempotencyKeyMissing,
    "IDEMPOTENCY_KEY_INVALID": IdempotencyKeyInvalid,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused,
    "TOOL_UNKNOWN": ToolUnknown,
    "TOOL_VERSION_UNKNOWN": ToolVersionUnknown,
    "ARGS_INVALID": ArgsInvalid,
    "ARGS_TOO_LARGE": ArgsTooLarge,
    "FIELD_INVALID": FieldInvalid,
    "OPERATION_NOT_FOUND": OperationNotFound,
    "APPROVAL_REQUIRED": ApprovalRequired,
    "APPROVAL_EXPIRED": ApprovalExpired,
    "APPROVAL_FINGERPRINT_MISMATCH": ApprovalFingerprintMismatch,
    "APPROVAL_CONFLICT": ApprovalConflict,
    "SELF_APPROVAL_FORBIDDEN": SelfApprovalForbidden,
    "APPROVAL_NOT_APPLICABLE": ApprovalNotApplicable,
    "OPERATION_REJECTED": OperationRejected,
    "OPERATION_CANCELLED": OperationCancelled,
    "OPERATION_IN_PROGRESS": OperationInProgress,
    "RESOLUTION_NOT_APPLICABLE": ResolutionNotApplicable,
    "LEDGER_UNAVAILABLE": LedgerUnavailable,
    "INTERNAL": InternalError,
    "DOWNSTREAM_UNAVAILABLE": DownstreamUnavailable,
    "DEADLINE_INVALID": DeadlineInvalid,
    "OPERATOR_REQUIRED": OperatorRequired,
    "RATE_LIMITED": RateLimited,
    "QUOTA_EXCEEDED": QuotaExceeded,
    "CANCEL_NOT_APPLICABLE": CancelNotApplicable,
    "POLICY_DENIED": PolicyDenied,
    "LIMIT_EXCEEDED": LimitExceeded,
    "OPERATION_DUPLICATE": OperationDuplicate,
    "OPERATION_SUPERSEDED": OperationSuperseded,
}


def from_rpc_error(err: grpc.RpcError) -> OpledgerError:
    """from_rpc_error converts a grpc.RpcError raised by a stub call into the OpledgerError
    subclass named by its ErrorInfo reason (OpledgerError itself when there is none)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    status = None
    # Metadata arrives as (key, value) pairs (grpc.aio.Metadata iterates the same way).
    for key, value in cast(Sequence[Tuple[str, Any]], trailers or ()):
        if key == _STATUS_DETAILS_KEY:
            status = status_pb2.Status.FromString(value)
            break
    return from_status(code or grpc.StatusCode.UNKNOWN, message or "", status)


def operation_error_reason(operation: Any) -> Optional[str]:
    """operation_error_reason returns the reason stored in a FAILED or OUTCOME_UNKNOWN operation's
    ``error`` (e.g. "DOWNSTREAM_REJECTED"), or None."""
    if not operation.HasField("error"):
        return None
    for any_ in operation.error.details:
        if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                return str(info.reason)
    return None


def from_status(
    code: grpc.StatusCode, message: str, status: Optional[status_pb2.Status]
) -> OpledgerError:
    """from_status builds the typed error for a status code, message and optional rich status."""
    reason = None
    metadata: Mapping[str, str] = {}
    retry_delay = None
    if status is not None:
        for any_ in status.details:
            if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_.Unpack(info)
                if info.domain == ERROR_DOMAIN and reason is None:
                    reason, metadata = info.reason, info.metadata
            elif any_.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                ri = error_details_pb2.RetryInfo()
                any_.Unpack(ri)
                retry_delay = ri.retry_delay.ToTimedelta().total_seconds()
    cls = ERRORS_BY_REASON.get(reason or "", OpledgerError)
    return cls(code, message, reason, retry_delay, metadata, status)


# __all__ is spelled out (not computed) so that type checkers see every class: mypy --strict
# accepts `except opledger.IdempotencyKeyReused` only for names it can find statically.
# tests/test_errors.py checks that it lists every class of ERRORS_BY_REASON.
__all__ = [
    "ERROR_DOMAIN",
    "ERRORS_BY_REASON",
    "OpledgerError",
    "from_rpc_error",
    "from_status",
    "operation_error_reason",
    "ApiKeyMissing",
    "ApiKeyInvalid",
    "RoleRequired",
    "IdempotencyKeyMissing",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyReused",
    "ToolUnknown",
    "ToolVersionUnknown",
    "ArgsInvalid",
    "ArgsTooLarge",
    "FieldInvalid",
    "OperationNotFound",
    "ApprovalRequired",
    "ApprovalExpired",
    "ApprovalFingerprintMismatch",
    "ApprovalConflict",
    "SelfApprovalForbidden",
    "ApprovalNotApplicable",
    "OperationRejected",
    "OperationCancelled",
    "OperationInProgress",
    "ResolutionNotApplicable",
    "LedgerUnavailable",
    "InternalError",
    "DownstreamUnavailable",
    "DeadlineInvalid",
    "OperatorRequired",
    "RateLimited",
    "QuotaExceeded",
    "CancelNotApplicable",
    "PolicyDenied",
    "LimitExceeded",
    "OperationDuplicate",
    "OperationSuperseded",
]
