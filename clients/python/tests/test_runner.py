"""ToolRunner and AsyncToolRunner: the shared model-answer vectors, the mapping of every final
state (against a local stub ledger), and whole tool calls against the real server."""

import asyncio
import json
import threading
import time
import uuid
from collections import namedtuple
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

import opledger
from opledger.v1 import ledger_pb2, ledger_pb2_grpc

REPO = Path(__file__).resolve().parents[3]
with open(REPO / "clients" / "testdata" / "tool_outcomes.json", encoding="utf-8") as _f:
    _TESTDATA = json.load(_f)
OUTCOME_VECTORS = _TESTDATA["vectors"]


def outcome_of(vec):
    op = ledger_pb2.Operation(id=vec["operation_id"]) if "operation_id" in vec else None
    status = vec["status"]
    e = vec.get("edit")
    edit = opledger.Edit.of(e["supersedes"], e["original_args"], e["args"]) if e else None
    if status == "succeeded":
        return opledger.Succeeded(operation=op, result=vec.get("result", {}), edit=edit)
    if status == "failed":
        return opledger.Failed(reason=vec["reason"], message=vec["message"], operation=op, edit=edit)
    if status == "outcome_unknown":
        return opledger.OutcomeUnknown(operation=op, edit=edit)
    if status == "awaiting_approval":
        return opledger.AwaitingApproval(operation=op, edit=edit)
    raise AssertionError(status)


@pytest.mark.parametrize("vec", OUTCOME_VECTORS, ids=[v["name"] for v in OUTCOME_VECTORS])
def test_for_model_vectors(vec):
    out = outcome_of(vec)
    assert out.for_model() == vec["for_model"]
    assert out.operation_id == vec.get("operation_id", "")


@pytest.mark.parametrize("vec", _TESTDATA["refusal_messages"], ids=[v["reason"] for v in _TESTDATA["refusal_messages"]])
def test_refusal_message_vectors(vec):
    assert opledger.refusal_message(vec["reason"], vec["message"]) == vec["for_model_message"]


@pytest.mark.parametrize("vec", _TESTDATA["operation_duplicate"], ids=[v["state"] for v in _TESTDATA["operation_duplicate"]])
def test_operation_duplicate_vectors(vec):
    state = opledger.state_words(ledger_pb2.State.Value(vec["state"]))
    assert opledger.MESSAGE_OPERATION_DUPLICATE.format(state=state) == vec["message"]


@pytest.mark.parametrize("vec", _TESTDATA["model_descriptions"], ids=[v["description"] for v in _TESTDATA["model_descriptions"]])
def test_model_description_vectors(vec):
    assert opledger.model_description(vec["description"], vec["summary"]) == vec["model_description"]


def test_outcome_unknown_is_not_a_failure():
    unknown = opledger.OutcomeUnknown(operation=ledger_pb2.Operation(id="op_1"))
    assert not isinstance(unknown, opledger.Failed)
    assert not issubclass(opledger.OutcomeUnknown, opledger.Failed)
    assert not issubclass(opledger.Failed, opledger.OutcomeUnknown)


# --- against a stub ledger --------------------------------------------------------------------


def stored_error(reason, message):
    st = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message=message)
    st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="opledger.v1"))
    return st


class StubLedger(ledger_pb2_grpc.LedgerServiceServicer):
    """StubLedger prepares into prepare_state and executes into execute_op."""

    def __init__(self, prepare_state, execute_op=None, prepare_error=None, execute_error=None, get_state=None):
        self.prepare_state = prepare_state
        self.execute_op = execute_op
        self.prepare_error = prepare_error
        self.execute_error = execute_error
        self.get_state = get_state if get_state is not None else prepare_state
        self.gets = 0
        self.executes = []
        self.prepares = []
        self.lock = threading.Lock()

    def Prepare(self, request, context):
        with self.lock:
            self.prepares.append(request)
        if self.prepare_error is not None:
            context.abort_with_status(self.prepare_error)
        return ledger_pb2.PrepareResponse(operation=ledger_pb2.Operation(id="op_1", tool=request.tool, state=self.prepare_state))

    def Get(self, request, context):
        with self.lock:
            self.gets += 1
        return ledger_pb2.GetResponse(operation=ledger_pb2.Operation(id=request.operation_id, state=self.get_state))

    def Execute(self, request, context):
        with self.lock:
            self.executes.append(request.wait.ToTimedelta().total_seconds())
        if self.execute_error is not None:
            context.abort_with_status(self.execute_error)
        return ledger_pb2.ExecuteResponse(operation=self.execute_op)


@pytest.fixture()
def stub_addr():
    """stub_addr serves a servicer on a free port and returns its address."""
    servers = []

    def start(servicer):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        ledger_pb2_grpc.add_LedgerServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop(None)


@pytest.fixture()
def stub(stub_addr):
    """stub serves a servicer and returns a Client of it."""
    return lambda servicer: opledger.Client(stub_addr(servicer), "test-key", plaintext=True)


def test_every_final_state_maps_to_its_outcome(stub):
    failed = StubLedger(
        ledger_pb2.STATE_READY,
        ledger_pb2.Operation(id="op_1", state=ledger_pb2.STATE_FAILED, error=stored_error("DOWNSTREAM_REJECTED", "card declined")),
    )
    out = opledger.ToolRunner(stub(failed), execute_wait=3).run("pay_invoice", {}, "k")
    assert isinstance(out, opledger.Failed)
    assert (out.reason, out.message, out.operation_id) == ("DOWNSTREAM_REJECTED", "card declined", "op_1")
    assert failed.executes == [3.0]
    # The one-call path is asked for; this stub ignores it (as a server without it would), so the
    # runner executes the READY operation itself.
    assert [(p.execute, p.wait.ToTimedelta().total_seconds()) for p in failed.prepares] == [(True, 3.0)]

    unknown = StubLedger(
        ledger_pb2.STATE_READY,
        ledger_pb2.Operation(id="op_1", state=ledger_pb2.STATE_OUTCOME_UNKNOWN, error=stored_error("DOWNSTREAM_OUTCOME_UNKNOWN", "HTTP 500")),
    )
    out = opledger.ToolRunner(stub(unknown)).run("pay_invoice", "{}", "k")
    assert isinstance(out, opledger.OutcomeUnknown) and not out.pending

    pending = StubLedger(ledger_pb2.STATE_EXECUTING, ledger_pb2.Operation(id="op_1", state=ledger_pb2.STATE_EXECUTING))
    out = opledger.ToolRunner(stub(pending)).run("pay_invoice", None, "k")
    assert isinstance(out, opledger.OutcomeUnknown) and out.pending

    done = StubLedger(ledger_pb2.STATE_SUCCEEDED)  # the one-call path answered with the outcome
    out = opledger.ToolRunner(stub(done)).run("pay_invoice", {}, "k")
    assert isinstance(out, opledger.Succeeded)
    assert done.executes == []
    assert out.for_model() == '{"operation_id":"op_1","result":{},"status":"succeeded"}'


class _Status(namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


def approval_expired(operation_id=None):
    st = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="the approval expired")
    info = error_details_pb2.ErrorInfo(reason="APPROVAL_EXPIRED", domain="opledger.v1")
    if operation_id:
        info.metadata["operation_id"] = operation_id
    st.details.add().Pack(info)
    return _Status(grpc.StatusCode.FAILED_PRECONDITION, st.message, (("grpc-status-details-bin", st.SerializeToString()),))


def expired_stubs():
    """expired_stubs: the one-call path's Prepare, then Execute, refuse with APPROVAL_EXPIRED, and
    the operation is back in AWAITING_APPROVAL."""
    return [
        StubLedger(0, prepare_error=approval_expired("op_1"), get_state=ledger_pb2.STATE_AWAITING_APPROVAL),
        StubLedger(ledger_pb2.STATE_READY, execute_error=approval_expired(), get_state=ledger_pb2.STATE_AWAITING_APPROVAL),
    ]


def test_expired_approval_is_awaiting_approval(stub, stub_addr):
    # An approval that lapsed before the call ran puts the operation back before its approvers: the
    # same call, under the same key, waits for a new decision. Answering Failed would have the agent
    # make it again under a new key, a second operation for one intention.
    for s in expired_stubs():
        out = opledger.ToolRunner(stub(s)).run("pay_invoice", {}, "k")
        assert isinstance(out, opledger.AwaitingApproval), out
        assert out.operation_id == "op_1"
        assert out.operation.state == ledger_pb2.STATE_AWAITING_APPROVAL
    for s in expired_stubs():
        async def run(s=s):
            async with opledger.AsyncClient(stub_addr(s), "test-key", plaintext=True) as c:
                return await opledger.AsyncToolRunner(c).run("pay_invoice", {}, "k")

        out = asyncio.run(run())
        assert isinstance(out, opledger.AwaitingApproval), out
        assert out.operation_id == "op_1"


def test_key_names_earlier_call_vectors():
    for vec in _TESTDATA["key_names_earlier_call"]:
        state = int(vec["state"]) if vec["state"].isdigit() else ledger_pb2.State.Value(vec["state"])
        assert opledger.key_names_earlier_call(state) == vec["message"]


def refused_under_used_key(reason, code):
    st = status_pb2.Status(code=code.value[0], message="this idempotency key was already used; use a new key for a new operation")
    info = error_details_pb2.ErrorInfo(reason=reason, domain="opledger.v1")
    info.metadata["operation_id"] = "op_1"
    st.details.add().Pack(info)
    return _Status(code, st.message, (("grpc-status-details-bin", st.SerializeToString()),))


def test_refusal_under_a_used_key_names_the_earlier_call(stub, stub_addr):
    # A call refused because its key already names an earlier call (a reworded retry of a round, a
    # tools file whose version moved on) is not "nothing happened, use a new key": the earlier call
    # may have taken effect. The runner answers Failed with that operation, and says so.
    want = opledger.MESSAGE_KEY_NAMES_EARLIER_CALL.format(state="outcome unknown")
    for reason, code in (("IDEMPOTENCY_KEY_REUSED", grpc.StatusCode.ALREADY_EXISTS),
                         ("TOOL_VERSION_UNKNOWN", grpc.StatusCode.INVALID_ARGUMENT),
                         ("ARGS_INVALID", grpc.StatusCode.INVALID_ARGUMENT)):
        s = StubLedger(0, prepare_error=refused_under_used_key(reason, code), get_state=ledger_pb2.STATE_OUTCOME_UNKNOWN)
        out = opledger.ToolRunner(stub(s)).run("send_email", {}, "k")
        assert isinstance(out, opledger.Failed), out
        assert (out.reason, out.operation_id, out.message) == (reason, "op_1", want)
        assert "use a new key" not in out.for_model()

        async def run(s=s):
            async with opledger.AsyncClient(stub_addr(s), "test-key", plaintext=True) as c:
                return await opledger.AsyncToolRunner(c).run("send_email", {}, "k")

        out = asyncio.run(run())
        assert isinstance(out, opledger.Failed), out
        assert (out.operation_id, out.message) == ("op_1", want)


def test_awaiting_approval_without_wait_calls_nothing_else(stub):
    s = StubLedger(ledger_pb2.STATE_AWAITING_APPROVAL)
    out = opledger.ToolRunner(stub(s)).run("pay_invoice", {}, "k")
    assert isinstance(out, opledger.AwaitingApproval)
    assert s.gets == 0 and s.executes == []


def test_approval_wait_polls_then_answers_awaiting(stub):
    s = StubLedger(ledger_pb2.STATE_AWAITING_APPROVAL)
    hooked = []
    start = time.monotonic()
    out = opledger.ToolRunner(stub(s), approval_wait=0.7, on_approval_required=hooked.append).run("pay_invoice", {}, "k")
    assert isinstance(out, opledger.AwaitingApproval)
    assert [op.id for op in hooked] == ["op_1"]
    assert time.monotonic() - start >= 0.7
    assert s.gets >= 2 and s.executes == []


def test_args_as_model_json_text_must_be_an_object(stub):
    with pytest.raises(ValueError):
        opledger.ToolRunner(stub(StubLedger(ledger_pb2.STATE_READY))).run("pay_invoice", "[1]", "k")


# --- against the real server ------------------------------------------------------------------


def pay_args():
    invoice = "INV-PYR-" + uuid.uuid4().hex[:12]
    return invoice, {"invoice_id": invoice, "amount_minor": 4900, "currency": "EUR"}


def key_for(conversation, tool="pay_invoice"):
    return opledger.derive_key(conversation=conversation, round=1, tool_call="call_1", tool=tool)


def test_model_tools_are_the_current_tools(agent):
    tools = {t.name: t for t in opledger.ToolRunner(agent).model_tools()}
    pay = tools["pay_invoice"]
    assert (pay.version, pay.approval_required, pay.effect) == ("1", True, "side_effect")
    assert pay.description and pay.args_schema["type"] == "object"
    assert "amount_minor" in pay.args_schema["properties"]
    assert "send_email" in tools


def test_resumes_after_approval(agent, approver, charges):
    runner = opledger.ToolRunner(agent)
    invoice, args = pay_args()
    key = key_for(invoice)
    out = runner.run("pay_invoice", json.dumps(args), key)
    assert isinstance(out, opledger.AwaitingApproval)
    assert out.for_model() == (
        '{"message":"' + opledger.MESSAGE_AWAITING_APPROVAL + '","operation_id":"' + out.operation_id
        + '","status":"awaiting_approval"}'
    )
    assert charges(invoice) == 0

    op = out.operation
    approver.approve(op.id, opledger.operation_fingerprint(op), "approve", "ok")
    done = runner.run("pay_invoice", args, key)
    assert isinstance(done, opledger.Succeeded)
    assert done.operation_id == op.id
    assert done.result["invoice_id"] == invoice and done.result["id"] == done.operation.external_ref
    assert json.loads(done.for_model())["result"] == done.result
    assert charges(invoice) == 1
    assert runner.run("pay_invoice", args, key).for_model() == done.for_model()
    assert charges(invoice) == 1


def test_check_operation_runs_an_approved_call_once(agent, approver, charges):
    # The model is told to call check_operation after awaiting_approval: a new call of the tool in a
    # later round would carry another key and be a second request.
    runner = opledger.ToolRunner(agent)
    assert runner.model_tools()[-1].name == opledger.CHECK_OPERATION_TOOL
    invoice, args = pay_args()
    out = runner.run("pay_invoice", args, key_for(invoice))
    assert isinstance(out, opledger.AwaitingApproval) and "check_operation" in out.for_model()
    approver.approve(out.operation.id, opledger.operation_fingerprint(out.operation), "approve", "ok")
    for _ in range(2):
        done = runner.run(opledger.CHECK_OPERATION_TOOL, json.dumps({"operation_id": out.operation_id}), "")
        assert isinstance(done, opledger.Succeeded) and done.operation_id == out.operation_id
    assert charges(invoice) == 1
    missing = runner.check("op_00000000000000000000000000")
    assert isinstance(missing, opledger.Failed) and missing.message == opledger.MESSAGE_CHECK_UNKNOWN_OPERATION


def test_waits_for_an_in_process_approval(agent, approver, charges):
    def person(op):  # decides a moment later, on another thread
        threading.Timer(0.3, lambda: approver.approve(op.id, op.fingerprint, "approve", "ok")).start()

    invoice, args = pay_args()
    out = opledger.ToolRunner(agent, approval_wait=20, on_approval_required=person).run("pay_invoice", args, key_for(invoice))
    assert isinstance(out, opledger.Succeeded), out
    assert charges(invoice) == 1


def test_refusals_are_failed(agent, approver):
    def deny(op):
        approver.approve(op.id, op.fingerprint, "deny", "not this one")

    runner = opledger.ToolRunner(agent, approval_wait=20, on_approval_required=deny)
    invoice, args = pay_args()
    bad = runner.run("pay_invoice", {**args, "amount_minor": -1}, key_for(invoice + "-bad"))
    assert isinstance(bad, opledger.Failed) and bad.reason == "ARGS_INVALID" and bad.operation is None
    assert bad.for_model().endswith('"reason":"ARGS_INVALID","status":"failed"}')
    denied = runner.run("pay_invoice", args, key_for(invoice))
    assert isinstance(denied, opledger.Failed) and denied.reason == "OPERATION_REJECTED" and denied.operation_id


def test_runs_a_tool_without_approval_in_one_run(agent, emails):
    to = f"py-{uuid.uuid4().hex[:10]}@example.com"
    args = {"to": to, "subject": "receipt", "body": "paid"}
    key = key_for(to, tool="send_email")
    runner = opledger.ToolRunner(agent)
    out = runner.run("send_email", args, key)
    assert isinstance(out, opledger.Succeeded), out
    assert out.result["id"] == out.operation.external_ref
    assert runner.run("send_email", args, key).for_model() == out.for_model()
    assert emails(to) == 1


def test_outcome_unknown_is_its_own_answer(agent, faults, emails):
    faults({"fail_after_commit": {"next": 1}})
    to = f"py-{uuid.uuid4().hex[:10]}@example.com"
    args = {"to": to, "subject": "receipt", "body": "paid"}
    key = key_for(to, tool="send_email")
    runner = opledger.ToolRunner(agent)
    out = runner.run("send_email", args, key)
    assert isinstance(out, opledger.OutcomeUnknown) and not isinstance(out, opledger.Failed)
    assert json.loads(out.for_model())["status"] == "outcome_unknown"
    again = runner.run("send_email", args, key)
    assert isinstance(again, opledger.OutcomeUnknown) and again.operation_id == out.operation_id
    assert emails(to) == 1


def test_async_runner(addr, charges):
    import os

    async def main():
        async with opledger.AsyncClient(addr, os.environ["AGENT_KEY"], plaintext=True) as agent:
            approver = agent.with_api_key(os.environ["APPROVER_KEY"])

            async def person(op):
                await approver.approve(op.id, op.fingerprint, "approve", "ok")

            runner = opledger.AsyncToolRunner(agent, approval_wait=20, on_approval_required=person)
            tools = await runner.model_tools()
            assert "pay_invoice" in {t.name for t in tools}
            invoice, args = pay_args()
            out = await runner.run("pay_invoice", args, key_for(invoice))
            return invoice, out

    invoice, out = asyncio.run(main())
    assert isinstance(out, opledger.Succeeded), out
    assert charges(invoice) == 1


def refusal_status(reason):
    st = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="refused")
    st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="opledger.v1"))
    return _Status(grpc.StatusCode.FAILED_PRECONDITION, st.message, (("grpc-status-details-bin", st.SerializeToString()),))


def test_check_operation_answers_every_state(stub, stub_addr):
    # A rejected or cancelled operation is a refusal (never an exception); an executing one whose
    # Execute is refused for another reason is pending, never "failed" (it may have taken effect).
    cases = [
        (StubLedger(0, get_state=ledger_pb2.STATE_REJECTED, execute_error=refusal_status("OPERATION_REJECTED")), opledger.Failed),
        (StubLedger(0, get_state=ledger_pb2.STATE_CANCELLED, execute_error=refusal_status("OPERATION_CANCELLED")), opledger.Failed),
        (StubLedger(0, get_state=ledger_pb2.STATE_EXECUTING, execute_error=refusal_status("TOOL_VERSION_UNKNOWN")), opledger.OutcomeUnknown),
    ]
    for s, want in cases:
        out = opledger.ToolRunner(stub(s)).run(opledger.CHECK_OPERATION_TOOL, '{"operation_id":"op_1"}', "")
        assert isinstance(out, want), out

        async def run(s=s):
            async with opledger.AsyncClient(stub_addr(s), "test-key", plaintext=True) as c:
                return await opledger.AsyncToolRunner(c).check("op_1")

        assert isinstance(asyncio.run(run()), want)


def test_duplicate_member_is_refused_before_sending(stub):
    """A member given twice in the model's text was sent with the last value (a charge of 100000
    where the Go runner refuses the text): refused before anything is sent, as every client."""
    ledger = StubLedger(ledger_pb2.STATE_SUCCEEDED)
    runner = opledger.ToolRunner(stub(ledger))
    text = '{"invoice_id":"INV-1","amount_minor":100,"amount_minor":100000,"currency":"EUR"}'
    with pytest.raises(ValueError, match="amount_minor"):
        runner.run("pay_invoice", text, "k")
    assert ledger.prepares == []


def test_run_execute_refused_on_an_approved_call_is_pending(stub):
    """A call approved while run waited, whose Execute a replica without the tool's version refuses,
    is still READY: "failed" would tell the model nothing happened and a new key is safe. Pending,
    as check answers the same server answer."""
    ledger = StubLedger(ledger_pb2.STATE_AWAITING_APPROVAL, get_state=ledger_pb2.STATE_READY,
                        execute_error=refusal_status("TOOL_VERSION_UNKNOWN"))
    runner = opledger.ToolRunner(stub(ledger), approval_wait=5)
    checked = runner.check("op_1")
    assert isinstance(checked, opledger.OutcomeUnknown), checked.for_model()
    out = runner.run("pay_invoice", {"invoice_id": "INV-1", "amount_minor": 4900, "currency": "EUR"}, "k")
    assert len(ledger.executes) == 2
    assert isinstance(out, opledger.OutcomeUnknown), out.for_model()
    assert out.pending
