"""runner runs one tool call of an agent through the ledger end to end, and builds the model's
tool list from ListTools.

ToolRunner (for Client) and AsyncToolRunner (for AsyncClient) do, for one call: Prepare; the
approval (wait up to ``approval_wait`` seconds for a person's decision, after calling
``on_approval_required``, or answer AwaitingApproval at once); Execute with a wait; and one typed
final answer:

- Succeeded: the effect happened once; ``result`` is the downstream's answer.
- Failed: nothing happened (the downstream refused it, a person denied it, it was cancelled, or the
  ledger refused the request: ARGS_INVALID, TOOL_UNKNOWN …). The agent may correct the call and make
  it under a new key, except when a refusal of the request carries an ``operation``: its key already
  names an earlier call, which may have taken effect (MESSAGE_KEY_NAMES_EARLIER_CALL).
- OutcomeUnknown: the effect may or may not have happened. Never make it again under a new key;
  a later run with the same key returns the outcome once it is known.
- AwaitingApproval: a person has to decide first (also when an approval given earlier expired before
  the call ran); run the same call (same key) again later.

OutcomeUnknown is not a Failed (the four classes share no base class), so ``isinstance(out,
Failed)`` can never mistake one for the other. ``for_model()`` renders any of them as the JSON
text to hand the model, byte for byte the same in every opledger client.

Running the same call again (same tool, args and idempotency key) is how an agent resumes it
after AwaitingApproval, after OutcomeUnknown or after a crash: the ledger replays the operation,
and the run continues from its state without a second effect. A call that needs no approval takes
one request (prepare with execute, the one-call path).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Union

from google.protobuf import struct_pb2

from opledger.v1 import ledger_pb2

from .aio import AsyncClient
from .client import Client
from .errors import (
    ApprovalExpired,
    ApprovalRequired,
    ArgsInvalid,
    ArgsTooLarge,
    FieldInvalid,
    IdempotencyKeyReused,
    LimitExceeded,
    OpledgerError,
    OperationCancelled,
    OperationDuplicate,
    OperationNotFound,
    OperationRejected,
    OperationSuperseded,
    PolicyDenied,
    ToolUnknown,
    ToolVersionUnknown,
    operation_error_reason,
)
from . import _numbers
from .edit import MESSAGE_OPERATION_DUPLICATE, Edit, model_description, refusal_message
from .fingerprint import canonicalize, struct_to_dict

#: MESSAGE_AWAITING_APPROVAL is what for_model tells the model about a call that waits for a person.
MESSAGE_AWAITING_APPROVAL = (
    "A person must approve this call before it can run; it is recorded under operation_id. "
    "Do not call the tool again for it: a new call would be a second, separate request. "
    "Call check_operation with the operation_id later to learn its outcome."
)
#: MESSAGE_OUTCOME_UNKNOWN is what for_model tells the model about a call whose effect is unknown.
MESSAGE_OUTCOME_UNKNOWN = (
    "The outcome is not known yet: the request may have reached the service. "
    "Do not call the tool again for it, or do it another way: a new call would be a second, separate request. "
    "Call check_operation with the operation_id later to learn its outcome."
)
#: MESSAGE_CHECK_UNKNOWN_OPERATION is the message of a check_operation call whose operation_id the
#: ledger does not know.
MESSAGE_CHECK_UNKNOWN_OPERATION = "No operation has this id. This says nothing about the earlier call: do not make it again; pass the operation_id its answer gave."

#: CHECK_OPERATION_TOOL is the runner's own model tool (as the MCP gateway has): it reports an
#: earlier call's outcome by its operation_id, and runs it if a person approved it since; it never
#: makes a new call. The messages of AwaitingApproval and OutcomeUnknown point the model to it.
CHECK_OPERATION_TOOL = "check_operation"

#: MESSAGE_KEY_NAMES_EARLIER_CALL (with the earlier call's state, as state_words gives it) is what
#: for_model tells the model about a call refused under a key that already names an earlier call
#: (IDEMPOTENCY_KEY_REUSED, or a tool, version or args refused), which may have taken effect.
MESSAGE_KEY_NAMES_EARLIER_CALL = (
    "This call was not made: its idempotency key already names an earlier call, which is {state}. "
    "If that was this same action, it is done or under way: do not make it again under a new key."
)


#: MESSAGE_KEY_NAMES_UNDONE_CALL is MESSAGE_KEY_NAMES_EARLIER_CALL for an earlier call that did not
#: take effect (failed, rejected, cancelled).
MESSAGE_KEY_NAMES_UNDONE_CALL = (
    "This call was not made: its idempotency key already names an earlier call, which is {state} and did not take effect."
)

_UNDONE = (ledger_pb2.STATE_FAILED, ledger_pb2.STATE_REJECTED, ledger_pb2.STATE_CANCELLED)


def state_words(state: int) -> str:
    """state_words is how the model's texts name a state: "outcome unknown" for STATE_OUTCOME_UNKNOWN,
    and "in a state this client does not know" for one newer than this client."""
    try:
        name = ledger_pb2.State.Name(state)
    except ValueError:
        name = ""
    if not name or state == ledger_pb2.STATE_UNSPECIFIED:
        return "in a state this client does not know"
    return name.removeprefix("STATE_").replace("_", " ").lower()


def decision_message(op: ledger_pb2.Operation) -> Optional[str]:
    """decision_message is what a framework adapter tells the model about a call that a person's decision
    or a cancellation ended before it ran (opledger.pydantic_ai, opledger.openai_agents,
    opledger.langgraph): the approver's denial with its reason, or the cancellation; None for any
    other state."""
    if op.state == ledger_pb2.STATE_REJECTED:
        reason = op.approval.reason
        return (
            f"An approver denied {op.tool} (operation {op.id})" + (f": {reason}" if reason else "")
            + ". Nothing happened. Tell the user; do not try to get around the decision."
        )
    if op.state == ledger_pb2.STATE_CANCELLED:
        return f"{op.tool} (operation {op.id}) was cancelled before it ran. Nothing happened. Tell the user."
    return None


def key_names_earlier_call(state: int) -> str:
    """key_names_earlier_call is the message of a refusal under a key that names an earlier call in
    that state."""
    template = MESSAGE_KEY_NAMES_UNDONE_CALL if state in _UNDONE else MESSAGE_KEY_NAMES_EARLIER_CALL
    return template.format(state=state_words(state))


# The refusals of the request itself, before anything was recorded: under a key that already
# names an earlier call, the refusal carries it.
_KEYED = (IdempotencyKeyReused, ToolUnknown, ToolVersionUnknown, ArgsInvalid, ArgsTooLarge)

# The refusals that are answers about the call itself: nothing was done.
_REFUSALS = (
    ArgsInvalid,
    ArgsTooLarge,
    ToolUnknown,
    ToolVersionUnknown,
    IdempotencyKeyReused,
    OperationRejected,
    OperationCancelled,
    PolicyDenied,
    LimitExceeded,
    OperationDuplicate,
)

# The refusals that name another call than this one when they carry an operation_id: the key's
# earlier call (_KEYED; POLICY_DENIED unless it names this call, refused at its claim), or the same
# action under another key (OPERATION_DUPLICATE). That call may have taken effect.
_NAMES_OTHER = _KEYED + (PolicyDenied, OperationDuplicate)

# MAX_EDITS bounds the supersede links a run follows (an edit of an edited operation, …), and the
# way back to the call as made.
_MAX_EDITS = 8

ToolArgs = Union[Mapping[str, Any], struct_pb2.Struct, str, None]
"""ToolArgs are a tool call's arguments: a dict, a Struct, or the model's JSON text."""


def _for_model(obj: Dict[str, Any], edit: Optional[Edit] = None) -> str:
    """_for_model renders obj, with an approver's edit as its "edited" member (Edit.for_model)."""
    if edit is not None:
        obj["edited"] = edit.for_model(obj["status"], obj["operation_id"])
    return canonicalize(obj)


@dataclass(frozen=True)
class Succeeded:
    """Succeeded is a call whose effect happened once."""

    operation: ledger_pb2.Operation
    #: result is the downstream's answer (Operation.result) as a dict.
    result: Dict[str, Any] = field(default_factory=dict)
    #: edit, when set, says that an approver changed the arguments: what ran is edit.args.
    edit: Optional[Edit] = None

    @property
    def operation_id(self) -> str:
        return self.operation.id

    def for_model(self) -> str:
        """for_model: {"edited" (with an edit), "operation_id", "result", "status": "succeeded"}
        (RFC 8785 JSON)."""
        return _for_model({"status": "succeeded", "operation_id": self.operation_id, "result": self.result}, self.edit)


@dataclass(frozen=True)
class Failed:
    """Failed is a call that definitively did not happen; ``reason`` says why
    (DOWNSTREAM_REJECTED, OPERATION_REJECTED, ARGS_INVALID …). ``operation`` is None when the
    ledger refused the request before recording one."""

    reason: str
    message: str
    operation: Optional[ledger_pb2.Operation] = None
    #: edit, when set, says that an approver changed the arguments of the call that failed.
    edit: Optional[Edit] = None

    @property
    def operation_id(self) -> str:
        return self.operation.id if self.operation is not None else ""

    def for_model(self) -> str:
        """for_model: {"edited" (with an edit), "message", "operation_id" (when there is one),
        "reason", "status": "failed"}."""
        obj: Dict[str, Any] = {"status": "failed", "reason": self.reason, "message": self.message}
        if self.operation_id:
            obj["operation_id"] = self.operation_id
        return _for_model(obj, self.edit)


@dataclass(frozen=True)
class OutcomeUnknown:
    """OutcomeUnknown is a call that may or may not have taken effect (OUTCOME_UNKNOWN, or still
    EXECUTING by another caller: ``pending``). Never make it again under a new key."""

    operation: ledger_pb2.Operation
    pending: bool = False
    #: edit, when set, says that an approver changed the arguments of the call that was sent.
    edit: Optional[Edit] = None

    @property
    def operation_id(self) -> str:
        return self.operation.id

    def for_model(self) -> str:
        """for_model: {"edited" (with an edit), "message", "operation_id", "status": "outcome_unknown"}."""
        return _for_model(
            {"status": "outcome_unknown", "operation_id": self.operation_id, "message": MESSAGE_OUTCOME_UNKNOWN},
            self.edit,
        )


@dataclass(frozen=True)
class AwaitingApproval:
    """AwaitingApproval is a call that waits for a person's decision; run it again later."""

    operation: ledger_pb2.Operation
    #: edit, when set, says that an approver changed the arguments, and the edited call awaits
    #: another approval (a quorum).
    edit: Optional[Edit] = None

    @property
    def operation_id(self) -> str:
        return self.operation.id

    def for_model(self) -> str:
        """for_model: {"edited" (with an edit), "message", "operation_id", "status": "awaiting_approval"}."""
        return _for_model(
            {"status": "awaiting_approval", "operation_id": self.operation_id, "message": MESSAGE_AWAITING_APPROVAL},
            self.edit,
        )


ToolOutcome = Union[Succeeded, Failed, OutcomeUnknown, AwaitingApproval]
"""ToolOutcome is a run's final answer."""


@dataclass(frozen=True)
class ModelTool:
    """ModelTool is one tool as a model sees it. Put it in the model's tool list (OpenAI:
    {"type": "function", "function": {"name", "description", "parameters": args_schema}};
    Anthropic: {"name", "description", "input_schema": args_schema})."""

    name: str
    description: str
    #: args_schema is the JSON Schema of the arguments, which the ledger enforces on Prepare.
    args_schema: Dict[str, Any]
    version: str
    approval_required: bool
    #: effect is "read_only", "idempotent" or "side_effect".
    effect: str


_EFFECTS = {
    ledger_pb2.EFFECT_READ_ONLY: "read_only",
    ledger_pb2.EFFECT_IDEMPOTENT: "idempotent",
    ledger_pb2.EFFECT_SIDE_EFFECT: "side_effect",
}


def check_operation_model_tool() -> ModelTool:
    """check_operation_model_tool is the model tool model_tools adds for CHECK_OPERATION_TOOL."""
    return ModelTool(
        name=CHECK_OPERATION_TOOL,
        description=(
            "Report the outcome of an earlier tool call by the operation_id its answer gave, and run it if a "
            "person approved it since. It never makes a new call: use it, not the original tool, for a call "
            "that awaited approval or whose outcome was not known."
        ),
        args_schema={
            "type": "object",
            "additionalProperties": False,
            "required": ["operation_id"],
            "properties": {"operation_id": {"type": "string", "description": "the operation_id of an earlier answer"}},
        },
        version="",
        approval_required=False,
        effect="idempotent",
    )


def model_tools_of(resp: ledger_pb2.ListToolsResponse) -> List[ModelTool]:
    """model_tools_of keeps the current version of each tool of a ListTools answer, then adds
    check_operation_model_tool(). A tool's description carries its policy's summary
    (model_description). A ledger tool named check_operation is a ValueError: rename it in the tools
    file."""
    if any(t.current and t.name == CHECK_OPERATION_TOOL for t in resp.tools):
        raise ValueError(
            f"the ledger has a tool named {CHECK_OPERATION_TOOL!r}, which is the runner's own tool; rename it in the tools file"
        )
    return [
        ModelTool(
            name=t.name,
            description=model_description(t.description, t.policy.summary),
            args_schema=struct_to_dict(t.args_schema),
            version=t.version,
            approval_required=t.approval_required,
            effect=_EFFECTS.get(t.effect, ""),
        )
        for t in resp.tools
        if t.current
    ] + [check_operation_model_tool()]


def _operation_id_arg(args: ToolArgs) -> str:
    """_operation_id_arg reads check_operation's operation_id from arguments in any shape run takes."""
    try:
        parsed = _args(args)
    except ValueError:
        return ""
    if isinstance(parsed, struct_pb2.Struct):
        parsed = struct_to_dict(parsed)
    value = parsed.get("operation_id") if isinstance(parsed, Mapping) else None
    if not isinstance(value, str):
        return ""
    try:
        value.encode("utf-8")  # a lone surrogate has no UTF-8 form: no operation has it
    except UnicodeEncodeError:
        return ""
    return value


def _args(args: ToolArgs) -> Union[Mapping[str, Any], struct_pb2.Struct, None]:
    if isinstance(args, str):
        parsed = _numbers.loads(args) if args.strip() else {}
        if not isinstance(parsed, dict):
            raise ValueError("the tool call's arguments must be a JSON object")
        return parsed
    return args


def final(op: ledger_pb2.Operation) -> ToolOutcome:
    """final maps the operation an Execute answered with to a ToolOutcome."""
    if op.state == ledger_pb2.STATE_SUCCEEDED:
        return Succeeded(operation=op, result=struct_to_dict(op.result))
    if op.state == ledger_pb2.STATE_FAILED:
        reason = operation_error_reason(op) or "DOWNSTREAM_REJECTED"
        return Failed(reason=reason, message=op.error.message, operation=op)
    if op.state == ledger_pb2.STATE_OUTCOME_UNKNOWN:
        return OutcomeUnknown(operation=op)
    if op.state in (ledger_pb2.STATE_EXECUTING, ledger_pb2.STATE_READY):
        return OutcomeUnknown(operation=op, pending=True)
    raise RuntimeError(f"opledger: Execute answered with state {ledger_pb2.State.Name(op.state)}")


def _names_operation(err: OpledgerError) -> bool:
    """_names_operation: the refusal names an operation: the one-call path's own, or the earlier call
    a used key names (_KEYED)."""
    return bool(err.metadata.get("operation_id"))


def _with_operation(refused: Failed, err: OpledgerError, op: ledger_pb2.Operation) -> Failed:
    """_with_operation: the refusal with the operation it names; a _KEYED one (and a POLICY_DENIED
    naming another call than this one, which its claim REJECTED) says that the key's earlier call
    may have taken effect, an OPERATION_DUPLICATE that the same action is recorded under another
    key."""
    if isinstance(err, OperationDuplicate):
        return replace(refused, operation=op, message=MESSAGE_OPERATION_DUPLICATE.format(state=state_words(op.state)))
    if isinstance(err, _KEYED) or (isinstance(err, PolicyDenied) and op.state != ledger_pb2.STATE_REJECTED):
        return replace(refused, operation=op, message=key_names_earlier_call(op.state))
    return replace(refused, operation=op)


def _unsettled(refused: Failed, op: ledger_pb2.Operation) -> ToolOutcome:
    """_unsettled: an Execute of a recorded operation refused for a reason other than a denial, a
    cancellation or the policy in force at its claim (POLICY_DENIED: now REJECTED) (a replica
    without the tool's version, say) leaves the operation unsettled, and "failed" would say nothing
    happened: pending (run's, after an approval, and check's alike)."""
    if refused.reason not in ("OPERATION_REJECTED", "OPERATION_CANCELLED", "POLICY_DENIED"):
        return OutcomeUnknown(operation=op, pending=True)
    return refused


def _refusal(err: OpledgerError, op: Optional[ledger_pb2.Operation]) -> Optional[Failed]:
    if isinstance(err, _REFUSALS):
        return Failed(reason=err.reason or "", message=refusal_message(err.reason or "", err.message), operation=op)
    return None


def _superseded_by(err: OpledgerError) -> str:
    """_superseded_by is the operation an OPERATION_SUPERSEDED refusal names, or ""."""
    return err.metadata.get("superseded_by", "") if isinstance(err, OperationSuperseded) else ""


def _followed(op: ledger_pb2.Operation) -> bool:
    """_followed: an approver approved op with edits; the edited operation is the one to run."""
    return op.state == ledger_pb2.STATE_REJECTED and bool(op.superseded_by)


def _edited(out: ToolOutcome, chain: List[ledger_pb2.Operation]) -> ToolOutcome:
    """_edited: the outcome with the approver's edit from the call as made (chain[-1], the root)
    to the outcome's operation."""
    op, root = out.operation, chain[-1]
    if op is None or root.id == op.id:
        return out
    return replace(out, edit=Edit.of(root.id, struct_to_dict(root.args), struct_to_dict(op.args)))


def _hops(hops: int, operation_id: str) -> int:
    if hops >= _MAX_EDITS:
        raise RuntimeError(f"opledger: more than {_MAX_EDITS} approver edits in a row; stopped at {operation_id}")
    return hops + 1


class ToolRunner:
    """ToolRunner runs tool calls with a Client (an agent's key); see the module doc.

    Args:
        client: the agent's Client.
        approval_wait: seconds to wait for a person's decision on a call that needs approval
            (polling get) before answering AwaitingApproval; 0 answers at once.
        on_approval_required: called with the operation each time a run finds it awaiting
            approval (a repeated run too), before waiting: notify the approvers, or ask a person
            in-process and approve with an approver's client. Its exceptions propagate.
        execute_wait: seconds Execute waits when another caller is executing the operation.
        tool_version: pin every call to this tool version (default: the tool's current one).
    """

    def __init__(
        self,
        client: Client,
        *,
        approval_wait: float = 0.0,
        on_approval_required: Optional[Callable[[ledger_pb2.Operation], None]] = None,
        execute_wait: float = 30.0,
        tool_version: Optional[str] = None,
    ) -> None:
        self._client = client
        self._approval_wait = approval_wait
        self._hook = on_approval_required
        self._execute_wait = execute_wait
        self._tool_version = tool_version

    def model_tools(self) -> List[ModelTool]:
        """model_tools returns the tools the ledger enforces, current versions only."""
        return model_tools_of(self._client.list_tools())

    def run(self, tool: str, args: ToolArgs, idempotency_key: str) -> ToolOutcome:
        """run runs one tool call to its final answer. ``idempotency_key`` is the call's business
        identity (derive_key); ``args`` a dict, a Struct or the model's JSON text.

        Raises OpledgerError for what the runtime, not the model, must handle (the ledger
        unreachable after the client's retries, a bad key, a hook's exception); the same run
        may simply be repeated. Refusals of the call itself come back as Failed. The tool
        ``check_operation`` (CHECK_OPERATION_TOOL) is check's."""
        if tool == CHECK_OPERATION_TOOL:
            return self.check(_operation_id_arg(args))
        # The one-call path: prepare also executes a call that needs no approval.
        try:
            op = self._client.prepare(
                tool, _args(args), idempotency_key, tool_version=self._tool_version, execute=True, wait=self._execute_wait
            ).operation
        except ApprovalExpired as err:
            # The approval lapsed before the call ran: the ledger put the operation back to
            # AWAITING_APPROVAL and asked its approvers again. The same call waits for a new decision.
            op = self._reawaiting(err, None)
        except OperationSuperseded as err:
            # The key names a call an approver approved with edits: the edited one is the one to run.
            if not _superseded_by(err):
                raise
            op = self._client.get(_superseded_by(err)).operation
        except OpledgerError as err:
            return self._refused(err, None)
        return self._carry_on(op, check=False)

    def check(self, operation_id: str) -> ToolOutcome:
        """check is the check_operation tool: the outcome of an earlier call by its operation id. An
        unknown outcome is looked up at the downstream first (reconcile); an operation approved since,
        or executing now, is executed or waited for, as run would; anything else is answered as it
        stands. It never prepares anything. An id the ledger does not know is a Failed."""
        try:
            op = self._client.get(operation_id).operation
        except (OperationNotFound, FieldInvalid) as err:
            return Failed(reason=err.reason or "", message=MESSAGE_CHECK_UNKNOWN_OPERATION, operation=None)
        if op.state == ledger_pb2.STATE_OUTCOME_UNKNOWN:
            try:  # the ledger may know more now
                op = self._client.reconcile(op.id).operation
            except OpledgerError:
                pass
        return self._carry_on(op, check=True)

    def _carry_on(self, op: ledger_pb2.Operation, *, check: bool) -> ToolOutcome:
        """_carry_on takes the operation to its answer; one an approver approved with edits
        (REJECTED with superseded_by, or an Execute answered OPERATION_SUPERSEDED) is followed to
        the edited one, which is run (it may still await another approver), and the answer says
        what the approver changed (edit)."""
        out = self._settle(op, check=check)
        if out.operation is None or not out.operation.supersedes:
            return out
        chain = [out.operation]
        while chain[-1].supersedes:
            _hops(len(chain) - 1, out.operation.id)
            chain.append(self._client.get(chain[-1].supersedes).operation)
        return _edited(out, chain)

    def _settle(self, op: ledger_pb2.Operation, *, check: bool) -> ToolOutcome:
        hops = 0
        while True:
            if _followed(op):
                hops = _hops(hops, op.superseded_by)
                op = self._client.get(op.superseded_by).operation
                continue
            if op.state == ledger_pb2.STATE_AWAITING_APPROVAL:
                op = self._await_decision(op)
                if _followed(op):
                    continue  # approved with edits meanwhile: follow the link
                if op.state == ledger_pb2.STATE_AWAITING_APPROVAL:
                    return AwaitingApproval(operation=op)
            elif op.state == ledger_pb2.STATE_EXECUTING and check:
                pass  # a check waits for its outcome
            elif op.state in (ledger_pb2.STATE_REJECTED, ledger_pb2.STATE_CANCELLED):
                pass  # Execute answers it as a refusal (a Failed with the operation)
            elif op.state != ledger_pb2.STATE_READY:  # READY: not executed (a server without the one-call path)
                return final(op)
            try:
                done = self._client.execute(op.id, wait=self._execute_wait)
            except ApprovalRequired:
                return AwaitingApproval(operation=op)
            except ApprovalExpired as err:
                return AwaitingApproval(operation=self._reawaiting(err, op))
            except OperationSuperseded as err:
                if not _superseded_by(err):
                    raise
                hops = _hops(hops, _superseded_by(err))
                op = self._client.get(_superseded_by(err)).operation
                continue
            except OpledgerError as err:
                return _unsettled(self._refused(err, op), op)
            return final(done.operation)

    def _reawaiting(self, err: ApprovalExpired, op: Optional[ledger_pb2.Operation]) -> ledger_pb2.Operation:
        """_reawaiting reads the operation an APPROVAL_EXPIRED refusal is about as it stands now (back
        in AWAITING_APPROVAL). An expired approval is never Failed: the call is the same and must not be
        made again under a new key."""
        op_id = err.metadata.get("operation_id") or (op.id if op is not None else "")
        if not op_id:
            raise err
        return self._client.get(op_id).operation

    def _refused(self, err: OpledgerError, op: Optional[ledger_pb2.Operation]) -> Failed:
        refused = _refusal(err, op)
        if refused is None:
            raise err
        if refused.operation is None and _names_operation(err):
            try:
                refused = _with_operation(refused, err, self._client.get(err.metadata["operation_id"]).operation)
            except OpledgerError:
                if isinstance(err, _NAMES_OTHER):
                    raise err  # the other call cannot be read now: not a final answer
        return refused

    def _await_decision(self, op: ledger_pb2.Operation) -> ledger_pb2.Operation:
        if self._hook is not None:
            self._hook(op)
        elif self._approval_wait <= 0:
            return op
        deadline = time.monotonic() + self._approval_wait
        interval = 0.2
        while True:
            op = self._client.get(op.id).operation
            left = deadline - time.monotonic()
            if op.state != ledger_pb2.STATE_AWAITING_APPROVAL or left <= 0:
                return op
            time.sleep(min(interval, left))
            interval = min(interval * 1.5, 2.0)


class AsyncToolRunner:
    """AsyncToolRunner is ToolRunner for an AsyncClient; ``on_approval_required`` may be a plain
    function or a coroutine function."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        approval_wait: float = 0.0,
        on_approval_required: Optional[Callable[[ledger_pb2.Operation], Optional[Awaitable[None]]]] = None,
        execute_wait: float = 30.0,
        tool_version: Optional[str] = None,
    ) -> None:
        self._client = client
        self._approval_wait = approval_wait
        self._hook = on_approval_required
        self._execute_wait = execute_wait
        self._tool_version = tool_version

    async def model_tools(self) -> List[ModelTool]:
        """model_tools: see ToolRunner.model_tools."""
        return model_tools_of(await self._client.list_tools())

    async def run(self, tool: str, args: ToolArgs, idempotency_key: str) -> ToolOutcome:
        """run: see ToolRunner.run."""
        if tool == CHECK_OPERATION_TOOL:
            return await self.check(_operation_id_arg(args))
        try:
            prepared = await self._client.prepare(
                tool, _args(args), idempotency_key, tool_version=self._tool_version, execute=True, wait=self._execute_wait
            )
        except ApprovalExpired as err:
            op = await self._reawaiting(err, None)  # see ToolRunner.run
        except OperationSuperseded as err:
            if not _superseded_by(err):
                raise
            op = (await self._client.get(_superseded_by(err))).operation  # see ToolRunner.run
        except OpledgerError as err:
            return await self._refused(err, None)
        else:
            op = prepared.operation
        return await self._carry_on(op, check=False)

    async def check(self, operation_id: str) -> ToolOutcome:
        """check: see ToolRunner.check."""
        try:
            op = (await self._client.get(operation_id)).operation
        except (OperationNotFound, FieldInvalid) as err:
            return Failed(reason=err.reason or "", message=MESSAGE_CHECK_UNKNOWN_OPERATION, operation=None)
        if op.state == ledger_pb2.STATE_OUTCOME_UNKNOWN:
            try:  # the ledger may know more now
                op = (await self._client.reconcile(op.id)).operation
            except OpledgerError:
                pass
        return await self._carry_on(op, check=True)

    async def _carry_on(self, op: ledger_pb2.Operation, *, check: bool) -> ToolOutcome:
        """_carry_on: see ToolRunner._carry_on."""
        out = await self._settle(op, check=check)
        if out.operation is None or not out.operation.supersedes:
            return out
        chain = [out.operation]
        while chain[-1].supersedes:
            _hops(len(chain) - 1, out.operation.id)
            chain.append((await self._client.get(chain[-1].supersedes)).operation)
        return _edited(out, chain)

    async def _settle(self, op: ledger_pb2.Operation, *, check: bool) -> ToolOutcome:
        hops = 0
        while True:
            if _followed(op):
                hops = _hops(hops, op.superseded_by)
                op = (await self._client.get(op.superseded_by)).operation
                continue
            if op.state == ledger_pb2.STATE_AWAITING_APPROVAL:
                op = await self._await_decision(op)
                if _followed(op):
                    continue
                if op.state == ledger_pb2.STATE_AWAITING_APPROVAL:
                    return AwaitingApproval(operation=op)
            elif op.state == ledger_pb2.STATE_EXECUTING and check:
                pass  # a check waits for its outcome
            elif op.state in (ledger_pb2.STATE_REJECTED, ledger_pb2.STATE_CANCELLED):
                pass  # Execute answers it as a refusal (a Failed with the operation)
            elif op.state != ledger_pb2.STATE_READY:
                return final(op)
            try:
                done = await self._client.execute(op.id, wait=self._execute_wait)
            except ApprovalRequired:
                return AwaitingApproval(operation=op)
            except ApprovalExpired as err:
                return AwaitingApproval(operation=await self._reawaiting(err, op))
            except OperationSuperseded as err:
                if not _superseded_by(err):
                    raise
                hops = _hops(hops, _superseded_by(err))
                op = (await self._client.get(_superseded_by(err))).operation
                continue
            except OpledgerError as err:
                return _unsettled(await self._refused(err, op), op)
            return final(done.operation)

    async def _reawaiting(self, err: ApprovalExpired, op: Optional[ledger_pb2.Operation]) -> ledger_pb2.Operation:
        """_reawaiting: see ToolRunner._reawaiting."""
        op_id = err.metadata.get("operation_id") or (op.id if op is not None else "")
        if not op_id:
            raise err
        return (await self._client.get(op_id)).operation

    async def _refused(self, err: OpledgerError, op: Optional[ledger_pb2.Operation]) -> Failed:
        refused = _refusal(err, op)
        if refused is None:
            raise err
        if refused.operation is None and _names_operation(err):
            try:
                got = await self._client.get(err.metadata["operation_id"])
                refused = _with_operation(refused, err, got.operation)
            except OpledgerError:
                if isinstance(err, _NAMES_OTHER):
                    raise err  # the other call cannot be read now: not a final answer
        return refused

    async def _await_decision(self, op: ledger_pb2.Operation) -> ledger_pb2.Operation:
        if self._hook is not None:
            pending = self._hook(op)
            if inspect.isawaitable(pending):
                await pending
        elif self._approval_wait <= 0:
            return op
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._approval_wait
        interval = 0.2
        while True:
            op = (await self._client.get(op.id)).operation
            left = deadline - loop.time()
            if op.state != ledger_pb2.STATE_AWAITING_APPROVAL or left <= 0:
                return op
            await asyncio.sleep(min(interval, left))
            interval = min(interval * 1.5, 2.0)
