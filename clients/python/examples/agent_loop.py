"""agent_loop is a simulated agent runtime (no real model) that pays one invoice through opledger.

It shows the three things that keep a retried or repeated tool call from paying twice:

1. the idempotency key is derived from the runtime's own workflow state, so the model
   proposing the same payment twice maps to one operation (Prepare answers replayed=True);
2. a person approves exactly the fingerprint of the arguments shown to them;
3. when the Execute answer is lost, the runtime simply asks again and gets the stored outcome
   (replayed=True): the processor still holds one charge.

Run it against `clients/run-server.sh ENVFILE` (or `make dev`'s .opledger-dev/env); it reads
OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL from that file or from the environment:

    python clients/python/examples/agent_loop.py ENVFILE
"""

import json
import os
import sys
import urllib.request
import uuid

import opledger
from opledger.v1 import ledger_pb2


def load_env(path):
    """load_env reads the `export K=V` lines of an env file into os.environ."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("export "):
                k, _, v = line[len("export "):].partition("=")
                os.environ[k] = v


def require_env(*names):
    """require_env stops with a clear message when a variable is missing: with a guessed
    default the example would count charges at the wrong processor."""
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        sys.exit(
            f"agent_loop: {', '.join(missing)} not set: source the env file of `opledger dev` "
            "(. ./.opledger-dev/env) or of clients/run-server.sh, or pass that file as the first argument"
        )


def charges_for(invoice_id):
    url = os.environ["FAKEPAY_URL"].rstrip("/") + "/charges"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return sum(1 for ch in json.load(resp)["data"] if ch.get("invoice_id") == invoice_id)


def fake_model(invoice_id):
    """fake_model stands in for an LLM: every round it proposes the same payment, each time with a
    new provider call id, as a regenerated response would."""
    return {
        "id": f"call_{uuid.uuid4().hex[:8]}",  # provider ids change between generations
        "name": "pay_invoice",
        "arguments": {"invoice_id": invoice_id, "amount_minor": 4900, "currency": "EUR"},
    }


class LostResponse(Exception):
    """LostResponse simulates a network cut after the server answered."""


def main():
    if len(sys.argv) > 1:
        load_env(sys.argv[1])
    require_env("OPLEDGER_ADDR", "AGENT_KEY", "APPROVER_KEY", "FAKEPAY_URL")
    addr = os.environ["OPLEDGER_ADDR"]
    invoice_id = "INV-" + uuid.uuid4().hex[:8].upper()

    # The runtime's trusted workflow state: it owns the identity of the intended action.
    workflow = {"conversation_id": "conv-" + uuid.uuid4().hex[:8], "step": "pay-" + invoice_id}

    with opledger.Client(addr, os.environ["AGENT_KEY"]) as agent, opledger.Client(
        addr, os.environ["APPROVER_KEY"]
    ) as approver:
        op = None
        for round_no in (1, 2):  # the model asks twice (a retried model round)
            call = fake_model(invoice_id)
            # The key comes from the runtime's state (conversation + step it assigned), not from
            # the provider's call id, which differs between the two rounds.
            key = opledger.derive_idempotency_key(
                workflow["conversation_id"], 1, workflow["step"], call["name"], "1"
            )
            prepared = agent.prepare(call["name"], call["arguments"], key)
            print(f"round {round_no}: Prepare -> {prepared.operation.id} "
                  f"{ledger_pb2.State.Name(prepared.operation.state)} replayed={prepared.replayed}")
            op = prepared.operation

        # The approval screen shows the arguments and recomputes the fingerprint from them.
        shown = opledger.struct_to_dict(op.args)
        fp = opledger.compute_fingerprint(op.tool, shown, op.tenant, op.tool_version)
        assert fp == op.fingerprint, "the operation is not what the screen shows"
        approved = approver.approve(op.id, fp, "approve", "customer confirmed")
        print(f"approved: {ledger_pb2.State.Name(approved.operation.state)}")

        try:
            result = agent.execute(op.id)
            raise LostResponse(result.operation.external_ref)  # ...and the answer never arrives
        except LostResponse:
            print("Execute answer lost on the way back; asking again")

        replay = agent.execute(op.id)
        print(f"Execute -> {ledger_pb2.State.Name(replay.operation.state)} "
              f"external_ref={replay.operation.external_ref} replayed={replay.replayed}")
        res = opledger.struct_to_dict(replay.operation.result)
        print("result: " + json.dumps({k: res.get(k) for k in ("id", "status", "amount_minor", "currency")}))

    n = charges_for(invoice_id)
    print(f"charges at the processor for {invoice_id}: {n}")
    return 0 if n == 1 and replay.replayed else 1


if __name__ == "__main__":
    sys.exit(main())
