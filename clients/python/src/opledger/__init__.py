"""opledger is the Python client of opledger, the execution ledger for AI agents' side-effecting
tool calls: Prepare an operation, have a person Approve exactly that operation, Execute it at
most once, Get or Reconcile it.

The generated messages and stubs are in ``opledger.v1.ledger_pb2`` and
``opledger.v1.ledger_pb2_grpc``; see docs/clients/python.md.
"""

from .client import DEFAULT_TIMEOUT, Client
from . import errors as _errors
from .errors import *  # noqa: F401,F403 (OpledgerError and one subclass per ErrorInfo reason)
from .fingerprint import (
    FINGERPRINT_PREFIX,
    PREPARE_METHOD,
    canonicalize,
    compute_fingerprint,
    operation_fingerprint,
    preimage,
    struct_to_dict,
)
from .keys import KEY_PREFIX, derive_idempotency_key, key_preimage
from .retry import NO_RETRY, RetryPolicy, call_with_retry, is_retryable

__all__ = [
    "Client",
    "DEFAULT_TIMEOUT",
    "FINGERPRINT_PREFIX",
    "KEY_PREFIX",
    "NO_RETRY",
    "PREPARE_METHOD",
    "RetryPolicy",
    "call_with_retry",
    "canonicalize",
    "compute_fingerprint",
    "derive_idempotency_key",
    "is_retryable",
    "key_preimage",
    "operation_fingerprint",
    "preimage",
    "struct_to_dict",
    *_errors.__all__,
]
