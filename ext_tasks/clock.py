"""The one clock of task records, queues, sessions and caps: wall-clock milliseconds since the epoch.

Wall time, not monotonic: these instants are stored (``createdAt``, ``lastUpdatedAt``, expiry scores) and
compared by other processes and other machines sharing the store. Parts that compare them take a
``clock_ms`` argument defaulting to this function, so tests can move time without sleeping.
"""

from __future__ import annotations

import asyncio
import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` if the current task is being cancelled. A loop that awaits the store
    calls it each turn: valkey-py may swallow a cancellation that lands inside a command, and a
    ``while True`` loop would then run on and never let its worker stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
