"""AsyncClient: the retry owner against the scripted stub, and the flows against the server."""

import asyncio
import os
import uuid

import grpc
import pytest

import opledger
from opledger.v1 import ledger_pb2

from test_retry import UNAVAILABLE, rich_error, stub_server  # noqa: F401 (fixture)


class AsyncSleeps(list):
    async def __call__(self, seconds):
        self.append(seconds)


def test_async_retries_unavailable_with_the_same_key(stub_server):  # noqa: F811
    servicer, addr = stub_server([rich_error(UNAVAILABLE, "LEDGER_UNAVAILABLE", 0.05)] * 2)
    sleeps = AsyncSleeps()

    async def main():
        async with opledger.AsyncClient(addr, "test-key", plaintext=True, retry=opledger.RetryPolicy(async_sleep=sleeps)) as c:
            return await c.prepare("pay_invoice", {"amount_minor": 4900}, "key-1")

    resp = asyncio.run(main())
    assert resp.operation.id == "op_1"
    assert servicer.keys == ["key-1"] * 3
    assert len(sleeps) == 2 and sleeps[0] >= 0.05


def test_async_invalid_argument_is_typed_and_final(stub_server):  # noqa: F811
    servicer, addr = stub_server([rich_error(grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID")])

    async def main():
        async with opledger.AsyncClient(addr, "test-key", plaintext=True) as c:
            await c.prepare("pay_invoice", {}, "key-2")

    with pytest.raises(opledger.ArgsInvalid) as ei:
        asyncio.run(main())
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and servicer.calls == 1


def test_async_flow_against_the_server(addr, charges):
    invoice = "INV-PYA-" + uuid.uuid4().hex[:12]
    args = {"invoice_id": invoice, "amount_minor": 4900, "currency": "EUR"}
    key = opledger.derive_key(conversation="aio-" + invoice, round=1, tool="pay_invoice")

    async def main():
        async with opledger.AsyncClient(addr, os.environ["AGENT_KEY"], plaintext=True) as agent:
            approver = agent.with_api_key(os.environ["APPROVER_KEY"])
            op = (await agent.prepare("pay_invoice", args, key)).operation
            assert (await agent.prepare("pay_invoice", args, key)).replayed
            with pytest.raises(opledger.IdempotencyKeyReused):
                await agent.prepare("pay_invoice", {**args, "amount_minor": 49000}, key)
            with pytest.raises(opledger.ApprovalRequired):
                await agent.execute(op.id)
            await approver.approve(op.id, opledger.operation_fingerprint(op), "approve", "ok")
            done = await agent.execute(op.id, wait=5)
            again = await agent.execute(op.id)
            listed = await approver.list_operations(states=["succeeded"], tool="pay_invoice", page_size=50)
            tools = await agent.list_tools()
            other = (await agent.prepare("pay_invoice", {**args, "invoice_id": invoice + "-2"}, key + "-2")).operation
            cancelled = await agent.cancel(other.id, "not needed")
            got = await agent.get(op.id, include_events=True)
            return op, done, again, listed, tools, cancelled, got

    op, done, again, listed, tools, cancelled, got = asyncio.run(main())
    assert done.operation.state == ledger_pb2.STATE_SUCCEEDED and again.replayed
    assert op.id in {o.id for o in listed.operations}
    assert "pay_invoice" in {t.name for t in tools.tools}
    assert cancelled.operation.state == ledger_pb2.STATE_CANCELLED
    assert got.events[0].type == ledger_pb2.EVENT_TYPE_PREPARED
    assert charges(invoice) == 1
