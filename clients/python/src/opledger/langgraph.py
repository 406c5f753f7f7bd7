"""langgraph turns the ledger's declared tools into LangChain tools for LangGraph (the extra
``opledger[langgraph]``: langgraph 1.2), with approval mapped to LangGraph's ``interrupt``.

- ``tools(client)`` is every current tool of ``ListTools`` (and ``check_operation``) as a
  ``StructuredTool`` for a ``ToolNode`` (or any agent built on one); ``tool(client, model_tool)`` is one.
  ``client`` is an ``opledger.Client`` (a sync tool) or an ``opledger.AsyncClient`` (an async one).
- A call that awaits a person's approval calls ``interrupt()`` with the operation (``operation_id``,
  ``fingerprint``, ``tool``, ``args``, ``message``): the graph stops at its checkpoint. A person decides
  in opledger (the approval console, or ``Approve`` with an approver's key); the app resumes the thread
  with ``Command(resume=…)`` (the value is not read: the decision is the ledger's). LangGraph runs the
  tool again from its start on a resume, so the tool prepares the same call under the same key, which
  the ledger answers with the recorded operation (``replayed``): an approved one is executed once, a
  denied one is told to the model as such, and one still undecided interrupts again. A resume or a
  replay from the same checkpoint again (a retried worker, ``get_state_history`` time travel) replays
  the recorded outcome.
- The idempotency key is ``derive_key(conversation=thread_id, round=0, tool_call=tool_call_id,
  tool=name)``: the checkpointer keeps the thread and the model's message with its tool call ids, and a
  resume, a retry from a checkpoint or a replay re-runs that same tool call. A graph run without a
  ``thread_id`` (no checkpointer) fails with a ValueError: nothing would make the call the same one
  later. Pass ``key=`` to derive it otherwise.
- The tool's return value is the runner's ``for_model()`` JSON text; a denial or a cancellation comes
  back as ``failed`` with a message that names the approver's reason and says nothing happened.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

from langchain_core.tools import StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import interrupt

from .aio import AsyncClient
from .client import Client
from .fingerprint import struct_to_dict
from .keys import derive_key
from .runner import (
    CHECK_OPERATION_TOOL,
    AsyncToolRunner,
    AwaitingApproval,
    Failed,
    ModelTool,
    ToolOutcome,
    ToolRunner,
    decision_message,
    model_tools_of,
)

__all__ = ["tools", "tool", "default_key", "KeyFunc"]

KeyFunc = Callable[[ToolRuntime, str, Dict[str, Any]], str]
"""KeyFunc derives a call's idempotency key from the tool's runtime (its config, state and tool call
id), the tool's name and its arguments."""


def default_key(runtime: ToolRuntime, tool: str, args: Dict[str, Any]) -> str:
    """default_key: the checkpointer's thread id and the model's tool call id (see the module doc)."""
    thread = (runtime.config.get("configurable") or {}).get("thread_id")
    if not thread or not runtime.tool_call_id:
        raise ValueError(
            "opledger: the graph run has no thread_id (compile the graph with a checkpointer and pass "
            "config={'configurable': {'thread_id': …}}), or the tool call no id: nothing would make a resumed "
            "call the same one"
        )
    return derive_key(conversation=str(thread), round=0, tool_call=runtime.tool_call_id, tool=tool)


def _payload(outcome: AwaitingApproval) -> Dict[str, Any]:
    op = outcome.operation
    return {
        "operation_id": op.id,
        "fingerprint": op.fingerprint,
        "tool": op.tool,
        "args": struct_to_dict(op.args),
        "message": f"{op.tool} awaits a person's approval in opledger (operation {op.id}); resume the thread once they decided.",
    }


def _told(outcome: ToolOutcome) -> str:
    """_told is what the model reads: for_model, with the decision's words for a denial or a cancellation."""
    if isinstance(outcome, Failed) and outcome.operation is not None:
        words = decision_message(outcome.operation)
        if words is not None:
            return Failed(reason=outcome.reason, message=words, operation=outcome.operation).for_model()
    return outcome.for_model()


def tool(
    client: Union[Client, AsyncClient],
    model_tool: ModelTool,
    *,
    key: Optional[KeyFunc] = None,
    execute_wait: float = 30.0,
) -> StructuredTool:
    """tool is one declared tool (an element of ToolRunner.model_tools()) as a StructuredTool."""
    name = model_tool.name
    derive = key or default_key
    version = model_tool.version or None
    if isinstance(client, AsyncClient):
        arunner = AsyncToolRunner(client, execute_wait=execute_wait, tool_version=version)

        async def acall(runtime: ToolRuntime, **args: Any) -> str:
            if name == CHECK_OPERATION_TOOL:
                return _told(await arunner.check(str(args.get("operation_id", ""))))
            k = derive(runtime, name, args)
            outcome = await arunner.run(name, args, k)
            while isinstance(outcome, AwaitingApproval):
                interrupt(_payload(outcome))  # returns only on a resume; the ledger then says what was decided
                outcome = await arunner.run(name, args, k)
            return _told(outcome)

        return StructuredTool.from_function(
            coroutine=acall, name=name, description=model_tool.description, args_schema=model_tool.args_schema
        )
    runner = ToolRunner(client, execute_wait=execute_wait, tool_version=version)

    def call(runtime: ToolRuntime, **args: Any) -> str:
        if name == CHECK_OPERATION_TOOL:
            return _told(runner.check(str(args.get("operation_id", ""))))
        k = derive(runtime, name, args)
        outcome = runner.run(name, args, k)
        while isinstance(outcome, AwaitingApproval):
            interrupt(_payload(outcome))  # returns only on a resume; the ledger then says what was decided
            outcome = runner.run(name, args, k)
        return _told(outcome)

    return StructuredTool.from_function(func=call, name=name, description=model_tool.description, args_schema=model_tool.args_schema)


def tools(client: Client, *, key: Optional[KeyFunc] = None, execute_wait: float = 30.0) -> List[StructuredTool]:
    """tools is every current tool of the ledger (ListTools), and check_operation, as StructuredTools.
    With an AsyncClient, build them with ``tool()`` over ``await AsyncToolRunner(c).model_tools()``."""
    return [tool(client, t, key=key, execute_wait=execute_wait) for t in model_tools_of(client.list_tools())]
