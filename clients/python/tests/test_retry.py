"""The retry owner, against a local stub LedgerService that answers from a script."""

import socket
import threading
from collections import namedtuple
from concurrent import futures

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

import opledger
from opledger.v1 import ledger_pb2, ledger_pb2_grpc


class _Status(namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


def rich_error(code, reason=None, retry_delay=None, message="scripted"):
    """rich_error is a scripted answer: a status with opledger's ErrorInfo (and RetryInfo)."""
    st = status_pb2.Status(code=code.value[0], message=message)
    if reason:
        st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="opledger.v1"))
    if retry_delay is not None:
        d = duration_pb2.Duration()
        d.FromNanoseconds(int(retry_delay * 1e9))
        st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=d))
    return _Status(code, message, (("grpc-status-details-bin", st.SerializeToString()),))


class ScriptedLedger(ledger_pb2_grpc.LedgerServiceServicer):
    """ScriptedLedger answers each call with the next scripted status (or success once the script
    is used up) and records every call's idempotency key."""

    def __init__(self, script):
        self.script = list(script)
        self.keys = []
        self.calls = 0
        self.lock = threading.Lock()

    def _next(self, context):
        with self.lock:
            self.calls += 1
            md = dict(context.invocation_metadata())
            self.keys.append(md.get("idempotency-key"))
            assert md.get("authorization") == "Bearer test-key"
            step = self.script.pop(0) if self.script else None
        if step is not None:
            context.abort_with_status(step)

    def Prepare(self, request, context):
        self._next(context)
        return ledger_pb2.PrepareResponse(operation=ledger_pb2.Operation(id="op_1", tool=request.tool))

    def Execute(self, request, context):
        self._next(context)
        return ledger_pb2.ExecuteResponse(
            operation=ledger_pb2.Operation(id=request.operation_id, state=ledger_pb2.STATE_SUCCEEDED)
        )


@pytest.fixture()
def stub_server():
    servers = []

    def start(script):
        servicer = ScriptedLedger(script)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        ledger_pb2_grpc.add_LedgerServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return servicer, f"127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop(None)


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def client_for(addr, sleeps, **policy):
    return opledger.Client(addr, "test-key", plaintext=True, retry=opledger.RetryPolicy(sleep=sleeps, **policy))


UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def test_unavailable_is_retried_with_the_same_key(stub_server):
    servicer, addr = stub_server(
        [rich_error(UNAVAILABLE, "LEDGER_UNAVAILABLE", 0.05), _Status(UNAVAILABLE, "no details", ())]
    )
    sleeps = Sleeps()
    with client_for(addr, sleeps) as c:
        resp = c.prepare("pay_invoice", {"amount_minor": 4900}, "key-1")
    assert resp.operation.id == "op_1"
    assert servicer.calls == 3
    assert servicer.keys == ["key-1"] * 3
    assert len(sleeps) == 2
    assert sleeps[0] >= 0.05  # RetryInfo is a floor
    assert 0 <= sleeps[1] <= 0.2


def test_invalid_argument_is_never_retried(stub_server):
    servicer, addr = stub_server([rich_error(grpc.StatusCode.INVALID_ARGUMENT, "FIELD_INVALID")])
    sleeps = Sleeps()
    with client_for(addr, sleeps) as c, pytest.raises(opledger.FieldInvalid) as ei:
        c.prepare("pay_invoice", {}, "key-2")
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.reason == "FIELD_INVALID"
    assert servicer.calls == 1 and sleeps == []


def test_aborted_without_retry_info_is_final(stub_server):
    servicer, addr = stub_server([rich_error(grpc.StatusCode.ABORTED, "OPERATION_IN_PROGRESS")])
    sleeps = Sleeps()
    with client_for(addr, sleeps) as c, pytest.raises(opledger.OperationInProgress):
        c.execute("op_1")
    assert servicer.calls == 1


def test_aborted_with_retry_info_waits_at_least_the_delay(stub_server):
    servicer, addr = stub_server([rich_error(grpc.StatusCode.ABORTED, "OPERATION_IN_PROGRESS", 1.5)])
    sleeps = Sleeps()
    with client_for(addr, sleeps) as c:
        resp = c.execute("op_1")
    assert resp.operation.state == ledger_pb2.STATE_SUCCEEDED
    assert servicer.calls == 2 and sleeps[0] >= 1.5


def test_attempts_are_bounded(stub_server):
    servicer, addr = stub_server([rich_error(UNAVAILABLE, "DOWNSTREAM_UNAVAILABLE", 0.01)] * 10)
    sleeps = Sleeps()
    with client_for(addr, sleeps) as c, pytest.raises(opledger.DownstreamUnavailable) as ei:
        c.execute("op_1")
    assert servicer.calls == 4 and len(sleeps) == 3
    assert ei.value.retry_delay == pytest.approx(0.01)
    assert ei.value.retryable


def test_max_attempts_one_disables_retries(stub_server):
    servicer, addr = stub_server([rich_error(UNAVAILABLE, "LEDGER_UNAVAILABLE")])
    with opledger.Client(addr, "test-key", plaintext=True, retry=opledger.NO_RETRY) as c, pytest.raises(opledger.LedgerUnavailable):
        c.prepare("t", {}, "k")
    assert servicer.calls == 1


def test_connection_refused_is_unavailable_and_retried():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    with client_for(f"127.0.0.1:{port}", sleeps, max_attempts=3) as c, pytest.raises(opledger.OpledgerError) as ei:
        c.get("op_1")
    assert ei.value.code == UNAVAILABLE and ei.value.reason is None
    assert len(sleeps) == 2


def test_backoff_is_full_jitter_under_a_doubling_capped_ceiling():
    top = opledger.RetryPolicy(rand=lambda: 0.999999)
    ceilings = [top.delay(n) for n in range(1, 8)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0], rel=1e-5)
    bottom = opledger.RetryPolicy(rand=lambda: 0.0)
    assert bottom.delay(3) == 0.0
    assert bottom.delay(3, floor=0.7) == 0.7
    assert top.delay(1, floor=5.0) == 5.0


def test_invalid_policy_refused():
    with pytest.raises(ValueError):
        opledger.RetryPolicy(max_attempts=0)


def test_tls_is_the_default(stub_server):
    # A plaintext server answers a TLS client's handshake with garbage: the call fails UNAVAILABLE
    # and nothing reaches the servicer. Plaintext only when asked for.
    servicer, addr = stub_server([])
    with opledger.Client(addr, "test-key", retry=opledger.NO_RETRY, timeout=5) as c, pytest.raises(opledger.OpledgerError) as ei:
        c.get("op_1")
    assert ei.value.code == UNAVAILABLE
    assert servicer.calls == 0
    with pytest.raises(ValueError):
        opledger.Client(addr, "test-key", plaintext=True, credentials=grpc.ssl_channel_credentials())


def test_with_api_key_shares_the_channel_and_sends_its_own_key(stub_server):
    servicer, addr = stub_server([])
    seen = []
    original = servicer._next

    def record(context):
        seen.append(dict(context.invocation_metadata()).get("authorization"))
        if seen[-1] == "Bearer test-key":
            original(context)

    servicer._next = record
    with opledger.Client(addr, "test-key", plaintext=True) as agent:
        approver = agent.with_api_key("approver-key")
        approver.prepare("t", {}, "k")
        approver.close()  # leaves the shared channel open
        agent.prepare("t", {}, "k")
    assert seen == ["Bearer approver-key", "Bearer test-key"]
    with pytest.raises(ValueError):
        opledger.Client(addr, "test-key", plaintext=True).with_api_key("")
