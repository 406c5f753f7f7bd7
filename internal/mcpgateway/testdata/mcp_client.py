"""mcp_client.py MODE TARGET: drives `opledger mcp` with the Python `mcp` package from PyPI, as an MCP host would.

MODE "stdio": TARGET is the opledger binary, started as `TARGET mcp` with OPLEDGER_TARGET and OPLEDGER_API_KEY from this
process's environment. MODE "http": TARGET is the gateway's streamable HTTP URL (http://HOST:PORT/mcp).

It lists the tools, calls send_email and then the same call again (a client retry: a new JSON-RPC id), calls
pay_invoice (which awaits approval), reads a line "approved" on standard input once a person approved it, and calls
check_operation. Each step is one JSON line on standard output; mcpgateway's TestPythonClient checks them and counts
the effects at the fake processor.
"""

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def emit(**fields):
    print(json.dumps(fields), flush=True)


def answer(result):
    return {
        "is_error": result.is_error,
        "structured": result.structured_content,
        "text": result.content[0].text if result.content else "",
    }


async def main(mode, target):
    if mode == "stdio":
        env = {k: v for k, v in os.environ.items() if k.startswith("OPLEDGER_")}
        server = StdioServerParameters(command=target, args=["mcp"], env=env)
    else:
        server = target
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
        emit(
            step="list",
            protocol_version=client.protocol_version,
            tools={
                t.name: {
                    "input_schema": t.input_schema,
                    "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else None,
                    "meta": t.meta,
                    "description": t.description,
                }
                for t in tools
            },
        )

        email = {"to": "py@example.com", "subject": "From Python " + mode, "body": "Hello."}
        first = await client.call_tool("send_email", email)
        retry = await client.call_tool("send_email", email)
        emit(step="email", first=answer(first), retry=answer(retry))

        pay = await client.call_tool("pay_invoice", {"invoice_id": "INV-PY-" + mode, "amount_minor": 1250, "currency": "EUR"})
        awaiting = answer(pay)
        emit(step="awaiting", **awaiting)
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if line.strip() != "approved":
            raise SystemExit("expected 'approved' on stdin, got %r" % line)
        op_id = awaiting["structured"]["operation_id"]
        checked = await client.call_tool("check_operation", {"operation_id": op_id})
        again = await client.call_tool("check_operation", {"operation_id": op_id})
        emit(step="checked", first=answer(checked), again=answer(again))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
