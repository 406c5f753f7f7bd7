"""The policy flows end to end against a real opledger (clients/run-server.sh), on the refund tool
it adds (clients/testdata/policy_tools.yaml): EUR only, every call approved, two approvers above
1,000.00, amount_minor editable by an approver."""

import asyncio
import json
import os
import uuid

import pytest

import opledger
from opledger.v1 import ledger_pb2


def refund_args(currency="EUR"):
    invoice = "INV-PY-" + uuid.uuid4().hex[:12]
    key = opledger.derive_key(conversation="test-" + invoice, round=1, tool_call="call_1", tool="refund")
    return invoice, {"invoice_id": invoice, "amount_minor": 4900, "currency": currency}, key


def editing_approver(approver, amount):
    """editing_approver is an on_approval_required hook that approves the call as made with
    amount_minor changed, as a person at a prompt would, and leaves an edited operation alone."""

    def person(op):
        if op.supersedes:
            return
        edited = {**opledger.struct_to_dict(op.args), "amount_minor": amount}
        resp = approver.approve_edited(op.id, op.fingerprint, edited, "less is enough")
        assert resp.operation.state == ledger_pb2.STATE_REJECTED
        assert resp.operation.superseded_by == resp.edited.id

    return person


def test_runner_follows_an_approver_edit(agent, approver, amounts):
    invoice, args, key = refund_args()
    runner = opledger.ToolRunner(agent, approval_wait=30, on_approval_required=editing_approver(approver, 4000))
    out = runner.run("refund", args, key)
    assert isinstance(out, opledger.Succeeded), out
    assert out.edit is not None
    assert out.edit.supersedes != out.operation_id
    assert out.operation.supersedes == out.edit.supersedes
    assert out.edit.args["amount_minor"] == 4000
    assert out.edit.changes == (opledger.Change(field="amount_minor", old=4900, new=4000),)
    assert amounts(invoice) == [4000], "the edited amount ran, once"
    text = json.loads(out.for_model())
    assert text["operation_id"] == out.operation_id
    assert text["edited"]["args"]["amount_minor"] == 4000
    assert text["edited"]["message"].startswith("An approver changed amount_minor from 4900 to 4000; this ran: {")

    # The same call again (the ledger replays the original, whose Execute answers
    # OPERATION_SUPERSEDED), and a check of the original's id: the same answer, no second charge.
    assert runner.run("refund", args, key).for_model() == out.for_model()
    assert runner.check(out.edit.supersedes).for_model() == out.for_model()
    assert amounts(invoice) == [4000]
    with pytest.raises(opledger.OperationSuperseded) as ei:
        agent.execute(out.edit.supersedes)
    assert ei.value.metadata["superseded_by"] == out.operation_id


def test_edit_into_a_quorum_awaits_the_second_approver(agent, approver, amounts):
    invoice, args, key = refund_args()
    runner = opledger.ToolRunner(agent, approval_wait=1, on_approval_required=editing_approver(approver, 150000))
    out = runner.run("refund", args, key)
    assert isinstance(out, opledger.AwaitingApproval), out
    assert out.edit is not None and out.operation.supersedes == out.edit.supersedes
    assert out.operation.approval.approvals_needed == 2
    assert len(out.operation.approval.approvals) == 1, "the editor's approval counts"
    assert "An approver changed amount_minor from 4900 to 150000; this awaits approval: {" in out.for_model()
    assert amounts(invoice) == []


def test_policy_denied_says_it_will_be_refused_again(agent, amounts):
    invoice, args, key = refund_args(currency="USD")
    runner = opledger.ToolRunner(agent)
    for _ in range(2):
        out = runner.run("refund", args, key)
        assert isinstance(out, opledger.Failed), out
        assert out.reason == "POLICY_DENIED"
        assert out.operation is None, "nothing was recorded"
        assert "refunds are paid in EUR only" in out.message
        assert "will be refused again" in out.message
    refund = next(t for t in runner.model_tools() if t.name == "refund")
    assert "\n\nPolicy: refused when" in refund.description
    assert "an approver may edit amount_minor" in refund.description
    assert amounts(invoice) == []


def test_async_runner_follows_an_approver_edit(addr, amounts):
    invoice, args, key = refund_args()

    async def main():
        async with opledger.AsyncClient(addr, os.environ["AGENT_KEY"], plaintext=True) as agent:
            approver = agent.with_api_key(os.environ["APPROVER_KEY"])

            async def person(op):
                if not op.supersedes:
                    edited = {**opledger.struct_to_dict(op.args), "amount_minor": 4000}
                    await approver.approve_edited(op.id, op.fingerprint, edited, "less is enough")

            runner = opledger.AsyncToolRunner(agent, approval_wait=30, on_approval_required=person)
            return await runner.run("refund", args, key), await runner.run("refund", args, key)

    out, again = asyncio.run(main())
    assert isinstance(out, opledger.Succeeded), out
    assert out.edit is not None and out.edit.args["amount_minor"] == 4000
    assert again.for_model() == out.for_model()
    assert amounts(invoice) == [4000]
