"""In-process fan-out of change events to open ``subscriptions/listen`` streams.

List changes are published by this process's registry. Task changes come from the task store, which
announces every commit fleet-wide; the hub consumes that announcement only while some stream here
watches a task, and hands each event to the streams watching that task.

Each listener gets its own bounded queue. A listener too slow to keep up loses its oldest events rather
than holding memory or slowing the publisher: list-changed notifications are hints to re-fetch, so
dropping a duplicate is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

_QUEUE_SIZE: Final = 256


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """``kind`` is ``tools``, ``prompts``, ``resources`` (list changed), ``resource`` (``uri`` updated)
    or ``task`` (``task`` is the store's event: id, owner, version and the DetailedTask)."""

    kind: str
    uri: str | None = None
    task: dict[str, Any] | None = None


_CLOSED: Final = ChangeEvent(kind="__closed__")


class ChangeHub:
    def __init__(self, task_events: Callable[[], AsyncIterator[dict[str, Any]]] | None = None) -> None:
        self._queues: set[asyncio.Queue[ChangeEvent]] = set()
        self._watching: dict[asyncio.Queue[ChangeEvent], frozenset[str]] = {}
        self._task_events = task_events
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
        if task_ids:
            self._watching[queue] = task_ids
            await self._consume_task_events()
        try:
            yield queue
        finally:
            self._queues.discard(queue)
            self._watching.pop(queue, None)
            if not self._watching and self._consumer is not None:
                self._consumer.cancel()
                self._consumer = None

    async def _consume_task_events(self) -> None:
        if self._task_events is None or (self._consumer is not None and not self._consumer.done()):
            return  # (a consumer that died, say with the store unreachable, is started again)
        events = self._task_events()
        ready = asyncio.Event()

        async def consume() -> None:
            async for event in events:
                if not event:
                    ready.set()  # the store's subscription is live: no later change can be missed
                    continue
                task_id = event.get("taskId")
                for queue, watched in list(self._watching.items()):
                    if task_id in watched:
                        _put_dropping_oldest(queue, ChangeEvent(kind="task", task=event))

        self._consumer = asyncio.create_task(consume(), name="ext-tasks-task-events")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({waiting, self._consumer}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiting.cancel()
            self._consumer.result()  # the store failed to subscribe: raise its error (e.g. unavailable)

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
