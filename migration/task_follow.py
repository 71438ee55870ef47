"""What lets a waiting legacy ``tasks/result`` sleep until its task changes.

A 2025-11-25 ``tasks/result`` blocks until the task is terminal. Reading the task every poll interval
costs the store a read (and a cancellation check) per interval for as long as the client waits, which
for a task of an hour is thousands of reads for nothing. Instead the wait follows the task the way the
session's GET stream does: a 2026-07-28 ``subscriptions/listen`` on the one task, through the same
upstream (this server's engine, or the one the proxy fronts), and the task is read again only when a
change arrives. Once the listen is acknowledged no change can be missed: the task is read after that.

A listen that cannot be opened or breaks (an upstream without it, a restart) is not an error: the wait
falls back to reading the task every poll interval, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from ext_tasks.auth import Caller
from ext_tasks.protocol.errors import ProtocolError

from .remote import UpstreamFailed
from .upstream import ModernCall

Listen = Callable[[ModernCall, Caller], AsyncIterator[dict[str, Any]]]

#: How long the listen may take to be acknowledged before the wait polls instead.
LIVE_TIMEOUT_S: Final = 5.0
_ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"


class TaskFollow:
    """The changes of one task: :meth:`wait` returns when it changed, or after ``timeout_s``. ``live`` is
    false when there is no listen to rely on (the caller then polls)."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self.live = False

    async def wait(self, timeout_s: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):  # not wait_for: it can swallow a cancellation on 3.11
                await self._changed.wait()
        self._changed.clear()

    def _ended(self) -> None:
        self.live = False
        self._changed.set()  # read the task once more, then poll


@contextlib.asynccontextmanager
async def follow_task(listen: Listen, call: ModernCall, caller: Caller, task_id: str) -> AsyncIterator[TaskFollow]:
    """Listen to ``task_id``'s changes (``call``: the ``subscriptions/listen`` to send) while the block
    runs; the listen ends with it."""
    follow = TaskFollow()
    acknowledged = asyncio.Event()

    async def run() -> None:
        try:
            async for message in listen(call, caller):
                if message.get("method") == _ACKNOWLEDGED:
                    honored = (message.get("params") or {}).get("notifications") or {}
                    if task_id not in (honored.get("taskIds") or ()):
                        return  # not followed (gone, or not the caller's): poll
                    follow.live = True
                    acknowledged.set()
                elif "method" in message:
                    follow._changed.set()  # a status change of the task (or a keep-alive's note)
                else:
                    return  # the listen's final response: it ended
        except (UpstreamFailed, ProtocolError):
            return  # broken off, or refused: poll
        finally:
            acknowledged.set()
            follow._ended()

    runner = asyncio.create_task(run(), name="ext-tasks-legacy-result-follow")
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LIVE_TIMEOUT_S):
                await acknowledged.wait()
        yield follow
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
