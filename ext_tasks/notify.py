"""In-process fan-out of change events to open ``subscriptions/listen`` streams.

List changes are published by this process's registry. Task changes come from the task store, one
task at a time: while some stream here watches a task, the hub follows that task's changes
(``store.watch``, a sharded channel on Valkey) and hands each change to the streams watching it. A task
nobody here watches costs this process nothing, and a commit of a task nobody anywhere watches is
published nowhere.

If a task's subscription breaks (a Valkey restart or blip, a slot moving to another node), the store
subscribes again and says so; the hub then reads the task and hands on the change it missed (the
task's state, when its version moved past the last one the streams got), so a listener never waits for
a transition that happened during the gap. A watched task that is gone ends the streams watching it.

Each listener gets its own bounded queue. A listener too slow to keep up loses its oldest events rather
than holding memory or slowing the publisher: list-changed notifications are hints to re-fetch, so
dropping a duplicate is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final

from .protocol.task_views import detailed_task_wire
from .protocol.tasks import TaskRecord

logger = logging.getLogger("ext_tasks.notify")

_QUEUE_SIZE: Final = 256
_BACKOFF_MAX_S: Final = 5.0

#: The store's ``watch``: a task's record at each commit (``None`` when live, and again after a break).
Watch = Callable[[str], AbstractAsyncContextManager[asyncio.Queue[TaskRecord | None]]]
#: A task's record as it is now, or ``None`` if it is gone.
CurrentRecord = Callable[[str], Awaitable[TaskRecord | None]]


def task_notification(record: TaskRecord) -> dict[str, Any]:
    """The wire shape of a task's change (the params of ``notifications/tasks``): the full
    ``DetailedTask``, as ``tasks/get`` would show it at that commit (ext spec §3.9). Rendered here, once
    per change and process, not by the store at every commit."""
    return detailed_task_wire(record, record.updated_at_ms)


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """``kind`` is ``tools``, ``prompts``, ``resources`` (list changed), ``resource`` (``uri`` updated)
    or ``task`` (``task`` is the record as the commit left it; :func:`task_notification` renders it)."""

    kind: str
    uri: str | None = None
    task: TaskRecord | None = None


_CLOSED: Final = ChangeEvent(kind="__closed__")


class ChangeHub:
    def __init__(self, watch: Watch | None = None, current: CurrentRecord | None = None) -> None:
        self._queues: set[asyncio.Queue[ChangeEvent]] = set()
        self._watching: dict[asyncio.Queue[ChangeEvent], frozenset[str]] = {}
        self._watch = watch
        self._current = current
        #: The newest version handed on, per watched task (what a catch-up compares against).
        self._versions: dict[str, int] = {}
        #: One follower per task some stream here watches, and when it was first live.
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, asyncio.Future[None]] = {}
        self._closed = False

    def publish(self, event: ChangeEvent) -> None:
        for queue in self._queues:
            _put_dropping_oldest(queue, event)

    @contextlib.asynccontextmanager
    async def subscribe(self, task_ids: frozenset[str] = frozenset()) -> AsyncIterator[asyncio.Queue[ChangeEvent]]:
        queue: asyncio.Queue[ChangeEvent] = asyncio.Queue(_QUEUE_SIZE)
        if self._closed:
            queue.put_nowait(_CLOSED)
        self._queues.add(queue)
        try:
            if task_ids and not self._closed:
                self._watching[queue] = task_ids
                await self._follow(task_ids)
            yield queue
        finally:
            self._queues.discard(queue)
            self._watching.pop(queue, None)
            still = set().union(*self._watching.values()) if self._watching else set()
            for task_id in task_ids - still:
                self._versions.pop(task_id, None)
                self._live.pop(task_id, None)
                follower = self._followers.pop(task_id, None)
                if follower is not None:
                    follower.cancel()

    def followed(self) -> int:
        """How many tasks this process follows for its streams."""
        return len(self._followers)

    async def _follow(self, task_ids: frozenset[str]) -> None:
        """Follow each of ``task_ids`` not followed yet; return once every one is live (raise the
        store's error, e.g. unavailable, if a first subscription fails)."""
        if self._watch is None:
            return
        waiting = []
        for task_id in sorted(task_ids):
            live = self._live.get(task_id)
            if live is None or task_id not in self._followers:
                live = self._live[task_id] = asyncio.get_running_loop().create_future()
                self._followers[task_id] = asyncio.create_task(self._follower(task_id, live), name="ext-tasks-follow")
            waiting.append(live)  # a follower another stream started may not be live yet either
        await asyncio.gather(*(asyncio.shield(live) for live in waiting))

    async def _follower(self, task_id: str, live: asyncio.Future[None]) -> None:
        """Hand on the task's changes; after the first live moment, survive the store breaking."""
        assert self._watch is not None
        backoff_s = 0.1
        while True:
            try:
                async with self._watch(task_id) as changes:
                    while True:
                        change = await changes.get()
                        if change is not None:
                            self._dispatch(change)
                        elif not live.done():
                            live.set_result(None)  # no later change can be missed
                        else:
                            await self._catch_up(task_id)  # live again after a break: what did we miss?
                        backoff_s = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever broke the subscription: subscribe again
                if not live.done():
                    live.set_exception(exc)
                    if self._followers.get(task_id) is asyncio.current_task():
                        del self._followers[task_id]
                        del self._live[task_id]
                    return
                logger.warning("changes of a task interrupted (%s); subscribing again", type(exc).__name__)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)
            # The next subscription's first live moment is a reconnection: the loop above catches up.

    def _dispatch(self, record: TaskRecord) -> None:
        task_id = record.task_id
        if record.version <= self._versions.get(task_id, 0):
            return  # already handed on (a catch-up raced the change itself)
        self._versions[task_id] = record.version
        for queue, watched in list(self._watching.items()):
            if task_id in watched:
                _put_dropping_oldest(queue, ChangeEvent(kind="task", task=record))

    async def _catch_up(self, task_id: str) -> None:
        if self._current is None:
            return
        try:
            record = await self._current(task_id)
        except Exception:  # noqa: BLE001 - the store broke again: the next live moment retries
            return
        if record is not None:
            self._dispatch(record)
            return
        # Lost with the store (it came back empty): a stream watching it ends with its final result;
        # the client subscribes again and learns from the new acknowledgement which tasks are left.
        for queue, task_ids in list(self._watching.items()):
            if task_id in task_ids:
                _put_dropping_oldest(queue, _CLOSED)

    def close(self) -> None:
        """End every subscription (server shutdown): each stream then closes gracefully."""
        self._closed = True
        for follower in self._followers.values():
            follower.cancel()
        self._followers.clear()
        self._live.clear()
        for queue in self._queues:
            _put_dropping_oldest(queue, _CLOSED)

    @staticmethod
    def is_closing(event: ChangeEvent) -> bool:
        return event is _CLOSED


def _put_dropping_oldest(queue: asyncio.Queue[ChangeEvent], event: ChangeEvent) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(event)
