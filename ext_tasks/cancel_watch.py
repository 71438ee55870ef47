"""A run's watch for its task's cancellation: a run still going after :data:`WATCH_AFTER_S` follows its
task on the store's broadcast, so a ``tasks/cancel`` answered by any instance (or any other end of the
task there, such as a reader finding it past its life's bound) stops the running coroutine at once.
Shorter runs cost no subscription (a cancellation that beats them loses nothing: their outcome's
compare-and-set fails)."""

from __future__ import annotations

import asyncio
import logging
from typing import Final, Protocol

from .lifetimes import TIMEOUT_DATA_KIND
from .protocol.states import TaskStatus
from .protocol.tasks import TaskRecord
from .store.base import Broadcast, Records, TaskStoreUnavailable, WatchItem

logger = logging.getLogger("ext_tasks.worker")

#: How long a run goes before it watches its task for a cancellation.
WATCH_AFTER_S: Final = 0.05
#: How long a watch that could not follow its task waits before it tries again.
_RETRY_S: Final = 1.0


class WatchedStore(Records, Broadcast, Protocol):
    """What the watch uses of a task store: the broadcast it follows, the record it rereads when live."""


class _Ended:
    """What :func:`_next_change` gives once the run it watches for has ended."""


async def _next_change(changes: asyncio.Queue[WatchItem], execution: asyncio.Task[None]) -> WatchItem | _Ended:
    """The next change of a watched task, or :class:`_Ended` as soon as ``execution`` has ended."""
    if execution.done():
        return _Ended()
    getting = asyncio.ensure_future(changes.get())
    try:
        await asyncio.wait((getting, execution), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getting.done():
            getting.cancel()
    return getting.result() if getting.done() and not getting.cancelled() else _Ended()


def _ended_elsewhere(record: TaskRecord) -> bool:
    """The task ended while this run goes on: cancelled, or ended ``failed`` by a reader that found it
    past its life's bound (a run's own outcome is not watched for: the run has ended by then)."""
    if record.status is TaskStatus.CANCELLED:
        return True
    data = (record.error or {}).get("data") if record.status is TaskStatus.FAILED else None
    return isinstance(data, dict) and data.get(TIMEOUT_DATA_KIND) == "life"


async def stop_when_cancelled(store: WatchedStore, task_id: str, execution: asyncio.Task[None]) -> None:
    """Cancel ``execution`` as soon as its task is cancelled, from any instance. Ends when
    ``execution`` ends, by itself: the cancellation its end sends may be lost below (seen: a
    Sentinel-acknowledged store's subscribe and ``mark_watched``, rarely, under load), and a watcher
    left waiting for changes would outlive its run (and hang the event loop's shutdown)."""
    await asyncio.sleep(WATCH_AFTER_S)  # most runs end before anyone could cancel them
    while not execution.done():
        try:
            async with store.watch(task_id) as changes:
                while True:
                    change = await _next_change(changes, execution)
                    if isinstance(change, _Ended):
                        return
                    if change is None:  # live (again): was it cancelled before we listened?
                        found = await store.lookup(task_id)
                        gone = not isinstance(found, TaskRecord) or _ended_elsewhere(found)
                    else:
                        gone = _ended_elsewhere(change)
                    if gone:
                        execution.cancel()
                        return
        except TaskStoreUnavailable:
            await asyncio.sleep(_RETRY_S)
        except Exception:  # nobody awaits a watcher: it must not end with an error unseen
            logger.exception("watching %s for a cancellation failed; watching again", task_id)
            await asyncio.sleep(_RETRY_S)
