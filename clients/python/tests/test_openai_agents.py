"""opledger.openai_agents against the server of clients/test.sh, with the Agents SDK's own
ScriptedModel (agents.testing; no network): the run is interrupted for approval, its RunState is
persisted, a person approves in the ledger (the approver's key), the state restored and resumed
executes the call, a second resume from the same persisted state and a retried run replay it, and the
fake processor holds one charge; a denial reaches the model as the SDK's rejection; an
approval with edits runs the edited call once and the model is told what ran."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, List

import pytest

pytest.importorskip("agents")

from agents import Agent, RunState, Runner, set_tracing_disabled  # noqa: E402
from agents.testing import ModelStep, ScriptedModel  # noqa: E402
from agents.testing.model import ModelCall, assistant_message, function_call  # noqa: E402

import opledger  # noqa: E402
import opledger.openai_agents as opl  # noqa: E402
from opledger.v1 import ledger_pb2  # noqa: E402

set_tracing_disabled(True)  # no trace export: the tests use no network


class Seen:
    """Seen is a scripted model's memory: the function call outputs it was given, newest last."""

    def __init__(self) -> None:
        self.outputs: List[str] = []

    def respond(self, call: ModelCall) -> Any:
        items = call.input if isinstance(call.input, list) else []
        outs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        text = str(outs[-1]["output"]) if outs else ""
        self.outputs.append(text)
        return [assistant_message("the tool said: " + text)]


def _invoice() -> dict[str, Any]:
    return {"invoice_id": "INV-oai-" + uuid.uuid4().hex[:8], "amount_minor": 4900, "currency": "EUR"}


def _agent(client: opledger.Client, args: dict[str, Any], seen: Seen, tool: str = "pay_invoice") -> Agent[Any]:
    model = ScriptedModel([[function_call(tool, args, call_id="call_pay_1")]] + [ModelStep.respond(seen.respond)] * 6)
    return Agent(name="payer", model=model, tools=opl.tools(client))


def test_interrupted_approved_resumed_twice_is_one_charge(agent, approver, charges):
    args, seen = _invoice(), Seen()
    bot = _agent(agent, args, seen)
    context = {"conversation_id": "conv-" + uuid.uuid4().hex[:8]}

    first = Runner.run_sync(bot, "Pay the invoice.", context=context)
    assert [i.tool_name for i in first.interruptions] == ["pay_invoice"]
    assert charges(args["invoice_id"]) == 0, "nothing is charged before a person decides"
    saved = first.to_state().to_string()  # the persisted RunState, as an app stores it

    # Resumed before anyone decided: still undecided, nothing approved.
    state = asyncio.run(RunState.from_string(bot, saved))
    assert [i.tool_name for i in asyncio.run(opl.decide(agent, state))] == ["pay_invoice"]

    # A person approves what the ledger holds (the approver's key, as the console would).
    ops = [o for o in approver.list_operations(tool="pay_invoice", page_size=200).operations
           if opledger.struct_to_dict(o.args)["invoice_id"] == args["invoice_id"]]
    assert len(ops) == 1 and ops[0].state == ledger_pb2.STATE_AWAITING_APPROVAL
    op = ops[0]
    approver.approve(op.id, opledger.operation_fingerprint(op), "approve", "customer confirmed")

    for attempt in range(2):  # the resume, then the same resume again from the same saved state
        state = asyncio.run(RunState.from_string(bot, saved))
        assert asyncio.run(opl.decide(agent, state)) == []
        done = Runner.run_sync(bot, state)
        answer = json.loads(seen.outputs[-1])
        assert answer["status"] == "succeeded" and answer["operation_id"] == op.id, (attempt, seen.outputs[-1])
        assert done.final_output.startswith("the tool said: ")
        assert charges(args["invoice_id"]) == 1

    # A retried run (the same model answer, the same context) is not interrupted again: the ledger
    # already holds the approved call, which replays.
    retried = Runner.run_sync(_agent(agent, args, seen), "Pay the invoice.", context=context)
    assert retried.interruptions == []
    assert json.loads(seen.outputs[-1])["operation_id"] == op.id
    assert charges(args["invoice_id"]) == 1, "one approved call, one charge"


def test_denied_tells_the_model(agent, approver, charges):
    args, seen = _invoice(), Seen()
    bot = _agent(agent, args, seen)
    first = Runner.run_sync(bot, "Pay the invoice.", context={"conversation_id": "conv-" + uuid.uuid4().hex[:8]})
    assert len(first.interruptions) == 1
    op = [o for o in approver.list_operations(tool="pay_invoice", page_size=200).operations
          if opledger.struct_to_dict(o.args)["invoice_id"] == args["invoice_id"]][0]
    approver.approve(op.id, op.fingerprint, "deny", "duplicate invoice")

    state = first.to_state()
    assert asyncio.run(opl.decide(agent, state)) == []
    Runner.run_sync(bot, state)
    assert "An approver denied pay_invoice" in seen.outputs[-1] and "duplicate invoice" in seen.outputs[-1]
    assert charges(args["invoice_id"]) == 0

    # Approved by the framework alone against the ledger's denial: the ledger's decision stands.
    forced = first.to_state()
    for item in forced.get_interruptions():
        forced.approve(item)
    Runner.run_sync(bot, forced)
    told = json.loads(seen.outputs[-1])
    assert told["status"] == "failed" and told["reason"] == "OPERATION_REJECTED", seen.outputs[-1]
    assert charges(args["invoice_id"]) == 0


def test_no_approval_runs_in_the_call(agent, emails):
    to = "oai-" + uuid.uuid4().hex[:8] + "@example.com"
    seen = Seen()
    model = ScriptedModel([[function_call("send_email", {"to": to, "subject": "s", "body": "b"}, call_id="c1")], ModelStep.respond(seen.respond)])
    bot = Agent(name="mailer", model=model, tools=opl.tools(agent))
    result = Runner.run_sync(bot, "Mail them.", context={"conversation_id": "conv-" + uuid.uuid4().hex[:8]})
    assert result.interruptions == [] and json.loads(seen.outputs[-1])["status"] == "succeeded"
    assert emails(to) == 1


def test_a_run_without_a_conversation_fails_loudly(agent, emails):
    """Without a conversation_id a model's call id ("c1" here, as scripted and some providers' ids are)
    would name the same operation in every conversation: the run fails before anything is prepared."""
    to = "oai-" + uuid.uuid4().hex[:8] + "@example.com"
    model = ScriptedModel([[function_call("send_email", {"to": to, "subject": "s", "body": "b"}, call_id="c1")]])
    with pytest.raises(Exception, match="conversation_id"):
        Runner.run_sync(Agent(name="mailer", model=model, tools=opl.tools(agent)), "Mail them.")
    assert emails(to) == 0


def _refund() -> dict[str, Any]:
    return {"invoice_id": "INV-oai-" + uuid.uuid4().hex[:8], "amount_minor": 4900, "currency": "EUR"}


def _recorded(approver: opledger.Client, args: dict[str, Any]) -> ledger_pb2.Operation:
    """_recorded is the refund the agent prepared for args' invoice (the call as made)."""
    (op,) = [o for o in approver.list_operations(tool="refund", page_size=200).operations
             if opledger.struct_to_dict(o.args)["invoice_id"] == args["invoice_id"] and not o.supersedes]
    return op


def test_approved_with_edit_runs_the_edited_call_and_tells_the_model(agent, approver, edit, amounts):
    args, seen = _refund(), Seen()
    bot = _agent(agent, args, seen, tool="refund")
    context = {"conversation_id": "conv-" + uuid.uuid4().hex[:8]}
    first = Runner.run_sync(bot, "Refund the invoice.", context=context)
    assert [i.tool_name for i in first.interruptions] == ["refund"]
    saved = first.to_state().to_string()
    op = _recorded(approver, args)
    edited = edit(op.id, 4000)  # "the same, but 40.00": the call as made is REJECTED, superseded

    for attempt in range(2):  # the resume, then the same resume again from the same saved state
        state = asyncio.run(RunState.from_string(bot, saved))
        assert asyncio.run(opl.decide(agent, state)) == []
        Runner.run_sync(bot, state)
        answer = json.loads(seen.outputs[-1])
        assert answer["status"] == "succeeded" and answer["operation_id"] == edited.id, (attempt, seen.outputs[-1])
        assert answer["edited"]["supersedes"] == op.id and answer["edited"]["args"]["amount_minor"] == 4000
        assert answer["edited"]["message"].startswith("An approver changed amount_minor from 4900 to 4000; this ran: {")
        assert seen.outputs[-1] == opledger.ToolRunner(agent).check(op.id).for_model(), "the runner's words"
        assert amounts(args["invoice_id"]) == [4000], "the edited amount, once"

    # A retried run (the same model answer, the same context): not interrupted, the same answer.
    retried = Runner.run_sync(_agent(agent, args, seen, tool="refund"), "Refund the invoice.", context=context)
    assert retried.interruptions == []
    assert json.loads(seen.outputs[-1]) == answer
    assert amounts(args["invoice_id"]) == [4000]


def test_edit_into_a_quorum_awaits_the_second_approver(agent, approver, edit, amounts):
    args, seen = _refund(), Seen()
    bot = _agent(agent, args, seen, tool="refund")
    context = {"conversation_id": "conv-" + uuid.uuid4().hex[:8]}
    first = Runner.run_sync(bot, "Refund the invoice.", context=context)
    edit(_recorded(approver, args).id, 150000)  # above 1,000.00: two approvers

    state = first.to_state()
    assert [i.tool_name for i in asyncio.run(opl.decide(agent, state))] == ["refund"], "undecided, not denied"
    retried = Runner.run_sync(_agent(agent, args, seen, tool="refund"), "Refund the invoice.", context=context)
    assert [i.tool_name for i in retried.interruptions] == ["refund"], "interrupted again for the second approver"
    assert amounts(args["invoice_id"]) == []
