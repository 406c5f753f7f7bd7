"""client is a small synchronous client for opledger.v1.LedgerService (aio.py is the same
client for asyncio).

It adds what every caller otherwise gets wrong on its own: the API key on every call, typed
errors (errors.py), and exactly one bounded retry policy that resends the same request with the
same idempotency key (retry.py). Results are the generated response messages
(opledger.v1.ledger_pb2).
"""

from __future__ import annotations

import datetime
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union, cast

import grpc
from google.protobuf import duration_pb2, struct_pb2

from opledger.v1 import ledger_pb2, ledger_pb2_grpc

from .errors import from_rpc_error
from ._numbers import check_value
from .retry import RetryPolicy, call_with_retry

#: DEFAULT_TIMEOUT is the deadline of one attempt, in seconds.
DEFAULT_TIMEOUT = 30.0

# Execute with a wait needs a deadline beyond the wait, or the client would give up on an answer
# the server is about to send.
_WAIT_MARGIN = 10.0

R = TypeVar("R")

Decision = Union[str, int]
State = Union[str, int]
Wait = Union[float, int, datetime.timedelta, duration_pb2.Duration, None]


def _decision(d: Decision) -> ledger_pb2.Decision:
    if isinstance(d, bool):
        raise TypeError("decision must be 'approve', 'deny' or a ledger_pb2.Decision value")
    if isinstance(d, int):
        return cast(ledger_pb2.Decision, d)
    name = d.strip().upper()
    if not name.startswith("DECISION_"):
        name = "DECISION_" + name
    try:
        return cast(ledger_pb2.Decision, ledger_pb2.Decision.Value(name))
    except ValueError:
        raise ValueError(f"unknown decision {d!r}: use 'approve' or 'deny'") from None


def _state(s: State) -> ledger_pb2.State:
    if isinstance(s, bool):
        raise TypeError("state must be a name like 'awaiting_approval' or a ledger_pb2.State value")
    if isinstance(s, int):
        return cast(ledger_pb2.State, s)
    name = s.strip().upper()
    if not name.startswith("STATE_"):
        name = "STATE_" + name
    try:
        return cast(ledger_pb2.State, ledger_pb2.State.Value(name))
    except ValueError:
        raise ValueError(f"unknown state {s!r}, e.g. 'awaiting_approval'") from None


def _duration(w: Wait) -> Tuple[Optional[duration_pb2.Duration], float]:
    if w is None:
        return None, 0.0
    d = duration_pb2.Duration()
    if isinstance(w, duration_pb2.Duration):
        d.CopyFrom(w)
    elif isinstance(w, datetime.timedelta):
        d.FromTimedelta(w)
    else:
        d.FromNanoseconds(int(round(float(w) * 1e9)))
    return d, d.ToTimedelta().total_seconds()


Args = Union[Mapping[str, Any], struct_pb2.Struct, None]


def _struct(args: Args) -> Optional[struct_pb2.Struct]:
    if args is None:
        return None
    if isinstance(args, struct_pb2.Struct):
        return args
    check_value(args)
    s = struct_pb2.Struct()
    s.update(args)
    return s


def _channel_options(options: Sequence[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    # The client is the one retry owner: gRPC's built-in retries would multiply attempts.
    return [("grpc.enable_retries", 0), *options]


def _credentials(
    plaintext: bool, credentials: Optional[grpc.ChannelCredentials]
) -> Optional[grpc.ChannelCredentials]:
    """_credentials returns None for plaintext, else the TLS credentials (the system roots by
    default): TLS unless the caller asks for plaintext, as in every opledger client."""
    if plaintext:
        if credentials is not None:
            raise ValueError("plaintext=True and credentials exclude each other")
        return None
    return credentials if credentials is not None else grpc.ssl_channel_credentials()


def _auth(api_key: str) -> Tuple[str, str]:
    if not api_key:
        raise ValueError("api_key must not be empty")
    return ("authorization", "Bearer " + api_key)


def prepare_request(
    tool: str, args: Args, tool_version: Optional[str], execute: bool = False, wait: Wait = None
) -> Tuple[ledger_pb2.PrepareRequest, float]:
    """prepare_request builds a PrepareRequest (shared by Client and AsyncClient) and returns the
    seconds of its wait."""
    duration, wait_s = _duration(wait)
    req = ledger_pb2.PrepareRequest(
        tool=tool, tool_version=tool_version or "", args=_struct(args), execute=execute, wait=duration
    )
    return req, wait_s


def approve_request(
    operation_id: str, fingerprint: str, decision: Decision, reason: str
) -> ledger_pb2.ApproveRequest:
    """approve_request builds an ApproveRequest from "approve"/"deny" or a Decision value."""
    return ledger_pb2.ApproveRequest(
        operation_id=operation_id, fingerprint=fingerprint, decision=_decision(decision), reason=reason
    )


def approve_edited_request(
    operation_id: str, fingerprint: str, edited_args: Args, reason: str
) -> ledger_pb2.ApproveRequest:
    """approve_edited_request builds an approve-with-edit ApproveRequest (DECISION_APPROVE with
    edited_args)."""
    return ledger_pb2.ApproveRequest(
        operation_id=operation_id,
        fingerprint=fingerprint,
        decision=ledger_pb2.DECISION_APPROVE,
        reason=reason,
        edited_args=_struct(edited_args),
    )


def list_operations_request(
    states: Sequence[State], tool: str, page_size: int, page_token: str
) -> ledger_pb2.ListOperationsRequest:
    """list_operations_request builds a ListOperationsRequest from state names or values."""
    return ledger_pb2.ListOperationsRequest(
        states=[_state(s) for s in states], tool=tool, page_size=page_size, page_token=page_token
    )


class Client:
    """Client calls one opledger server with one API key.

    ``target`` is "host:port". The channel uses TLS with the system roots unless ``plaintext=True``
    (a server on loopback or behind a TLS-terminating proxy); pass ``credentials`` (a
    grpc.ChannelCredentials) for other roots or a client certificate. ``retry`` is the retry policy
    (RetryPolicy() by default: 4 attempts, see retry.py); ``timeout`` is the deadline of each
    attempt in seconds. Pass ``channel`` to use a channel you built yourself (then keep gRPC's
    retries off on it: ``("grpc.enable_retries", 0)``). ``with_api_key`` gives a client for
    another principal on the same channel. Use it as a context manager, or call close().
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        plaintext: bool = False,
        credentials: Optional[grpc.ChannelCredentials] = None,
        retry: Optional[RetryPolicy] = None,
        timeout: float = DEFAULT_TIMEOUT,
        channel: Optional[grpc.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        self._auth = _auth(api_key)
        if channel is None:
            opts = _channel_options(options)
            creds = _credentials(plaintext, credentials)
            if creds is None:
                channel = grpc.insecure_channel(target, options=opts)
            else:
                channel = grpc.secure_channel(target, creds, options=opts)
            self._owns_channel = True
        else:
            self._owns_channel = False
        self._channel = channel
        self._stub = ledger_pb2_grpc.LedgerServiceStub(channel)  # type: ignore[no-untyped-call]
        self._retry = retry if retry is not None else RetryPolicy()
        self._timeout = timeout

    def with_api_key(self, api_key: str) -> "Client":
        """with_api_key returns a client for another principal (an approver, say) on this client's
        channel, retry policy and timeout. Closing it leaves the channel open; close this one."""
        other = Client.__new__(Client)
        other._auth = _auth(api_key)
        other._owns_channel = False
        other._channel = self._channel
        other._stub = self._stub
        other._retry = self._retry
        other._timeout = self._timeout
        return other

    def close(self) -> None:
        """close releases the channel (unless it was passed in or shared by with_api_key)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(
        self,
        rpc: Any,
        request: Any,
        response: Type[R],
        timeout: Optional[float],
        metadata: Sequence[Tuple[str, str]] = (),
    ) -> R:
        """_call runs one RPC under the retry policy. The metadata (and so the idempotency key) is
        built once: every attempt sends the same."""
        md = (self._auth, *metadata)
        t = timeout or self._timeout

        def attempt() -> R:
            try:
                return cast(R, rpc(request, metadata=md, timeout=t))
            except grpc.RpcError as err:
                raise from_rpc_error(err) from None

        return call_with_retry(self._retry, attempt)

    def prepare(
        self,
        tool: str,
        args: Args,
        idempotency_key: str,
        *,
        tool_version: Optional[str] = None,
        execute: bool = False,
        wait: Wait = None,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.PrepareResponse:
        """prepare records a proposed call of ``tool`` with ``args`` under ``idempotency_key``
        (see derive_key), or returns the operation already recorded under that key with
        ``replayed=True``. The same key with other args raises IdempotencyKeyReused.
        ``tool_version`` pins a version; by default the server uses the tool's current one.

        ``execute=True`` also executes the operation in the same call, as an execute right after
        it would (the one-call path for tools that need no approval; ``wait`` as for execute):
        the answer is the operation as the execution left it, ``execution_replayed`` says that
        no downstream request was made. An operation that awaits approval comes back as without
        ``execute`` (no error)."""
        if not idempotency_key:
            raise ValueError("idempotency_key must not be empty")
        req, wait_s = prepare_request(tool, args, tool_version, execute, wait)
        md = (("idempotency-key", idempotency_key),)
        t = max(timeout or self._timeout, wait_s + _WAIT_MARGIN) if execute else timeout
        return self._call(self._stub.Prepare, req, ledger_pb2.PrepareResponse, t, md)

    def approve(
        self,
        operation_id: str,
        fingerprint: str,
        decision: Decision,
        reason: str = "",
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ApproveResponse:
        """approve records an approver's decision ("approve" or "deny", or a ledger_pb2.Decision)
        on the operation whose fingerprint the approver was shown."""
        req = approve_request(operation_id, fingerprint, decision, reason)
        return self._call(self._stub.Approve, req, ledger_pb2.ApproveResponse, timeout)

    def approve_edited(
        self,
        operation_id: str,
        fingerprint: str,
        edited_args: Args,
        reason: str = "",
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ApproveResponse:
        """approve_edited approves the operation "the same, but with these arguments"
        (approve-with-edit, docs/policy.md): edited_args may differ from the operation's only in
        the fields its tool's policy lists as editable. The ledger records a new operation with
        them, which this approval approves (it may still need another approver) and the policy
        judges again, and rejects the original (Operation.superseded_by): the answer's ``edited``
        is the new one, its ``operation`` the original. fingerprint is the original's, as the
        approver was shown it. The same edit again is ``replayed``; another edit of the same
        operation is ApprovalConflict."""
        req = approve_edited_request(operation_id, fingerprint, edited_args, reason)
        return self._call(self._stub.Approve, req, ledger_pb2.ApproveResponse, timeout)

    def execute(
        self, operation_id: str, wait: Wait = None, *, timeout: Optional[float] = None
    ) -> ledger_pb2.ExecuteResponse:
        """execute performs the operation's effect at most once; a repeat returns the stored
        outcome with ``replayed=True``. ``wait`` (seconds, timedelta or Duration) is how long to
        wait when another caller is executing it. Check ``operation.state``: SUCCEEDED, FAILED,
        OUTCOME_UNKNOWN (reconcile, never re-execute) or EXECUTING (still pending)."""
        duration, wait_s = _duration(wait)
        req = ledger_pb2.ExecuteRequest(operation_id=operation_id, wait=duration)
        t = max(timeout or self._timeout, wait_s + _WAIT_MARGIN)
        return self._call(self._stub.Execute, req, ledger_pb2.ExecuteResponse, t)

    def get(
        self, operation_id: str, include_events: bool = False, *, timeout: Optional[float] = None
    ) -> ledger_pb2.GetResponse:
        """get returns the operation and, with ``include_events``, its event log."""
        req = ledger_pb2.GetRequest(operation_id=operation_id, include_events=include_events)
        return self._call(self._stub.Get, req, ledger_pb2.GetResponse, timeout)

    def reconcile(
        self,
        operation_id: str,
        resolution: Optional[ledger_pb2.Resolution] = None,
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ReconcileResponse:
        """reconcile resolves an OUTCOME_UNKNOWN (or abandoned EXECUTING) operation by looking the
        downstream up; an operator key may pass a manual ``resolution``."""
        req = ledger_pb2.ReconcileRequest(operation_id=operation_id, resolution=resolution)
        return self._call(self._stub.Reconcile, req, ledger_pb2.ReconcileResponse, timeout)

    def cancel(
        self, operation_id: str, reason: str = "", *, timeout: Optional[float] = None
    ) -> ledger_pb2.CancelResponse:
        """cancel withdraws an operation nobody has executed yet (AWAITING_APPROVAL or READY);
        repeating it returns ``replayed=True``."""
        req = ledger_pb2.CancelRequest(operation_id=operation_id, reason=reason)
        return self._call(self._stub.Cancel, req, ledger_pb2.CancelResponse, timeout)

    def list_tools(self, *, timeout: Optional[float] = None) -> ledger_pb2.ListToolsResponse:
        """list_tools returns the tools the server is configured with (every version; ``current``
        marks the one prepare uses without a version), with their descriptions, effects, approval
        policies and argument JSON Schemas (``args_schema``, a Struct)."""
        req = ledger_pb2.ListToolsRequest()
        return self._call(self._stub.ListTools, req, ledger_pb2.ListToolsResponse, timeout)

    def list_operations(
        self,
        states: Sequence[State] = (),
        tool: str = "",
        page_size: int = 0,
        page_token: str = "",
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ListOperationsResponse:
        """list_operations returns one page of the tenant's operations, newest first: only those in
        ``states`` (names like "awaiting_approval", or ledger_pb2.State values; none means all) and
        of ``tool`` (empty means all). Pass the response's ``next_page_token`` as ``page_token``,
        with the same states and tool, for the next page; it is empty on the last page."""
        req = list_operations_request(states, tool, page_size, page_token)
        return self._call(self._stub.ListOperations, req, ledger_pb2.ListOperationsResponse, timeout)
