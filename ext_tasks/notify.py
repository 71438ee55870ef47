"""In-process fan-out of change events to open ``subscriptions/listen`` streams.

List changes are published by this process's registry. Task changes come from the task store, which
announces every commit fleet-wide; the hub consumes that announcement only while some stream here
watches a task, and hands each event to the streams watching that task.

If the store's announcement breaks (a Valkey restart or blip), the hub subscribes again with backoff and
streams carry on: once it is live again, the hub reads each watched task and hands on the changes it
missed (a task's state, when its version moved past the last one the streams got), so a listener never
waits for a transition that happened during the gap.

Each listener gets its own bounded queue. A listener too slow to keep up loses its oldest events rather
than holding memory or slowing the publisher: list-changed notifications are hints to re-fetch, so
dropping a duplicate is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

logger = logging.getLogger("ext_tasks.notify")

_QUEUE_SIZE: Final = 256
_BACKOFF_MAX_S: Final = 5.0

TaskEvents = Callable[[], AsyncIterator[dict[str, Any]]]
#: The store event of a task as it is now, or ``None`` if it is gone.
CurrentEvent = Callable[[str], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """``kind`` is ``tools``, ``prompts``, ``resources`` (list changed), ``resource`` (``uri`` updated)
    or ``task`` (``task`` is the store's event: id, owner, version and the DetailedTask)."""

    kind: str
    uri: str | None = None
    task: dict[str, Any] | None = None


_CLOSED: Final = ChangeEvent(kind="__closed__")


class ChangeHub:
    def __init__(self, task_events: TaskEvents | None = None, current: CurrentEvent | None = None) -> None:
        self._queues: set[asyncio.Queue[ChangeEvent]] = set()
        self._watching: dict[asyncio.Queue[ChangeEvent], frozenset[str]] = {}
        self._task_events = task_events
        self._current = current
        #: The newest version handed on, per watched task (what a catch-up compares against).
        self._versions: dict[str, int] = {}
        self._consumer: asyncio.Task[None] | None = None
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
            if task_ids:
                self._watching[queue] = task_ids
                await self._consume_task_events()
            yield queue
        finally:
            self._queues.discard(queue)
            self._watching.pop(queue, None)
            if not self._watching and self._consumer is not None:
                self._consumer.cancel()
                self._consumer = None
            still = set().union(*self._watching.values()) if self._watching else set()
            for task_id in task_ids - still:
                self._versions.pop(task_id, None)

    async def _consume_task_events(self) -> None:
        if self._task_events is None or (self._consumer is not None and not self._consumer.done()):
            return
        ready = asyncio.Event()
        self._consumer = asyncio.create_task(self._consume(ready), name="ext-tasks-task-events")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({waiting, self._consumer}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiting.cancel()
            self._consumer.result()  # the store failed to subscribe: raise its error (e.g. unavailable)

    async def _consume(self, ready: asyncio.Event) -> None:
        """Hand on the store's task events; after the first live moment, survive the store breaking."""
        assert self._task_events is not None
        backoff_s = 0.1
        while True:
            try:
                async for event in self._task_events():
                    if event:
                        self._dispatch(event)
                    elif not ready.is_set():
                        ready.set()  # the store's subscription is live: no later change can be missed
                    else:
                        await self._catch_up()  # live again after a break: what did we miss?
                    backoff_s = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not ready.is_set():
                    raise
                logger.warning("task events interrupted (%s); subscribing again", type(exc).__name__)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)
            # The next subscription's first live moment is a reconnection: the loop above catches up.

    def _dispatch(self, event: dict[str, Any]) -> None:
        task_id = event.get("taskId")
        version = event.get("version")
        delivered = False
        for queue, watched in list(self._watching.items()):
            if task_id in watched:
                _put_dropping_oldest(queue, ChangeEvent(kind="task", task=event))
                delivered = True
        if delivered and isinstance(task_id, str) and isinstance(version, int):
            self._versions[task_id] = max(version, self._versions.get(task_id, 0))

    async def _catch_up(self) -> None:
        if self._current is None:
            return
        watched = set().union(*self._watching.values()) if self._watching else set()
        gone: set[str] = set()
        for task_id in sorted(watched):
            try:
                event = await self._current(task_id)
            except Exception:  # noqa: BLE001 - the store broke again: the next live moment retries
                return
            if event is None:
                gone.add(task_id)  # lost with the store (it came back empty)
            elif event.get("version", 0) > self._versions.get(task_id, 0):
                self._dispatch(event)
        # A stream watching a task that no longer exists ends with its final result: the client
        # subscribes again and learns from the new acknowledgement which of its tasks are left.
        for queue, task_ids in list(self._watching.items()):
            if task_ids & gone:
                _put_dropping_oldest(queue, _CLOSED)

    def close(self) -> None:
        """End every subscription (server shutdown): each stream then closes gracefully."""
        self._closed = True
        if self._consumer is not None:
            self._consumer.cancel()
        for queue in self._queues:
            _put_dropping_oldest(queue, _CLOSED)

    @staticmethod
    def is_closing(event: ChangeEvent) -> bool:
        return event is _CLOSED


def _put_dropping_oldest(queue: asyncio.Queue[ChangeEvent], event: ChangeEvent) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(event)
