"""agent_loop is a simulated agent runtime (no real model) that pays one invoice through opledger
with opledger.ToolRunner.

The model's tool list comes from the ledger (ListTools); the model proposes the same payment twice
(its answer for round 1, regenerated after a timeout, which names the call with a new provider id);
the runner prepares it under a key derived from the runtime's own state (conversation, round, tool;
not the provider's tool-call id), so both proposals are one operation; a person approves exactly the
fingerprint of the arguments shown (the approval hook); the runner executes it and hands the model
the same answer both times; the processor holds one charge.

Run it against `clients/run-server.sh ENVFILE` (or `make dev`'s .opledger-dev/env); it reads
OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL from that file or from the environment:

    python clients/python/examples/agent_loop.py ENVFILE
"""

import json
import os
import sys
import urllib.request
import uuid
from typing import Any, Dict, List

import opledger
from opledger.v1 import ledger_pb2


def load_env(path: str) -> None:
    """load_env reads the `export K=V` lines of an env file into os.environ."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("export "):
                k, _, v = line[len("export ") :].partition("=")
                os.environ[k] = v


def require_env(*names: str) -> None:
    """require_env stops with a clear message when a variable is missing: with a guessed
    default the example would count charges at the wrong processor."""
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        sys.exit(
            f"agent_loop: {', '.join(missing)} not set: source the env file of `opledger dev` "
            "(. ./.opledger-dev/env) or of clients/run-server.sh, or pass that file as the first argument"
        )


def charges_for(invoice_id: str) -> int:
    url = os.environ["FAKEPAY_URL"].rstrip("/") + "/charges"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return sum(1 for ch in json.load(resp)["data"] if ch.get("invoice_id") == invoice_id)


def fake_model(tools: List[opledger.ModelTool], invoice_id: str, attempt: int) -> List[Dict[str, Any]]:
    """fake_model stands in for an LLM: given the tool list, it asks to pay the invoice, with the
    arguments as JSON text, as a model writes them. Like a real model, each answer names its calls
    with new provider ids: call_pay_1 in the first answer, call_pay_1b in the regenerated one."""
    assert "pay_invoice" in {t.name for t in tools}
    args = {"invoice_id": invoice_id, "amount_minor": 4900, "currency": "EUR"}
    call_id = "call_pay_1" if attempt == 1 else "call_pay_1b"
    return [{"id": call_id, "name": "pay_invoice", "arguments": json.dumps(args)}]


def main() -> int:
    if len(sys.argv) > 1:
        load_env(sys.argv[1])
    require_env("OPLEDGER_ADDR", "AGENT_KEY", "APPROVER_KEY", "FAKEPAY_URL")
    invoice_id = "INV-" + uuid.uuid4().hex[:8].upper()
    conversation, round_no = "conv-" + uuid.uuid4().hex[:8], 1  # the runtime's own durable state

    with opledger.Client(os.environ["OPLEDGER_ADDR"], os.environ["AGENT_KEY"], plaintext=True) as agent:
        approver = agent.with_api_key(os.environ["APPROVER_KEY"])  # same channel, another principal

        def person_approves(op: ledger_pb2.Operation) -> None:
            """The approval screen: shows the arguments, checks that the fingerprint is theirs,
            and approves exactly that."""
            shown = opledger.struct_to_dict(op.args)
            print(f"approval needed: {op.id} {op.tool} {json.dumps(shown, sort_keys=True)}")
            fp = opledger.compute_fingerprint(op.tool, shown, op.tenant, op.tool_version)
            assert fp == op.fingerprint, "the operation is not what the screen shows"
            approver.approve(op.id, fp, "approve", "customer confirmed")

        answers: List[str] = []
        # --- the agent loop: the lines that wrap the ledger's tools ---
        runner = opledger.ToolRunner(agent, approval_wait=30, on_approval_required=person_approves)
        tools = runner.model_tools()  # name, description, JSON Schema: what the model may call
        for attempt in (1, 2):  # round 1's answer, regenerated after a timeout
            for call in fake_model(tools, invoice_id, attempt):
                # tool_call="", not call["id"]: this loop does not store the model's answer before
                # running its calls, and the regenerated answer names the same payment call_pay_1b,
                # so a key with the id would pay twice. A runtime that pins each answer first may
                # include call["id"].
                key = opledger.derive_key(conversation=conversation, round=round_no, tool_call="", tool=call["name"])
                outcome = runner.run(call["name"], call["arguments"], key)
                answers.append(outcome.for_model())  # the tool result the model reads
        # --- end of the agent loop ---

    for i, a in enumerate(answers, 1):
        print(f"answer {i}, tool result for the model: {a}")
    n = charges_for(invoice_id)
    print(f"charges at the processor for {invoice_id}: {n}")
    same = len(answers) == 2 and answers[0] == answers[1] and json.loads(answers[0])["status"] == "succeeded"
    return 0 if n == 1 and same else 1


if __name__ == "__main__":
    sys.exit(main())
