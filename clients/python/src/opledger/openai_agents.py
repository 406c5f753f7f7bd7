"""openai_agents turns the ledger's declared tools into OpenAI Agents SDK function tools (the extra
``opledger[openai-agents]``: openai-agents 0.24), with approval mapped to the SDK's own
human-in-the-loop: ``needs_approval``, a run interrupted with ``ToolApprovalItem``s, and a
``RunState`` resumed after ``state.approve`` / ``state.reject``.

- ``tools(client)`` is every current tool of ``ListTools`` (and ``check_operation``) as a
  ``FunctionTool``; ``tool(client, model_tool)`` is one. ``client`` is an ``opledger.Client`` (its calls
  run in a worker thread) or an ``opledger.AsyncClient`` made in the loop the runs use.
- For a tool that needs approval, ``needs_approval`` prepares the call (Prepare without execute): if
  the ledger has it awaiting a person, the run is interrupted; if a person already approved it (a
  retried run), it is not. A person decides in opledger (the approval console, or ``Approve`` with an
  approver's key); ``decide(client, state)`` reads each interrupted call's decision from the ledger and
  applies it to the ``RunState``: ``approve`` for an approved one, ``reject`` with a message that says
  nothing happened for a denied or cancelled one, nothing for one still undecided. ``Runner.run(agent,
  state)`` then runs the approved call: Prepare under the same key answers with the recorded
  operation (``replayed``), which is executed once; a resume run again replays its outcome.
- The idempotency key is ``derive_key(conversation=C, round=0, tool_call=call_id, tool=name)``: the
  SDK keeps the model's tool call id in the RunState (``to_json`` / ``from_json`` carry it), and ``C`` is
  the run context's ``conversation_id`` (a mapping key or an attribute of the context you pass to
  ``Runner.run``, which the RunState carries too); a run without one fails with a ValueError, since a
  model's call id alone is not unique across conversations. Pass ``key=`` to derive it otherwise.
- The tool's output is the runner's ``for_model()`` JSON text.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, TypeVar, Union

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from opledger.v1 import ledger_pb2

from .aio import AsyncClient
from .client import Client
from .errors import ApprovalExpired, OpledgerError
from .keys import derive_key
from .runner import (
    CHECK_OPERATION_TOOL,
    AsyncToolRunner,
    ModelTool,
    ToolOutcome,
    ToolRunner,
    decision_message,
    model_tools_of,
)

__all__ = ["tools", "tool", "decide", "default_key", "KeyFunc"]

KeyFunc = Callable[[Any, str, str, Dict[str, Any]], str]
"""KeyFunc derives a call's idempotency key from the run context's ``context``, the tool's name, the
model's tool call id and the arguments."""

T = TypeVar("T")


def _conversation(context: Any) -> str:
    value = context.get("conversation_id") if isinstance(context, Mapping) else getattr(context, "conversation_id", None)
    if not isinstance(value, str) or not value:
        raise ValueError(
            "opledger: the run context has no conversation_id: pass Runner.run(..., context={'conversation_id': …}) "
            "(or an object with that attribute), or make the tools with key=; a model's tool call id alone is not "
            "unique across conversations"
        )
    return value


def default_key(context: Any, tool: str, call_id: str, args: Dict[str, Any]) -> str:
    """default_key: the context's conversation_id and the model's tool call id (see the module doc)."""
    if not call_id:
        raise ValueError("opledger: the tool call has no call id to derive a key from")
    return derive_key(conversation=_conversation(context), round=0, tool_call=call_id, tool=tool)


class _Ledger:
    """_Ledger runs the adapter's ledger calls with either client, off the event loop for a sync one."""

    def __init__(self, client: Union[Client, AsyncClient], execute_wait: float, tool_version: Optional[str]) -> None:
        self.client = client
        self.version = tool_version
        if isinstance(client, AsyncClient):
            self.arunner: Optional[AsyncToolRunner] = AsyncToolRunner(client, execute_wait=execute_wait, tool_version=tool_version)
            self.runner: Optional[ToolRunner] = None
        else:
            self.arunner, self.runner = None, ToolRunner(client, execute_wait=execute_wait, tool_version=tool_version)

    async def _do(self, sync: Callable[[], T], coro: Callable[[], Awaitable[T]]) -> T:
        if self.arunner is not None:
            return await coro()
        return await asyncio.to_thread(sync)

    async def run(self, tool: str, args: str, key: str) -> ToolOutcome:
        return await self._do(lambda: self._sync().run(tool, args, key), lambda: self._async().run(tool, args, key))

    async def check(self, op_id: str) -> ToolOutcome:
        return await self._do(lambda: self._sync().check(op_id), lambda: self._async().check(op_id))

    async def prepared(self, tool: str, args: Dict[str, Any], key: str) -> ledger_pb2.Operation:
        """prepared is the operation the ledger records under key: Prepare without execute, which
        answers with the recorded operation when there is one (replayed)."""
        client = self.client
        if isinstance(client, AsyncClient):
            return (await client.prepare(tool, args, key, tool_version=self.version)).operation
        return await asyncio.to_thread(lambda: client.prepare(tool, args, key, tool_version=self.version).operation)

    def _sync(self) -> ToolRunner:
        assert self.runner is not None
        return self.runner

    def _async(self) -> AsyncToolRunner:
        assert self.arunner is not None
        return self.arunner


def _args(text: str) -> Dict[str, Any]:
    parsed = json.loads(text) if text.strip() else {}
    if not isinstance(parsed, dict):
        raise ValueError("the tool call's arguments must be a JSON object")
    return parsed


def tool(
    client: Union[Client, AsyncClient],
    model_tool: ModelTool,
    *,
    key: Optional[KeyFunc] = None,
    execute_wait: float = 30.0,
) -> FunctionTool:
    """tool is one declared tool (an element of ToolRunner.model_tools()) as a FunctionTool."""
    name = model_tool.name
    derive = key or default_key
    ledger = _Ledger(client, execute_wait, model_tool.version or None)

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        if name == CHECK_OPERATION_TOOL:
            op_id = _args(arguments).get("operation_id", "")
            return (await ledger.check(op_id if isinstance(op_id, str) else "")).for_model()
        # The runner reads the model's JSON text itself (numbers a double cannot carry are refused).
        key = derive(ctx.context, name, ctx.tool_call_id, _args(arguments))
        return (await ledger.run(name, arguments, key)).for_model()

    async def needs_approval(ctx: RunContextWrapper[Any], args: Dict[str, Any], call_id: str) -> bool:
        try:
            op = await ledger.prepared(name, args, derive(ctx.context, name, call_id, args))
        except ApprovalExpired:
            return True  # the approval lapsed: the ledger asks its approvers again
        except OpledgerError:
            return False  # refused or unreachable: the tool's own call reports it
        return op.state == ledger_pb2.STATE_AWAITING_APPROVAL

    return FunctionTool(
        name=name,
        description=model_tool.description,
        params_json_schema=model_tool.args_schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,  # the ledger's schema as it is; the ledger validates the arguments
        needs_approval=needs_approval if model_tool.approval_required else False,
    )


def tools(client: Client, *, key: Optional[KeyFunc] = None, execute_wait: float = 30.0) -> List[FunctionTool]:
    """tools is every current tool of the ledger (ListTools), and check_operation, as FunctionTools.
    With an AsyncClient, build them with ``tool()`` over ``await AsyncToolRunner(c).model_tools()``."""
    return [tool(client, t, key=key, execute_wait=execute_wait) for t in model_tools_of(client.list_tools())]


async def decide(
    client: Union[Client, AsyncClient],
    state: RunState[Any],
    *,
    key: Optional[KeyFunc] = None,
    context: Any = None,
) -> List[ToolApprovalItem]:
    """decide applies the ledger's decisions to the interruptions of ``state`` that are opledger calls
    (the tools that tools() made): approve for an approved call, reject with decision_message for a
    denied or cancelled one. It returns the interruptions still undecided (resume later; a run resumed
    with them is interrupted again). ``key`` must be the one the tools were made with, and ``context``
    the context the run was given (default: the one the state carries)."""
    derive = key or default_key
    if context is None:
        context = getattr(getattr(state, "_context", None), "context", None)
    ledger = _Ledger(client, 0, None)
    undecided: List[ToolApprovalItem] = []
    for item in state.get_interruptions():
        raw = item.raw_item
        call_id = getattr(raw, "call_id", None) or (raw.get("call_id") if isinstance(raw, dict) else None)
        arguments = getattr(raw, "arguments", None) or (raw.get("arguments") if isinstance(raw, dict) else None)
        name = item.tool_name or ""
        if not isinstance(call_id, str) or not isinstance(arguments, str) or not name:
            undecided.append(item)
            continue
        args = _args(arguments)
        try:
            op = await ledger.prepared(name, args, derive(context, name, call_id, args))
        except ApprovalExpired:
            undecided.append(item)
            continue
        message = decision_message(op)
        if message is not None:
            state.reject(item, rejection_message=message)
        elif op.state == ledger_pb2.STATE_AWAITING_APPROVAL:
            undecided.append(item)
        else:
            state.approve(item)  # approved: the resumed call executes it, or reports what it did
    return undecided
