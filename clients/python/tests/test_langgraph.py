"""opledger.langgraph against the server of clients/test.sh, with LangChain's GenericFakeChatModel in a
LangGraph graph with a checkpointer (no network): the tool interrupts the graph for approval, a person
approves in the ledger (the approver's key), the thread resumed runs the tool again from its start and
executes the approved operation, a second run from the interrupted checkpoint (a retried worker, time
travel) replays it, and the fake processor holds one charge; a denial reaches the model as such."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any, Dict, List

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.types import Command  # noqa: E402

import opledger  # noqa: E402
import opledger.langgraph as opl  # noqa: E402
from opledger.v1 import ledger_pb2  # noqa: E402


def _graph(client: opledger.Client, tool: str, args: Dict[str, Any]) -> Any:
    """_graph is a one-tool agent: the fake model calls ``tool`` once (tool call id call_1), then says done."""
    model = GenericFakeChatModel(
        messages=itertools.chain(
            [AIMessage("", tool_calls=[{"name": tool, "args": args, "id": "call_1", "type": "tool_call"}])],
            itertools.repeat(AIMessage("done")),
        )
    )
    g = StateGraph(MessagesState)
    g.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_node("tools", ToolNode(opl.tools(client)))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g.compile(checkpointer=InMemorySaver())


def _told(result: Dict[str, Any]) -> str:
    """_told is the last tool result the model was given."""
    msgs: List[Any] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return str(msgs[-1].content)


def _invoice() -> Dict[str, Any]:
    return {"invoice_id": "INV-lg-" + uuid.uuid4().hex[:8], "amount_minor": 4900, "currency": "EUR"}


def test_interrupted_approved_resumed_and_replayed_is_one_charge(agent, approver, charges):
    args = _invoice()
    graph = _graph(agent, "pay_invoice", args)
    config = {"configurable": {"thread_id": "thread-" + uuid.uuid4().hex[:8]}}

    first = graph.invoke({"messages": [("user", "Pay the invoice.")]}, config)
    (pending,) = first["__interrupt__"]
    info = pending.value
    assert info["tool"] == "pay_invoice" and info["args"]["invoice_id"] == args["invoice_id"]
    assert charges(args["invoice_id"]) == 0, "nothing is charged before a person decides"
    interrupted = graph.get_state(config)  # the checkpoint the graph stopped at

    # Resumed before anyone decided: the tool runs again and interrupts again; nothing is charged.
    early = graph.invoke(Command(resume=True), config)
    assert early["__interrupt__"][0].value["operation_id"] == info["operation_id"]
    assert charges(args["invoice_id"]) == 0

    op = approver.get(info["operation_id"]).operation
    assert op.fingerprint == info["fingerprint"]
    approver.approve(op.id, opledger.operation_fingerprint(op), "approve", "customer confirmed")

    done = graph.invoke(Command(resume=True), config)
    answer = json.loads(_told(done))
    assert answer["status"] == "succeeded" and answer["operation_id"] == op.id, _told(done)
    assert done["messages"][-1].content == "done"
    assert charges(args["invoice_id"]) == 1

    # The run from the interrupted checkpoint again (a retried worker, or time travel): LangGraph runs
    # the tool once more from its start; the ledger replays the outcome.
    for _ in range(2):
        again = graph.invoke(Command(resume=True), interrupted.config)
        assert json.loads(_told(again)) == answer
    assert charges(args["invoice_id"]) == 1, "one approved call, one charge"
    listed = agent.list_operations(tool="pay_invoice", page_size=200).operations
    assert [o.id for o in listed if opledger.struct_to_dict(o.args)["invoice_id"] == args["invoice_id"]] == [op.id]


def test_denied_tells_the_model(agent, approver, charges):
    args = _invoice()
    graph = _graph(agent, "pay_invoice", args)
    config = {"configurable": {"thread_id": "thread-" + uuid.uuid4().hex[:8]}}
    first = graph.invoke({"messages": [("user", "Pay the invoice.")]}, config)
    op_id = first["__interrupt__"][0].value["operation_id"]
    op = approver.get(op_id).operation
    approver.approve(op.id, op.fingerprint, "deny", "duplicate invoice")

    done = graph.invoke(Command(resume=True), config)
    told = json.loads(_told(done))
    assert told["status"] == "failed" and told["reason"] == "OPERATION_REJECTED", _told(done)
    assert "An approver denied pay_invoice" in told["message"] and "duplicate invoice" in told["message"]
    assert charges(args["invoice_id"]) == 0
    assert agent.get(op_id).operation.state == ledger_pb2.STATE_REJECTED


def test_no_approval_runs_in_the_call(agent, emails):
    to = "lg-" + uuid.uuid4().hex[:8] + "@example.com"
    graph = _graph(agent, "send_email", {"to": to, "subject": "s", "body": "b"})
    done = graph.invoke({"messages": [("user", "Mail them.")]}, {"configurable": {"thread_id": uuid.uuid4().hex}})
    assert json.loads(_told(done))["status"] == "succeeded"
    assert emails(to) == 1


def test_a_run_without_a_thread_fails_loudly(agent, emails):
    to = "lg-" + uuid.uuid4().hex[:8] + "@example.com"
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": to, "subject": "s", "body": "b"}, "id": "c1", "type": "tool_call"}])])
    )
    g = StateGraph(MessagesState)
    g.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_node("tools", ToolNode(opl.tools(agent), handle_tool_errors=False))
    g.add_edge(START, "model")
    g.add_edge("model", "tools")
    with pytest.raises(ValueError, match="thread_id"):
        g.compile().invoke({"messages": [("user", "Mail them.")]})
    assert emails(to) == 0
