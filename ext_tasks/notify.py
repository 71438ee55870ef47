"""In-process fan-out of change events to open ``subscriptions/listen`` streams.

Each listener gets its own bounded queue. A listener too slow to keep up loses its oldest events rather
than holding memory or slowing the publisher: list-changed notifications are hints to re-fetch, so
dropping a duplicate is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

_QUEUE_SIZE: Final = 256


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """``kind`` is ``tools``, ``prompts``, ``resources`` (list changed) or ``resource`` (``uri`` updated)."""

    kind: str
    uri: str | None = None


_CLOSED: Final = ChangeEvent(kind="__closed__")


class ChangeHub:
    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[ChangeEvent]] = set()
        self._closed = False

    def publish(self, event: ChangeEvent) -> None:
        for queue in self._queues:
            _put_dropping_oldest(queue, event)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[ChangeEvent]]:
        queue: asyncio.Queue[ChangeEvent] = asyncio.Queue(_QUEUE_SIZE)
        if self._closed:
            queue.put_nowait(_CLOSED)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    def close(self) -> None:
        """End every subscription (server shutdown): each stream then closes gracefully."""
        self._closed = True
        for queue in self._queues:
            _put_dropping_oldest(queue, _CLOSED)

    @staticmethod
    def is_closing(event: ChangeEvent) -> bool:
        return event is _CLOSED


def _put_dropping_oldest(queue: asyncio.Queue[ChangeEvent], event: ChangeEvent) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(event)
