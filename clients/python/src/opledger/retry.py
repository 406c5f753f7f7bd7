"""retry is the client's one retry owner.

Only two failures are retried, always with the very same request and the same idempotency key:
UNAVAILABLE on any method (the request did not take effect, or took effect exactly once under
its key) and ABORTED with a RetryInfo (a concurrent duplicate holds the operation). Everything
else is final for that request. Attempts are bounded (4 by default) and separated by
exponential backoff with full jitter: before retry n (n = 1, 2, …) the client sleeps
``uniform(0, min(max_delay, base_delay * 2**(n-1)))``, and never less than the server's
RetryInfo delay. gRPC's own retries are switched off on the channel (``grpc.enable_retries=0``)
so attempts do not multiply across layers, and nothing is hedged.

With the defaults the worst case is 4 attempts and at most 0.1 + 0.2 + 0.4 = 0.7 s of sleep
(plus any RetryInfo floors), on top of 4 × the per-attempt timeout.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, TypeVar

from .errors import OpledgerError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """RetryPolicy bounds the client's retries.

    Attributes:
        max_attempts: total attempts per call, the first included (1 disables retries).
        base_delay: seconds; the backoff ceiling before the first retry.
        max_delay: seconds; the ceiling the backoff doubles up to.
        sleep: how to wait (tests replace it).
        rand: returns a float in [0, 1) (tests replace it).
        async_sleep: how AsyncClient waits (tests replace it).
    """

    max_attempts: int = 4
    base_delay: float = 0.1
    max_delay: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    rand: Callable[[], float] = field(default=random.random, compare=False, repr=False)
    async_sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("delays must not be negative")

    def delay(self, retry: int, floor: Optional[float] = None) -> float:
        """delay returns the seconds to wait before retry number ``retry`` (1 for the first
        retry): full jitter under an exponentially growing ceiling, at least ``floor``."""
        ceiling = min(self.max_delay, self.base_delay * (2.0 ** (retry - 1)))
        d = self.rand() * ceiling
        if floor is not None and floor > d:
            d = floor
        return d


#: NO_RETRY is a policy that makes exactly one attempt.
NO_RETRY = RetryPolicy(max_attempts=1)


def is_retryable(err: OpledgerError) -> bool:
    """is_retryable reports whether the policy retries ``err``."""
    return err.retryable


def call_with_retry(policy: RetryPolicy, attempt: Callable[[], T]) -> T:
    """call_with_retry runs ``attempt`` until it returns, raises a final error, or the attempts
    run out. ``attempt`` must raise OpledgerError and must send the same request (and the same
    idempotency key) every time."""
    n = 1
    while True:
        try:
            return attempt()
        except OpledgerError as err:
            if n >= policy.max_attempts or not is_retryable(err):
                raise
            policy.sleep(policy.delay(n, err.retry_delay))
            n += 1


async def call_with_retry_async(policy: RetryPolicy, attempt: Callable[[], Awaitable[T]]) -> T:
    """call_with_retry_async is call_with_retry for coroutines (AsyncClient): the same rule and
    budget, waiting with ``policy.async_sleep``."""
    n = 1
    while True:
        try:
            return await attempt()
        except OpledgerError as err:
            if n >= policy.max_attempts or not is_retryable(err):
                raise
            await policy.async_sleep(policy.delay(n, err.retry_delay))
            n += 1
