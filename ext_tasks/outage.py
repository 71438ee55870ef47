"""Reading and committing a task through a store outage, for the task workers.

An outage is a failover (the store unreachable for seconds, the answer to a write possibly lost) or a
store that refuses writes for longer (Valkey at ``maxmemory``, busy, loading: reads still pass). Either
way the store answers :class:`~.store.base.TaskStoreUnavailable`, and:

* :func:`through_outage` tries a read again with growing pauses, up to a deadline.
* :func:`commit_through_outage` tries a compare-and-set again. When its answer is lost (the write may
  have been made all the same) the record says what happened: the outcome itself (ours: done),
  unchanged (send it again, after a pause: a store refusing writes still answers reads at once), or
  changed otherwise (cancelled meanwhile: the outcome is dropped). Without a deadline it goes on until
  the outcome is stored or the task has expired: a run's outcome is never given up because the store
  refused it for a while, and the run is never acknowledged without it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, Unpack

from .protocol.tasks import TaskRecord
from .store.base import Followups, Records, TaskStoreUnavailable

T = TypeVar("T")

#: How long a run keeps trying to read its task (or to store a status message) while the store is away
#: (a primary died and a replica is being promoted): a failover should cost a run a pause, not an attempt.
OUTAGE_S: Final = 30.0
#: The first and the longest pause between two tries.
PAUSE_S: Final = (0.1, 2.0)


async def through_outage(read: Callable[[], Awaitable[T]], deadline: float | None = None) -> T:
    """``read()``, tried again with growing pauses while the store is unavailable, until ``deadline``
    (:data:`OUTAGE_S` from now by default)."""
    deadline = time.monotonic() + OUTAGE_S if deadline is None else deadline
    pause, longest = PAUSE_S
    while True:
        try:
            return await read()
        except TaskStoreUnavailable:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)


async def commit_through_outage(
    store: Records,
    before: TaskRecord,
    after: TaskRecord,
    *,
    now_ms: Callable[[], int],
    deadline: float | None = None,
    **then: Unpack[Followups],
) -> bool:
    """``store.commit(before, after, ...)`` through an outage: whether ``after`` was stored (``False``:
    the task changed otherwise, or expired). Past ``deadline`` (``None``: none) the store's
    :class:`TaskStoreUnavailable` is raised."""
    pause, longest = PAUSE_S
    while True:
        try:
            return await store.commit(before, after, **then)
        except TaskStoreUnavailable:
            if deadline is not None and time.monotonic() > deadline:
                raise
        try:
            current = await store.lookup(after.task_id)
        except TaskStoreUnavailable:
            if deadline is not None and time.monotonic() > deadline:
                raise
            expires_at = before.expires_at_ms
            if expires_at is not None and now_ms() > expires_at:
                return False  # gone by now whatever the store says when it is back
        else:
            if current == after:
                return True
            if current != before:
                return False
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)
