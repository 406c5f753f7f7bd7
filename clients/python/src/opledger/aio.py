"""aio is the asyncio client for opledger.v1.LedgerService (grpc.aio): the same API as Client,
with coroutine methods, the same TLS default, typed errors and retry rule (retry.py,
call_with_retry_async). See docs/clients/python.md, "asyncio".
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Type, TypeVar, cast

import grpc
import grpc.aio

from opledger.v1 import ledger_pb2, ledger_pb2_grpc

from .client import (
    _WAIT_MARGIN,
    DEFAULT_TIMEOUT,
    Args,
    Decision,
    State,
    Wait,
    _auth,
    _channel_options,
    _credentials,
    _duration,
    approve_edited_request,
    approve_request,
    list_operations_request,
    prepare_request,
)
from .errors import from_rpc_error
from .retry import RetryPolicy, call_with_retry_async

R = TypeVar("R")


class AsyncClient:
    """AsyncClient calls one opledger server with one API key from asyncio code.

    The arguments, methods and answers are Client's; every method is a coroutine. Create it inside
    a running event loop, use it as an async context manager (``async with``) or await close().
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
        channel: Optional[grpc.aio.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        self._auth = _auth(api_key)
        if channel is None:
            opts = _channel_options(options)
            creds = _credentials(plaintext, credentials)
            if creds is None:
                channel = grpc.aio.insecure_channel(target, options=opts)
            else:
                channel = grpc.aio.secure_channel(target, creds, options=opts)
            self._owns_channel = True
        else:
            self._owns_channel = False
        self._channel = channel
        self._stub = ledger_pb2_grpc.LedgerServiceStub(channel)  # type: ignore[no-untyped-call]
        self._retry = retry if retry is not None else RetryPolicy()
        self._timeout = timeout

    def with_api_key(self, api_key: str) -> "AsyncClient":
        """with_api_key returns a client for another principal on this client's channel, retry
        policy and timeout. Closing it leaves the channel open; close this one."""
        other = AsyncClient.__new__(AsyncClient)
        other._auth = _auth(api_key)
        other._owns_channel = False
        other._channel = self._channel
        other._stub = self._stub
        other._retry = self._retry
        other._timeout = self._timeout
        return other

    async def close(self) -> None:
        """close releases the channel (unless it was passed in or shared by with_api_key)."""
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(
        self,
        rpc: Any,
        request: Any,
        response: Type[R],
        timeout: Optional[float],
        metadata: Sequence[Tuple[str, str]] = (),
    ) -> R:
        md = (self._auth, *metadata)
        t = timeout or self._timeout

        async def attempt() -> R:
            try:
                return cast(R, await rpc(request, metadata=md, timeout=t))
            except grpc.RpcError as err:
                raise from_rpc_error(err) from None

        return await call_with_retry_async(self._retry, attempt)

    async def prepare(
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
        """prepare: see Client.prepare."""
        if not idempotency_key:
            raise ValueError("idempotency_key must not be empty")
        req, wait_s = prepare_request(tool, args, tool_version, execute, wait)
        md = (("idempotency-key", idempotency_key),)
        t = max(timeout or self._timeout, wait_s + _WAIT_MARGIN) if execute else timeout
        return await self._call(self._stub.Prepare, req, ledger_pb2.PrepareResponse, t, md)

    async def approve(
        self,
        operation_id: str,
        fingerprint: str,
        decision: Decision,
        reason: str = "",
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ApproveResponse:
        """approve: see Client.approve."""
        req = approve_request(operation_id, fingerprint, decision, reason)
        return await self._call(self._stub.Approve, req, ledger_pb2.ApproveResponse, timeout)

    async def approve_edited(
        self,
        operation_id: str,
        fingerprint: str,
        edited_args: Args,
        reason: str = "",
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ApproveResponse:
        """approve_edited: see Client.approve_edited."""
        req = approve_edited_request(operation_id, fingerprint, edited_args, reason)
        return await self._call(self._stub.Approve, req, ledger_pb2.ApproveResponse, timeout)

    async def execute(
        self, operation_id: str, wait: Wait = None, *, timeout: Optional[float] = None
    ) -> ledger_pb2.ExecuteResponse:
        """execute: see Client.execute."""
        duration, wait_s = _duration(wait)
        req = ledger_pb2.ExecuteRequest(operation_id=operation_id, wait=duration)
        t = max(timeout or self._timeout, wait_s + _WAIT_MARGIN)
        return await self._call(self._stub.Execute, req, ledger_pb2.ExecuteResponse, t)

    async def get(
        self, operation_id: str, include_events: bool = False, *, timeout: Optional[float] = None
    ) -> ledger_pb2.GetResponse:
        """get: see Client.get."""
        req = ledger_pb2.GetRequest(operation_id=operation_id, include_events=include_events)
        return await self._call(self._stub.Get, req, ledger_pb2.GetResponse, timeout)

    async def reconcile(
        self,
        operation_id: str,
        resolution: Optional[ledger_pb2.Resolution] = None,
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ReconcileResponse:
        """reconcile: see Client.reconcile."""
        req = ledger_pb2.ReconcileRequest(operation_id=operation_id, resolution=resolution)
        return await self._call(self._stub.Reconcile, req, ledger_pb2.ReconcileResponse, timeout)

    async def cancel(
        self, operation_id: str, reason: str = "", *, timeout: Optional[float] = None
    ) -> ledger_pb2.CancelResponse:
        """cancel: see Client.cancel."""
        req = ledger_pb2.CancelRequest(operation_id=operation_id, reason=reason)
        return await self._call(self._stub.Cancel, req, ledger_pb2.CancelResponse, timeout)

    async def list_tools(self, *, timeout: Optional[float] = None) -> ledger_pb2.ListToolsResponse:
        """list_tools: see Client.list_tools."""
        req = ledger_pb2.ListToolsRequest()
        return await self._call(self._stub.ListTools, req, ledger_pb2.ListToolsResponse, timeout)

    async def list_operations(
        self,
        states: Sequence[State] = (),
        tool: str = "",
        page_size: int = 0,
        page_token: str = "",
        *,
        timeout: Optional[float] = None,
    ) -> ledger_pb2.ListOperationsResponse:
        """list_operations: see Client.list_operations."""
        req = list_operations_request(states, tool, page_size, page_token)
        return await self._call(self._stub.ListOperations, req, ledger_pb2.ListOperationsResponse, timeout)
