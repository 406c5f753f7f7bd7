"""opledger.pydantic_ai against the server of clients/test.sh, with Pydantic AI's own FunctionModel
(no network): a call is deferred for approval, a person approves it in the ledger (the approver's
key), the run resumed with the ledger's decisions executes it, a second resume and a retry of the
resume replay it, and the fake processor holds one charge; a denial reaches the model as such."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any, List

import pytest

pydantic_ai = pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests  # noqa: E402

import opledger  # noqa: E402
import opledger.pydantic_ai as opl  # noqa: E402
from opledger.v1 import ledger_pb2  # noqa: E402


class Model:
    """Model is a scripted model: its first answer calls pay_invoice with ``args`` under the tool call
    id ``call_pay_1``; any later answer repeats, as text, the tool results it was given, which
    ``seen`` records."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.seen: List[str] = []
        self.calls = 0

    def __call__(self, messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        returns = [
            p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            assert {t.name for t in info.function_tools} >= {"pay_invoice", "send_email", "check_operation"}
            return ModelResponse(parts=[ToolCallPart("pay_invoice", dict(self.args), tool_call_id="call_pay_1")])
        text = str(returns[-1].content)
        self.seen.append(text)
        return ModelResponse(parts=[TextPart("the tool said: " + text)])


def _invoice() -> dict[str, Any]:
    return {"invoice_id": "INV-pyd-" + uuid.uuid4().hex[:8], "amount_minor": 4900, "currency": "EUR"}


def test_deferred_approved_resumed_twice_is_one_charge(agent, approver, charges):
    args = _invoice()
    model = Model(args)
    bot = Agent(FunctionModel(model), tools=opl.tools(agent), output_type=[str, DeferredToolRequests])

    first = bot.run_sync("Pay the invoice.")
    requests = first.output
    assert isinstance(requests, DeferredToolRequests), first.output
    assert [c.tool_call_id for c in requests.approvals] == ["call_pay_1"]
    meta = requests.metadata["call_pay_1"]
    assert meta["tool"] == "pay_invoice" and meta["args"]["invoice_id"] == args["invoice_id"]
    assert charges(args["invoice_id"]) == 0, "nothing is charged before a person decides"

    # Resumed before anyone decided: nothing to resume with, the call is still pending.
    early = opl.results(agent, requests)
    assert early.approvals == {} and requests.remaining(early) is not None

    # A person approves exactly what the ledger holds (the approver's key, as the console would).
    op = approver.get(meta["operation_id"]).operation
    assert op.fingerprint == meta["fingerprint"]
    approver.approve(op.id, opledger.operation_fingerprint(op), "approve", "customer confirmed")

    decided = opl.results(agent, requests)
    assert set(decided.approvals) == {"call_pay_1"}
    history = first.all_messages()
    resumed = bot.run_sync(message_history=history, deferred_tool_results=decided)
    answer = json.loads(model.seen[-1])
    assert answer["status"] == "succeeded" and answer["operation_id"] == op.id, model.seen[-1]
    assert answer["result"]["invoice_id"] == args["invoice_id"]
    assert resumed.output.startswith("the tool said: ")
    assert charges(args["invoice_id"]) == 1

    # The same resume again (a crash after it, a retried worker): the recorded outcome, no new charge,
    # and no new operation under the call's key.
    again = bot.run_sync(message_history=history, deferred_tool_results=opl.results(agent, requests))
    assert json.loads(model.seen[-1]) == answer, again.output
    # A resume that says "approved" without the operation id (a hand-built DeferredToolResults) runs
    # the call again by its key: the same operation, replayed.
    bare = requests.build_results(approvals={"call_pay_1": True})
    bot.run_sync(message_history=history, deferred_tool_results=bare)
    assert json.loads(model.seen[-1]) == answer
    assert charges(args["invoice_id"]) == 1, "one approved call, one charge"
    listed = agent.list_operations(tool="pay_invoice", page_size=200).operations
    assert [o.id for o in listed if opledger.struct_to_dict(o.args)["invoice_id"] == args["invoice_id"]] == [op.id]


def test_denied_tells_the_model(agent, approver, charges):
    args = _invoice()
    model = Model(args)
    bot = Agent(FunctionModel(model), tools=opl.tools(agent), output_type=[str, DeferredToolRequests])
    first = bot.run_sync("Pay the invoice.")
    assert isinstance(first.output, DeferredToolRequests)
    op_id = first.output.metadata["call_pay_1"]["operation_id"]
    op = approver.get(op_id).operation
    approver.approve(op.id, op.fingerprint, "deny", "duplicate invoice")

    bot.run_sync(message_history=first.all_messages(), deferred_tool_results=opl.results(agent, first.output))
    assert "An approver denied pay_invoice" in model.seen[-1] and "duplicate invoice" in model.seen[-1]
    assert "Nothing happened" in model.seen[-1]
    assert charges(args["invoice_id"]) == 0
    assert agent.get(op_id).operation.state == ledger_pb2.STATE_REJECTED

    # Resumed as approved against the ledger's denial (a framework-side approval alone): the ledger's
    # decision stands, and the model is told it was rejected.
    forced = first.output.build_results(approvals={"call_pay_1": True}, metadata={"call_pay_1": {"operation_id": op_id}})
    bot.run_sync(message_history=first.all_messages(), deferred_tool_results=forced)
    told = json.loads(model.seen[-1])
    assert told["status"] == "failed" and told["reason"] == "OPERATION_REJECTED", model.seen[-1]
    assert charges(args["invoice_id"]) == 0


def test_no_approval_runs_in_the_call(agent, emails):
    to = "pyd-" + uuid.uuid4().hex[:8] + "@example.com"

    def model(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
            return ModelResponse(parts=[TextPart("sent")])
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": to, "subject": "s", "body": "b"}, tool_call_id="c1")])

    bot = Agent(FunctionModel(model), tools=opl.tools(agent), output_type=[str, DeferredToolRequests])
    assert bot.run_sync("Mail them.").output == "sent"
    assert emails(to) == 1


def test_async_client(addr, charges):
    asyncio.run(_async_client(addr, charges))


async def _async_client(addr: str, charges: Any) -> None:
    args = _invoice()
    model = Model(args)
    async with opledger.AsyncClient(addr, os.environ["AGENT_KEY"], plaintext=True) as agent:
        approver = agent.with_api_key(os.environ["APPROVER_KEY"])
        tools = [opl.tool(agent, t) for t in await opledger.AsyncToolRunner(agent).model_tools()]
        bot = Agent(FunctionModel(model), tools=tools, output_type=[str, DeferredToolRequests])
        first = await bot.run("Pay the invoice.")
        assert isinstance(first.output, DeferredToolRequests)
        op = (await approver.get(first.output.metadata["call_pay_1"]["operation_id"])).operation
        await approver.approve(op.id, op.fingerprint, "approve", "ok")
        for _ in range(2):
            await bot.run(message_history=first.all_messages(), deferred_tool_results=await opl.aresults(agent, first.output))
            assert json.loads(model.seen[-1])["status"] == "succeeded"
    assert charges(args["invoice_id"]) == 1
