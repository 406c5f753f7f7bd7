"""pydantic_ai turns the ledger's declared tools into Pydantic AI tools (the extra
``opledger[pydantic-ai]``: pydantic-ai-slim 2.x), with approval mapped to Pydantic AI's deferred tools.

- ``tools(client)`` is every current tool of ``ListTools`` (and ``check_operation``) as a
  ``pydantic_ai.Tool``; ``tool(client, model_tool)`` is one. ``client`` is an ``opledger.Client`` or an
  ``opledger.AsyncClient`` (an async tool then) with the agent's key.
- A call that needs a person's approval raises ``ApprovalRequired`` with the operation in its
  metadata (``operation_id``, ``fingerprint``, ``tool``, ``args``): the run ends with
  ``DeferredToolRequests`` (give the agent ``output_type=[str, DeferredToolRequests]``). A person
  decides in opledger (the approval console, or ``Approve`` with an approver's key), and
  ``results(client, requests)`` reads the ledger's decisions into ``DeferredToolResults``: approved
  calls as ``ToolApproved`` with their ``operation_id``, denied or cancelled ones as ``ToolDenied``
  with a message that says nothing happened, undecided ones left out. The run resumed with them
  (``agent.run(message_history=…, deferred_tool_results=…)``) executes the approved operation by its
  id (``check``: it never prepares anything), and a resume run again, or a retry of it, replays the
  recorded outcome.
- The idempotency key of a new call is ``derive_key(conversation=ctx.conversation_id, round=0,
  tool_call=ctx.tool_call_id, tool=name)``: Pydantic AI keeps both in the message history, so a resume
  from that history, in any process, makes the same key. A run started again from the prompt (its
  history lost) is a new model response with new tool-call ids, hence a new operation: pass ``key=`` to
  derive keys from your own state when runs may restart that way.
- The tool's return value is the runner's ``for_model()`` JSON text: succeeded (with the result),
  failed (with the reason), outcome unknown ("do not call it again"), awaiting approval.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, Tool, ToolApproved, ToolDenied

from opledger.v1 import ledger_pb2

from .aio import AsyncClient
from .client import Client
from .errors import OperationNotFound
from .fingerprint import struct_to_dict
from .keys import derive_key
from .runner import (
    CHECK_OPERATION_TOOL,
    AsyncToolRunner,
    AwaitingApproval,
    ModelTool,
    ToolOutcome,
    ToolRunner,
    decision_message,
    model_tools_of,
)

__all__ = ["tools", "tool", "results", "aresults", "default_key", "decision_message", "KeyFunc"]

KeyFunc = Callable[[RunContext[Any], str, Dict[str, Any]], str]
"""KeyFunc derives a call's idempotency key from its context, the tool's name and its arguments."""


def default_key(ctx: RunContext[Any], tool: str, args: Dict[str, Any]) -> str:
    """default_key: the conversation and the model's tool-call id, both kept by the message history
    across a deferred-tool resume."""
    if not ctx.tool_call_id or not ctx.conversation_id:
        raise ValueError("opledger: the run context has no tool call id or conversation id to derive a key from")
    return derive_key(conversation=ctx.conversation_id, round=0, tool_call=ctx.tool_call_id, tool=tool)


def _approved_operation(ctx: RunContext[Any]) -> str:
    """_approved_operation is the operation id a resumed call carries (results() puts it there)."""
    if not ctx.tool_call_approved or not isinstance(ctx.tool_call_metadata, dict):
        return ""
    op_id = ctx.tool_call_metadata.get("operation_id")
    return op_id if isinstance(op_id, str) else ""


def _answer(outcome: ToolOutcome) -> str:
    """_answer is the tool's return value; a call awaiting approval defers the run instead."""
    if isinstance(outcome, AwaitingApproval):
        op = outcome.operation
        raise ApprovalRequired(
            metadata={"operation_id": op.id, "fingerprint": op.fingerprint, "tool": op.tool, "args": struct_to_dict(op.args)}
        )
    return outcome.for_model()


def tool(
    client: Union[Client, AsyncClient],
    model_tool: ModelTool,
    *,
    key: Optional[KeyFunc] = None,
    execute_wait: float = 30.0,
) -> Tool[Any]:
    """tool is one declared tool (an element of ToolRunner.model_tools()) as a Pydantic AI tool.
    ``check_operation`` becomes the runner's check."""
    name = model_tool.name
    derive = key or default_key
    version = model_tool.version or None
    if isinstance(client, AsyncClient):
        arunner = AsyncToolRunner(client, execute_wait=execute_wait, tool_version=version)

        async def acall(ctx: RunContext[Any], **args: Any) -> str:
            if name == CHECK_OPERATION_TOOL:
                return (await arunner.check(str(args.get("operation_id", "")))).for_model()
            op_id = _approved_operation(ctx)
            if op_id:
                return _answer(await arunner.check(op_id))
            return _answer(await arunner.run(name, args, derive(ctx, name, args)))

        return Tool[Any].from_schema(acall, name, model_tool.description, model_tool.args_schema, takes_ctx=True)
    runner = ToolRunner(client, execute_wait=execute_wait, tool_version=version)

    def call(ctx: RunContext[Any], **args: Any) -> str:
        if name == CHECK_OPERATION_TOOL:
            return runner.check(str(args.get("operation_id", ""))).for_model()
        op_id = _approved_operation(ctx)
        if op_id:
            return _answer(runner.check(op_id))
        return _answer(runner.run(name, args, derive(ctx, name, args)))

    return Tool[Any].from_schema(call, name, model_tool.description, model_tool.args_schema, takes_ctx=True)


def tools(client: Client, *, key: Optional[KeyFunc] = None, execute_wait: float = 30.0) -> List[Tool[Any]]:
    """tools is every current tool of the ledger (ListTools), and check_operation, as Pydantic AI
    tools. With an AsyncClient, build the list with ``tool()`` over ``await AsyncToolRunner(c).model_tools()``."""
    return [tool(client, t, key=key, execute_wait=execute_wait) for t in model_tools_of(client.list_tools())]


def _decision(op: Optional[ledger_pb2.Operation]) -> Union[ToolApproved, ToolDenied, None]:
    if op is None or op.state == ledger_pb2.STATE_AWAITING_APPROVAL:
        return None  # not decided yet
    message = decision_message(op)
    if message is not None:
        return ToolDenied(message)
    return ToolApproved()  # approved: the resumed call executes it, or reports what it did


def _results(requests: DeferredToolRequests, ops: Dict[str, Optional[ledger_pb2.Operation]]) -> DeferredToolResults:
    approvals: Dict[str, Union[bool, ToolApproved, ToolDenied]] = {}
    metadata: Dict[str, Dict[str, Any]] = {}
    for call_id, op in ops.items():
        decided = _decision(op)
        if decided is not None and op is not None:
            approvals[call_id] = decided
            metadata[call_id] = {"operation_id": op.id}
    return DeferredToolResults(approvals=approvals, metadata=metadata)


def _pending(requests: DeferredToolRequests) -> Dict[str, str]:
    """_pending: the operation id of each approval request the adapter made, by tool call id."""
    out: Dict[str, str] = {}
    for call in requests.approvals:
        op_id = requests.metadata.get(call.tool_call_id, {}).get("operation_id")
        if isinstance(op_id, str) and op_id:
            out[call.tool_call_id] = op_id
    return out


def results(client: Client, requests: DeferredToolRequests) -> DeferredToolResults:
    """results reads the ledger's decision on each call of ``requests`` that awaits approval:
    approved ones become ToolApproved (with their operation_id, so the resumed call executes exactly
    that operation), denied or cancelled ones ToolDenied with decision_message, and undecided ones are
    left out (``requests.remaining(results)`` lists them; resume later). An operation the ledger no
    longer knows is left out too."""
    ops: Dict[str, Optional[ledger_pb2.Operation]] = {}
    for call_id, op_id in _pending(requests).items():
        try:
            ops[call_id] = client.get(op_id).operation
        except OperationNotFound:
            ops[call_id] = None
    return _results(requests, ops)


async def aresults(client: AsyncClient, requests: DeferredToolRequests) -> DeferredToolResults:
    """aresults is results for an AsyncClient."""
    ops: Dict[str, Optional[ledger_pb2.Operation]] = {}
    for call_id, op_id in _pending(requests).items():
        try:
            ops[call_id] = (await client.get(op_id)).operation
        except OperationNotFound:
            ops[call_id] = None
    return _results(requests, ops)

