import grpc
from google.rpc import error_details_pb2, status_pb2

import opledger
from opledger.v1 import ledger_pb2

NOT_RPC_ERRORS = {"UNSPECIFIED", "DOWNSTREAM_REJECTED", "DOWNSTREAM_OUTCOME_UNKNOWN"}


def test_every_error_reason_has_a_class():
    reasons = {n[len("ERROR_REASON_"):] for n in ledger_pb2.ErrorReason.keys()} - NOT_RPC_ERRORS
    assert reasons == set(opledger.ERRORS_BY_REASON)
    for reason, cls in opledger.ERRORS_BY_REASON.items():
        assert issubclass(cls, opledger.OpledgerError)
        assert getattr(opledger, cls.__name__) is cls


def test_status_is_parsed():
    st = status_pb2.Status(code=6, message="key reused")
    st.details.add().Pack(
        error_details_pb2.ErrorInfo(reason="IDEMPOTENCY_KEY_REUSED", domain="opledger.v1", metadata={"operation_id": "op_9"})
    )
    err = opledger.from_status(grpc.StatusCode.ALREADY_EXISTS, "key reused", st)
    assert isinstance(err, opledger.IdempotencyKeyReused)
    assert (err.code, err.reason, err.message, err.retry_delay) == (grpc.StatusCode.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED", "key reused", None)
    assert err.operation_id == "op_9"
    assert not err.retryable


def test_foreign_domain_is_not_trusted():
    st = status_pb2.Status(code=5)
    st.details.add().Pack(error_details_pb2.ErrorInfo(reason="OPERATION_NOT_FOUND", domain="example.com"))
    err = opledger.from_status(grpc.StatusCode.NOT_FOUND, "x", st)
    assert type(err) is opledger.OpledgerError and err.reason is None


def test_no_details():
    err = opledger.from_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "too big", None)
    assert type(err) is opledger.OpledgerError and err.reason is None and not err.retryable


def test_every_error_class_is_exported_statically():
    # __all__ is a literal list (so that mypy sees the names): it must name every class.
    for cls in opledger.ERRORS_BY_REASON.values():
        assert cls.__name__ in opledger.__all__
        assert cls.__name__ in opledger.errors.__all__
    assert "OpledgerError" in opledger.__all__
    for name in opledger.__all__:
        assert hasattr(opledger, name), name
