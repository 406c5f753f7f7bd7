"""End to end against a real opledger (clients/run-server.sh): the demo tenant's pay_invoice."""

import uuid

import grpc
import pytest

import opledger
from opledger.v1 import ledger_pb2


def new_invoice():
    """new_invoice returns fresh args and a derived key, so reruns against one server never
    collide."""
    invoice = "INV-PY-" + uuid.uuid4().hex[:12]
    args = {"invoice_id": invoice, "amount_minor": 4900, "currency": "EUR"}
    key = opledger.derive_key(conversation="test-" + invoice, round=1, tool_call="call_1", tool="pay_invoice")
    return invoice, args, key


def test_prepare_twice_is_the_same_operation(agent):
    _, args, key = new_invoice()
    first = agent.prepare("pay_invoice", args, key)
    second = agent.prepare("pay_invoice", args, key)
    assert not first.replayed and second.replayed
    assert second.operation.id == first.operation.id
    op = first.operation
    assert op.state == ledger_pb2.STATE_AWAITING_APPROVAL
    assert op.tool_version == "1"
    # The client computes the server's fingerprint from what it would show an approver.
    assert op.fingerprint == opledger.operation_fingerprint(op)
    assert op.fingerprint == opledger.compute_fingerprint("pay_invoice", args, op.tenant, "1")


def test_same_key_other_args_is_refused(agent):
    _, args, key = new_invoice()
    op = agent.prepare("pay_invoice", args, key).operation
    with pytest.raises(opledger.IdempotencyKeyReused) as ei:
        agent.prepare("pay_invoice", {**args, "amount_minor": 49000}, key)
    err = ei.value
    assert err.code == grpc.StatusCode.ALREADY_EXISTS
    assert err.reason == "IDEMPOTENCY_KEY_REUSED"
    assert not err.retryable
    # Nothing changed.
    got = agent.get(op.id).operation
    assert opledger.struct_to_dict(got.args)["amount_minor"] == 4900
    assert got.fingerprint == op.fingerprint


def test_approve_execute_makes_one_charge(agent, approver, charges):
    invoice, args, key = new_invoice()
    op = agent.prepare("pay_invoice", args, key).operation

    with pytest.raises(opledger.ApprovalRequired):
        agent.execute(op.id)
    wrong = opledger.compute_fingerprint("pay_invoice", {**args, "amount_minor": 49000}, op.tenant, op.tool_version)
    with pytest.raises(opledger.ApprovalFingerprintMismatch):
        approver.approve(op.id, wrong, "approve", "customer confirmed")
    with pytest.raises(opledger.RoleRequired):
        agent.approve(op.id, op.fingerprint, "approve")  # an agent key cannot approve

    shown = opledger.operation_fingerprint(approver.get(op.id).operation)
    approved = approver.approve(op.id, shown, "approve", "customer confirmed")
    assert approved.operation.state == ledger_pb2.STATE_READY
    assert approved.operation.approval.decision == ledger_pb2.DECISION_APPROVE
    assert approver.approve(op.id, shown, "approve", "again").replayed

    assert charges(invoice) == 0
    done = agent.execute(op.id)
    assert done.operation.state == ledger_pb2.STATE_SUCCEEDED
    assert not done.replayed
    assert done.operation.external_ref
    assert charges(invoice) == 1

    again = agent.execute(op.id, wait=1.5)
    assert again.replayed
    assert again.operation.state == ledger_pb2.STATE_SUCCEEDED
    assert again.operation.external_ref == done.operation.external_ref
    assert charges(invoice) == 1

    # A retried Prepare after success still names the same, finished operation.
    replay = agent.prepare("pay_invoice", args, key)
    assert replay.replayed and replay.operation.state == ledger_pb2.STATE_SUCCEEDED

    got = agent.get(op.id, include_events=True)
    types = [ledger_pb2.EventType.Name(e.type) for e in got.events]
    assert types[0] == "EVENT_TYPE_PREPARED"
    assert "EVENT_TYPE_CLAIMED" in types and types[-1] == "EVENT_TYPE_SUCCEEDED"

    # Reconcile of a finished operation changes nothing.
    assert agent.reconcile(op.id).operation.state == ledger_pb2.STATE_SUCCEEDED


def test_deny_rejects(agent, approver):
    _, args, key = new_invoice()
    op = agent.prepare("pay_invoice", args, key).operation
    denied = approver.approve(op.id, op.fingerprint, "deny", "not this one")
    assert denied.operation.state == ledger_pb2.STATE_REJECTED
    with pytest.raises(opledger.ApprovalConflict):
        approver.approve(op.id, op.fingerprint, "approve")
    with pytest.raises(opledger.OperationRejected):
        agent.execute(op.id)


def test_another_tenant_sees_nothing(agent, other_agent):
    _, args, key = new_invoice()
    op = agent.prepare("pay_invoice", args, key).operation
    for call in (lambda: other_agent.get(op.id), lambda: other_agent.execute(op.id), lambda: other_agent.reconcile(op.id)):
        with pytest.raises(opledger.OperationNotFound) as ei:
            call()
        assert ei.value.code == grpc.StatusCode.NOT_FOUND
    # The same key in another tenant is another operation.
    theirs = other_agent.prepare("pay_invoice", args, key)
    assert not theirs.replayed and theirs.operation.id != op.id
    assert theirs.operation.fingerprint != op.fingerprint


def test_auth_and_validation_errors_are_typed(addr, agent, approver):
    with opledger.Client(addr, "opl_not-a-real-key", plaintext=True) as bad, pytest.raises(opledger.ApiKeyInvalid) as ei:
        bad.get("op_01J00000000000000000000000")
    assert ei.value.code == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(opledger.RoleRequired):
        approver.prepare("pay_invoice", {}, "k-role")
    with pytest.raises(opledger.ToolUnknown):
        agent.prepare("no_such_tool", {}, "k-tool")
    with pytest.raises(opledger.ArgsInvalid):
        agent.prepare("pay_invoice", {"invoice_id": "INV-1", "amount_minor": -1, "currency": "EUR"}, "k-args")
    with pytest.raises(opledger.IdempotencyKeyInvalid):
        agent.prepare("pay_invoice", {}, "k" * 256)


def test_list_tools_operations_and_cancel(agent, approver, other_agent):
    tools = {t.name: t for t in approver.list_tools().tools}
    pay = tools["pay_invoice"]
    assert pay.approval_required and pay.current
    assert pay.effect == ledger_pb2.EFFECT_SIDE_EFFECT
    assert "amount_minor" in opledger.struct_to_dict(pay.args_schema)["properties"]

    ids = []  # oldest first
    for _ in range(3):
        _, args, key = new_invoice()
        ids.append(agent.prepare("pay_invoice", args, key).operation.id)
    page1 = approver.list_operations(states=["awaiting_approval"], tool="pay_invoice", page_size=2)
    assert [op.id for op in page1.operations] == [ids[2], ids[1]]
    assert page1.next_page_token
    page2 = approver.list_operations(
        states=[ledger_pb2.STATE_AWAITING_APPROVAL], tool="pay_invoice", page_size=2, page_token=page1.next_page_token
    )
    assert page2.operations[0].id == ids[0]

    # The token is bound to its filters; another tenant never sees these operations.
    with pytest.raises(opledger.FieldInvalid) as ei:
        approver.list_operations(page_token=page1.next_page_token)
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
    theirs = other_agent.list_operations(page_size=200)
    assert not set(ids) & {op.id for op in theirs.operations}

    # Cancel takes one off the pending list.
    cancelled = agent.cancel(ids[1], "not needed")
    assert cancelled.operation.state == ledger_pb2.STATE_CANCELLED
    assert agent.cancel(ids[1], "not needed").replayed
    left = approver.list_operations(states=["awaiting_approval"], tool="pay_invoice", page_size=2)
    assert [op.id for op in left.operations] == [ids[2], ids[0]]
