"""opledger.openai_agents against the server of clients/test.sh, with the Agents SDK's own
ScriptedModel (agents.testing; no network): the run is interrupted for approval, its RunState is
persisted, a person approves in the ledger (the approver's key), the state restored and resumed
executes the call, a second resume from the same persisted state and a retried run replay it, and the
fake processor holds one charge; a denial reaches the model as the SDK's rejection."""

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


def _agent(client: opledger.Client, args: dict[str, Any], seen: Seen) -> Agent[Any]:
    model = ScriptedModel([[function_call("pay_invoice", args, call_id="call_pay_1")]] + [ModelStep.respond(seen.respond)] * 6)
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
