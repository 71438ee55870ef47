"""Retries with backoff: a tool's declared policy (:class:`Retry`, :class:`Backoff`), the request a
tool makes itself (``ctx.retry_later``, raised as :class:`RetryLater`), and the pure decision a worker
takes from them (:func:`plan_retry`).

A retry is not a sleeping coroutine: the worker commits the task ``working`` with a statusMessage
saying when the next attempt starts, and the store keeps the run scheduled (due at a wall-clock
instant) until a worker promotes it into the queue, so a crash or a restart loses no retry and any
instance may run it. Attempts are counted in the record (``retries``), apart from the crash re-runs of
one attempt (``attempts``, bounded by ``EXT_TASKS_MAX_ATTEMPTS``).

What retries: an exception raised by the tool that the policy's ``on`` names. A :class:`ToolError`
(the tool's own failure result) and a protocol error are outcomes, never retried unless ``on`` names
their class (or a subclass) itself: ``on=(Exception,)``, the default, does not count for them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from .context import RetryLater, ToolError
from .protocol.errors import ProtocolError

#: Kinds of exception that are outcomes: retried only when ``on`` names them (or a subclass) itself.
_OUTCOMES: Final = (ToolError, ProtocolError)


@dataclass(frozen=True, slots=True)
class Backoff:
    """The delay before attempt ``n + 1`` after ``n`` attempts failed: ``base_s * factor ** (n - 1)``,
    at most ``cap_s``, then spread by ``jitter`` (a fraction: 0.1 picks uniformly within ±10 %, so
    retries of many tasks that failed together do not all arrive at once)."""

    base_s: float = 1.0
    factor: float = 2.0
    cap_s: float = 60.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.cap_s < 0:
            raise ValueError("base_s and cap_s must not be negative")
        if self.factor < 1:
            raise ValueError("factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be a fraction between 0 and 1")

    def delay_s(self, failed: int, rand: Callable[[], float] = random.random) -> float:
        """The delay after ``failed`` (≥ 1) failed attempts; ``rand`` returns a number in [0, 1)."""
        plain = min(self.cap_s, self.base_s * self.factor ** max(0, failed - 1))
        spread = plain * self.jitter * (2 * rand() - 1)
        return max(0.0, plain + spread)


@dataclass(frozen=True, slots=True)
class Retry:
    """A tool's retry policy: at most ``attempts`` runs in all (the first included), ``backoff``
    between them, after an exception among ``on``. ``Retry()`` is 3 attempts, 1 s then 2 s (±10 %)."""

    attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError("attempts must be a positive integer")
        if not all(isinstance(kind, type) and issubclass(kind, BaseException) for kind in self.on):
            raise ValueError("on must be a tuple of exception classes")

    def retries(self, exc: BaseException) -> bool:
        """Whether ``exc`` is transient by this policy (an outcome kind only when ``on`` names it)."""
        if isinstance(exc, _OUTCOMES):
            return any(issubclass(kind, _OUTCOMES) and isinstance(exc, kind) for kind in self.on)
        return isinstance(exc, self.on)


#: The policy of ``ctx.retry_later`` in a tool that declares none: its ``attempts`` bound the requests.
DEFAULT_RETRY: Final = Retry()


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """Attempt ``attempt`` of ``of`` starts ``delay_s`` from now."""

    attempt: int
    of: int
    delay_s: float
    reason: str

    @property
    def status_message(self) -> str:
        """What the task's statusMessage says while it waits: ``attempt 2 of 5 in 4 s: <reason>``."""
        return f"attempt {self.attempt} of {self.of} in {_seconds(self.delay_s)} s: {self.reason}"


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No attempt left: ``attempts`` were made, the last ending with ``reason``."""

    attempts: int
    reason: str

    @property
    def message(self) -> str:
        return f"Gave up after {self.attempts} attempts: {self.reason}"


def plan_retry(
    policy: Retry | None, retries_so_far: int, request: RetryLater, rand: Callable[[], float] = random.random
) -> RetryPlan | GiveUp:
    """What follows attempt ``retries_so_far + 1`` ending with ``request``: the next attempt and its
    delay (the tool's own ``after_s`` if it gave one, else the policy's backoff), or giving up."""
    chosen = policy or DEFAULT_RETRY
    failed = retries_so_far + 1
    if failed >= chosen.attempts:
        return GiveUp(failed, request.reason)
    delay = request.after_s if request.after_s is not None else chosen.backoff.delay_s(failed, rand)
    return RetryPlan(failed + 1, chosen.attempts, delay, request.reason)


def transient_reason(exc: BaseException) -> str:
    """What a task says of a transient failure: a :class:`ToolError`'s message (meant for the caller),
    else only the exception's class (its text may hold anything, as for any tool exception)."""
    return str(exc) if isinstance(exc, ToolError) else type(exc).__name__


def _seconds(delay_s: float) -> str:
    """``4`` for 4.0, ``0.5`` for 0.5, ``1.3`` for 1.25: a line for a human."""
    return f"{delay_s:.0f}" if delay_s >= 10 or delay_s == int(delay_s) else f"{delay_s:.1f}".rstrip("0").rstrip(".")
