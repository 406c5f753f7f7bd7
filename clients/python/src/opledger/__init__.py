"""opledger is the Python client of opledger, the execution ledger for AI agents' side-effecting
tool calls: Prepare an operation, have a person Approve exactly that operation, Execute it at
most once, Get or Reconcile it.

Client is synchronous, AsyncClient (opledger.aio) is the same for asyncio; ToolRunner and
AsyncToolRunner run one tool call of an agent end to end. The generated messages and stubs are
in ``opledger.v1.ledger_pb2`` and ``opledger.v1.ledger_pb2_grpc``; see docs/clients/python.md.
"""

from .aio import AsyncClient
from .client import DEFAULT_TIMEOUT, Client
from . import errors
from .errors import *
from .fingerprint import (
    FINGERPRINT_PREFIX,
    PREPARE_METHOD,
    canonicalize,
    compute_fingerprint,
    operation_fingerprint,
    preimage,
    struct_to_dict,
)
from .edit import (
    MAX_POLICY_SUMMARY,
    MESSAGE_EDITED,
    MESSAGE_LIMIT_EXCEEDED,
    MESSAGE_OPERATION_DUPLICATE,
    MESSAGE_POLICY_DENIED,
    Change,
    Edit,
    model_description,
    refusal_message,
)
from .keys import KEY_PREFIX, derive_key, key_preimage
from .retry import NO_RETRY, RetryPolicy, call_with_retry, call_with_retry_async, is_retryable
from .runner import (
    CHECK_OPERATION_TOOL,
    MESSAGE_AWAITING_APPROVAL,
    MESSAGE_CHECK_UNKNOWN_OPERATION,
    MESSAGE_KEY_NAMES_EARLIER_CALL,
    MESSAGE_KEY_NAMES_UNDONE_CALL,
    MESSAGE_OUTCOME_UNKNOWN,
    AsyncToolRunner,
    AwaitingApproval,
    Failed,
    ModelTool,
    OutcomeUnknown,
    Succeeded,
    ToolArgs,
    ToolOutcome,
    ToolRunner,
    key_names_earlier_call,
    state_words,
)

# Spelled out (not computed) so that type checkers see every name; the errors' names come from
# errors.__all__, which mypy and pyright follow (`__all__ += submodule.__all__`).
# tests/test_errors.py checks that it covers every exception class.
__all__ = [
    "AsyncClient",
    "AsyncToolRunner",
    "AwaitingApproval",
    "Change",
    "Client",
    "DEFAULT_TIMEOUT",
    "Edit",
    "FINGERPRINT_PREFIX",
    "Failed",
    "KEY_PREFIX",
    "MAX_POLICY_SUMMARY",
    "CHECK_OPERATION_TOOL",
    "MESSAGE_AWAITING_APPROVAL",
    "MESSAGE_CHECK_UNKNOWN_OPERATION",
    "MESSAGE_EDITED",
    "MESSAGE_KEY_NAMES_EARLIER_CALL",
    "MESSAGE_KEY_NAMES_UNDONE_CALL",
    "MESSAGE_LIMIT_EXCEEDED",
    "MESSAGE_OPERATION_DUPLICATE",
    "MESSAGE_OUTCOME_UNKNOWN",
    "MESSAGE_POLICY_DENIED",
    "ModelTool",
    "NO_RETRY",
    "OutcomeUnknown",
    "PREPARE_METHOD",
    "RetryPolicy",
    "Succeeded",
    "ToolArgs",
    "ToolOutcome",
    "ToolRunner",
    "call_with_retry",
    "call_with_retry_async",
    "canonicalize",
    "compute_fingerprint",
    "derive_key",
    "is_retryable",
    "key_preimage",
    "operation_fingerprint",
    "preimage",
    "struct_to_dict",
    "key_names_earlier_call",
    "model_description",
    "refusal_message",
    "state_words",
]
__all__ += errors.__all__
