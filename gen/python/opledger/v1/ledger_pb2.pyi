import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_UNSPECIFIED: _ClassVar[State]
    STATE_AWAITING_APPROVAL: _ClassVar[State]
    STATE_READY: _ClassVar[State]
    STATE_EXECUTING: _ClassVar[State]
    STATE_SUCCEEDED: _ClassVar[State]
    STATE_FAILED: _ClassVar[State]
    STATE_OUTCOME_UNKNOWN: _ClassVar[State]
    STATE_REJECTED: _ClassVar[State]
    STATE_CANCELLED: _ClassVar[State]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_APPROVE: _ClassVar[Decision]
    DECISION_DENY: _ClassVar[Decision]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_API_KEY_MISSING: _ClassVar[ErrorReason]
    ERROR_REASON_API_KEY_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_ROLE_REQUIRED: _ClassVar[ErrorReason]
    ERROR_REASON_IDEMPOTENCY_KEY_MISSING: _ClassVar[ErrorReason]
    ERROR_REASON_IDEMPOTENCY_KEY_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_IDEMPOTENCY_KEY_REUSED: _ClassVar[ErrorReason]
    ERROR_REASON_TOOL_UNKNOWN: _ClassVar[ErrorReason]
    ERROR_REASON_TOOL_VERSION_UNKNOWN: _ClassVar[ErrorReason]
    ERROR_REASON_ARGS_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_ARGS_TOO_LARGE: _ClassVar[ErrorReason]
    ERROR_REASON_FIELD_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_APPROVAL_REQUIRED: _ClassVar[ErrorReason]
    ERROR_REASON_APPROVAL_EXPIRED: _ClassVar[ErrorReason]
    ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH: _ClassVar[ErrorReason]
    ERROR_REASON_APPROVAL_CONFLICT: _ClassVar[ErrorReason]
    ERROR_REASON_SELF_APPROVAL_FORBIDDEN: _ClassVar[ErrorReason]
    ERROR_REASON_APPROVAL_NOT_APPLICABLE: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_REJECTED: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_CANCELLED: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_IN_PROGRESS: _ClassVar[ErrorReason]
    ERROR_REASON_RESOLUTION_NOT_APPLICABLE: _ClassVar[ErrorReason]
    ERROR_REASON_LEDGER_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
    ERROR_REASON_DOWNSTREAM_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_DEADLINE_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_DOWNSTREAM_REJECTED: _ClassVar[ErrorReason]
    ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATOR_REQUIRED: _ClassVar[ErrorReason]
    ERROR_REASON_RATE_LIMITED: _ClassVar[ErrorReason]
    ERROR_REASON_QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_CANCEL_NOT_APPLICABLE: _ClassVar[ErrorReason]
    ERROR_REASON_POLICY_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_LIMIT_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_DUPLICATE: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_SUPERSEDED: _ClassVar[ErrorReason]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_PREPARED: _ClassVar[EventType]
    EVENT_TYPE_APPROVED: _ClassVar[EventType]
    EVENT_TYPE_DENIED: _ClassVar[EventType]
    EVENT_TYPE_CLAIMED: _ClassVar[EventType]
    EVENT_TYPE_EXTERNAL_REF_RECORDED: _ClassVar[EventType]
    EVENT_TYPE_SUCCEEDED: _ClassVar[EventType]
    EVENT_TYPE_FAILED: _ClassVar[EventType]
    EVENT_TYPE_OUTCOME_UNKNOWN: _ClassVar[EventType]
    EVENT_TYPE_RELEASED: _ClassVar[EventType]
    EVENT_TYPE_LEASE_TAKEN_OVER: _ClassVar[EventType]
    EVENT_TYPE_RECONCILED: _ClassVar[EventType]
    EVENT_TYPE_RESOLVED_MANUALLY: _ClassVar[EventType]
    EVENT_TYPE_CANCELLED: _ClassVar[EventType]
    EVENT_TYPE_APPROVAL_EXPIRED: _ClassVar[EventType]
    EVENT_TYPE_POLICY_CHANGED: _ClassVar[EventType]
    EVENT_TYPE_POLICY_CHECKED: _ClassVar[EventType]
    EVENT_TYPE_SUPERSEDED: _ClassVar[EventType]

class Effect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_UNSPECIFIED: _ClassVar[Effect]
    EFFECT_READ_ONLY: _ClassVar[Effect]
    EFFECT_IDEMPOTENT: _ClassVar[Effect]
    EFFECT_SIDE_EFFECT: _ClassVar[Effect]
STATE_UNSPECIFIED: State
STATE_AWAITING_APPROVAL: State
STATE_READY: State
STATE_EXECUTING: State
STATE_SUCCEEDED: State
STATE_FAILED: State
STATE_OUTCOME_UNKNOWN: State
STATE_REJECTED: State
STATE_CANCELLED: State
DECISION_UNSPECIFIED: Decision
DECISION_APPROVE: Decision
DECISION_DENY: Decision
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_API_KEY_MISSING: ErrorReason
ERROR_REASON_API_KEY_INVALID: ErrorReason
ERROR_REASON_ROLE_REQUIRED: ErrorReason
ERROR_REASON_IDEMPOTENCY_KEY_MISSING: ErrorReason
ERROR_REASON_IDEMPOTENCY_KEY_INVALID: ErrorReason
ERROR_REASON_IDEMPOTENCY_KEY_REUSED: ErrorReason
ERROR_REASON_TOOL_UNKNOWN: ErrorReason
ERROR_REASON_TOOL_VERSION_UNKNOWN: ErrorReason
ERROR_REASON_ARGS_INVALID: ErrorReason
ERROR_REASON_ARGS_TOO_LARGE: ErrorReason
ERROR_REASON_FIELD_INVALID: ErrorReason
ERROR_REASON_OPERATION_NOT_FOUND: ErrorReason
ERROR_REASON_APPROVAL_REQUIRED: ErrorReason
ERROR_REASON_APPROVAL_EXPIRED: ErrorReason
ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH: ErrorReason
ERROR_REASON_APPROVAL_CONFLICT: ErrorReason
ERROR_REASON_SELF_APPROVAL_FORBIDDEN: ErrorReason
ERROR_REASON_APPROVAL_NOT_APPLICABLE: ErrorReason
ERROR_REASON_OPERATION_REJECTED: ErrorReason
ERROR_REASON_OPERATION_CANCELLED: ErrorReason
ERROR_REASON_OPERATION_IN_PROGRESS: ErrorReason
ERROR_REASON_RESOLUTION_NOT_APPLICABLE: ErrorReason
ERROR_REASON_LEDGER_UNAVAILABLE: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_DOWNSTREAM_UNAVAILABLE: ErrorReason
ERROR_REASON_DEADLINE_INVALID: ErrorReason
ERROR_REASON_DOWNSTREAM_REJECTED: ErrorReason
ERROR_REASON_DOWNSTREAM_OUTCOME_UNKNOWN: ErrorReason
ERROR_REASON_OPERATOR_REQUIRED: ErrorReason
ERROR_REASON_RATE_LIMITED: ErrorReason
ERROR_REASON_QUOTA_EXCEEDED: ErrorReason
ERROR_REASON_CANCEL_NOT_APPLICABLE: ErrorReason
ERROR_REASON_POLICY_DENIED: ErrorReason
ERROR_REASON_LIMIT_EXCEEDED: ErrorReason
ERROR_REASON_OPERATION_DUPLICATE: ErrorReason
ERROR_REASON_OPERATION_SUPERSEDED: ErrorReason
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_PREPARED: EventType
EVENT_TYPE_APPROVED: EventType
EVENT_TYPE_DENIED: EventType
EVENT_TYPE_CLAIMED: EventType
EVENT_TYPE_EXTERNAL_REF_RECORDED: EventType
EVENT_TYPE_SUCCEEDED: EventType
EVENT_TYPE_FAILED: EventType
EVENT_TYPE_OUTCOME_UNKNOWN: EventType
EVENT_TYPE_RELEASED: EventType
EVENT_TYPE_LEASE_TAKEN_OVER: EventType
EVENT_TYPE_RECONCILED: EventType
EVENT_TYPE_RESOLVED_MANUALLY: EventType
EVENT_TYPE_CANCELLED: EventType
EVENT_TYPE_APPROVAL_EXPIRED: EventType
EVENT_TYPE_POLICY_CHANGED: EventType
EVENT_TYPE_POLICY_CHECKED: EventType
EVENT_TYPE_SUPERSEDED: EventType
EFFECT_UNSPECIFIED: Effect
EFFECT_READ_ONLY: Effect
EFFECT_IDEMPOTENT: Effect
EFFECT_SIDE_EFFECT: Effect

class Operation(_message.Message):
    __slots__ = ("id", "tool", "tool_version", "args", "fingerprint", "state", "approval", "attempts", "fence", "downstream_key", "external_ref", "result", "error", "create_time", "update_time", "tenant", "prepared_by", "lease_expire_time", "supersedes", "superseded_by", "policy_digest", "budgets", "identity")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    DOWNSTREAM_KEY_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_REF_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PREPARED_BY_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    POLICY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    tool: str
    tool_version: str
    args: _struct_pb2.Struct
    fingerprint: str
    state: State
    approval: Approval
    attempts: int
    fence: int
    downstream_key: str
    external_ref: str
    result: _struct_pb2.Struct
    error: _status_pb2.Status
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    tenant: str
    prepared_by: str
    lease_expire_time: _timestamp_pb2.Timestamp
    supersedes: str
    superseded_by: str
    policy_digest: str
    budgets: _containers.RepeatedCompositeFieldContainer[Budget]
    identity: str
    def __init__(self, id: _Optional[str] = ..., tool: _Optional[str] = ..., tool_version: _Optional[str] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., fingerprint: _Optional[str] = ..., state: _Optional[_Union[State, str]] = ..., approval: _Optional[_Union[Approval, _Mapping]] = ..., attempts: _Optional[int] = ..., fence: _Optional[int] = ..., downstream_key: _Optional[str] = ..., external_ref: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., prepared_by: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., supersedes: _Optional[str] = ..., superseded_by: _Optional[str] = ..., policy_digest: _Optional[str] = ..., budgets: _Optional[_Iterable[_Union[Budget, _Mapping]]] = ..., identity: _Optional[str] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("limit", "scope", "window", "count", "max_count", "sum", "total", "max_total", "frees_time", "over")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUM_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FREES_TIME_FIELD_NUMBER: _ClassVar[int]
    OVER_FIELD_NUMBER: _ClassVar[int]
    limit: str
    scope: str
    window: _duration_pb2.Duration
    count: int
    max_count: int
    sum: str
    total: float
    max_total: float
    frees_time: _timestamp_pb2.Timestamp
    over: str
    def __init__(self, limit: _Optional[str] = ..., scope: _Optional[str] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., count: _Optional[int] = ..., max_count: _Optional[int] = ..., sum: _Optional[str] = ..., total: _Optional[float] = ..., max_total: _Optional[float] = ..., frees_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., over: _Optional[str] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("required", "decision", "decided_by", "decide_time", "expire_time", "approved_fingerprint", "reason", "approvals_needed", "approvals", "rule")
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_NEEDED_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    required: bool
    decision: Decision
    decided_by: str
    decide_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    approved_fingerprint: str
    reason: str
    approvals_needed: int
    approvals: _containers.RepeatedCompositeFieldContainer[ApprovalDecision]
    rule: str
    def __init__(self, required: _Optional[bool] = ..., decision: _Optional[_Union[Decision, str]] = ..., decided_by: _Optional[str] = ..., decide_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., approved_fingerprint: _Optional[str] = ..., reason: _Optional[str] = ..., approvals_needed: _Optional[int] = ..., approvals: _Optional[_Iterable[_Union[ApprovalDecision, _Mapping]]] = ..., rule: _Optional[str] = ...) -> None: ...

class ApprovalDecision(_message.Message):
    __slots__ = ("principal_id", "principal_name", "decision", "decide_time", "fingerprint", "reason", "policy_digest")
    PRINCIPAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_NAME_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DECIDE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    principal_id: str
    principal_name: str
    decision: Decision
    decide_time: _timestamp_pb2.Timestamp
    fingerprint: str
    reason: str
    policy_digest: str
    def __init__(self, principal_id: _Optional[str] = ..., principal_name: _Optional[str] = ..., decision: _Optional[_Union[Decision, str]] = ..., decide_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fingerprint: _Optional[str] = ..., reason: _Optional[str] = ..., policy_digest: _Optional[str] = ...) -> None: ...

class OperationEvent(_message.Message):
    __slots__ = ("seq", "type", "actor", "from_state", "to_state", "attempt", "fence", "detail", "create_time")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    seq: int
    type: EventType
    actor: str
    from_state: State
    to_state: State
    attempt: int
    fence: int
    detail: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., type: _Optional[_Union[EventType, str]] = ..., actor: _Optional[str] = ..., from_state: _Optional[_Union[State, str]] = ..., to_state: _Optional[_Union[State, str]] = ..., attempt: _Optional[int] = ..., fence: _Optional[int] = ..., detail: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PrepareRequest(_message.Message):
    __slots__ = ("tool", "tool_version", "args", "execute", "wait")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    tool: str
    tool_version: str
    args: _struct_pb2.Struct
    execute: bool
    wait: _duration_pb2.Duration
    def __init__(self, tool: _Optional[str] = ..., tool_version: _Optional[str] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., execute: _Optional[bool] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PrepareResponse(_message.Message):
    __slots__ = ("operation", "replayed", "execution_replayed")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_REPLAYED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    replayed: bool
    execution_replayed: bool
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., replayed: _Optional[bool] = ..., execution_replayed: _Optional[bool] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ("operation_id", "fingerprint", "decision", "reason", "edited_args")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EDITED_ARGS_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    fingerprint: str
    decision: Decision
    reason: str
    edited_args: _struct_pb2.Struct
    def __init__(self, operation_id: _Optional[str] = ..., fingerprint: _Optional[str] = ..., decision: _Optional[_Union[Decision, str]] = ..., reason: _Optional[str] = ..., edited_args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ApproveResponse(_message.Message):
    __slots__ = ("operation", "replayed", "edited")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    EDITED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    replayed: bool
    edited: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., replayed: _Optional[bool] = ..., edited: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("operation_id", "wait")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    wait: _duration_pb2.Duration
    def __init__(self, operation_id: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("operation", "replayed")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    replayed: bool
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("operation_id", "include_events")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    include_events: bool
    def __init__(self, operation_id: _Optional[str] = ..., include_events: _Optional[bool] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("operation", "events")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    events: _containers.RepeatedCompositeFieldContainer[OperationEvent]
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., events: _Optional[_Iterable[_Union[OperationEvent, _Mapping]]] = ...) -> None: ...

class Resolution(_message.Message):
    __slots__ = ("outcome", "external_ref", "note", "fence")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_REF_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    outcome: State
    external_ref: str
    note: str
    fence: int
    def __init__(self, outcome: _Optional[_Union[State, str]] = ..., external_ref: _Optional[str] = ..., note: _Optional[str] = ..., fence: _Optional[int] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("operation_id", "resolution")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    resolution: Resolution
    def __init__(self, operation_id: _Optional[str] = ..., resolution: _Optional[_Union[Resolution, _Mapping]] = ...) -> None: ...

class ReconcileResponse(_message.Message):
    __slots__ = ("operation", "detail")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    detail: str
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., detail: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("operation_id", "reason")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    reason: str
    def __init__(self, operation_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("operation", "replayed")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    replayed: bool
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "version", "description", "effect", "approval_required", "args_schema", "approval_ttl", "current", "policy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    ARGS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_TTL_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    effect: Effect
    approval_required: bool
    args_schema: _struct_pb2.Struct
    approval_ttl: _duration_pb2.Duration
    current: bool
    policy: Policy
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., effect: _Optional[_Union[Effect, str]] = ..., approval_required: _Optional[bool] = ..., args_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., approval_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., current: _Optional[bool] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("digest", "deny", "approval_required", "approval_when", "approvers", "editable", "summary", "approvers_expr")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_WHEN_FIELD_NUMBER: _ClassVar[int]
    APPROVERS_FIELD_NUMBER: _ClassVar[int]
    EDITABLE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    APPROVERS_EXPR_FIELD_NUMBER: _ClassVar[int]
    digest: str
    deny: _containers.RepeatedCompositeFieldContainer[DenyRule]
    approval_required: bool
    approval_when: str
    approvers: int
    editable: _containers.RepeatedScalarFieldContainer[str]
    summary: str
    approvers_expr: str
    def __init__(self, digest: _Optional[str] = ..., deny: _Optional[_Iterable[_Union[DenyRule, _Mapping]]] = ..., approval_required: _Optional[bool] = ..., approval_when: _Optional[str] = ..., approvers: _Optional[int] = ..., editable: _Optional[_Iterable[str]] = ..., summary: _Optional[str] = ..., approvers_expr: _Optional[str] = ...) -> None: ...

class DenyRule(_message.Message):
    __slots__ = ("name", "when", "message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    when: str
    message: str
    def __init__(self, name: _Optional[str] = ..., when: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("states", "tool", "page_size", "page_token")
    STATES_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[State]
    tool: str
    page_size: int
    page_token: str
    def __init__(self, states: _Optional[_Iterable[_Union[State, str]]] = ..., tool: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
