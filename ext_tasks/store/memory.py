"""The embedded default: tasks in a dict, runs on an asyncio queue, all in one process.

Each method runs without awaiting in the middle of a change, so on one event loop every operation is
atomic, which is exactly the guarantee the Valkey store gets from its Lua scripts. Nothing survives the
process; use the Valkey store when tasks must outlive an instance.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from ..protocol.tasks import TaskRecord, task_event
from .base import ActiveLimit, ExistingTask, Expired, IdempotencyClaim, Run, TooManyActiveTasks

#: How long an expired task is still reported as "expired" rather than "not found".
TOMBSTONE_MS: Final = 24 * 3600 * 1000


class MemoryTaskStore:
    def __init__(self, *, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._records: dict[str, TaskRecord] = {}
        self._tombstones: dict[str, tuple[str, int]] = {}
        self._idempotency: dict[str, tuple[ExistingTask, int]] = {}
        self._active: dict[str, dict[str, int]] = {}
        self._claims: dict[str, int] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._deliveries = 0
        self._cancel_listeners: set[asyncio.Queue[str]] = set()
        self._event_listeners: set[asyncio.Queue[dict[str, Any]]] = set()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def create(
        self, record: TaskRecord, idempotency: IdempotencyClaim | None = None, limit: ActiveLimit | None = None
    ) -> ExistingTask | None:
        now = self._clock_ms()
        if idempotency is not None:
            prior = self._idempotency.get(idempotency.key)
            if prior is not None and now < prior[1]:
                return prior[0]
        if record.task_id in self._records:
            raise ValueError(f"task {record.task_id} exists")
        if limit is not None:
            active = self._active.setdefault(record.owner, {})
            for task_id in [task_id for task_id, expires in active.items() if expires <= limit.now_ms]:
                del active[task_id]
            if len(active) >= limit.cap:
                raise TooManyActiveTasks(record.owner)
            active[record.task_id] = record.expires_at_ms or 2**62
        self._records[record.task_id] = record
        if idempotency is not None:
            existing = ExistingTask(record.task_id, idempotency.fingerprint)
            self._idempotency[idempotency.key] = (existing, now + idempotency.window_ms)
        self._queue.put_nowait(record.task_id)
        self._announce(record)
        return None

    async def lookup(self, task_id: str) -> TaskRecord | Expired | None:
        now = self._clock_ms()
        record = self._records.get(task_id)
        if record is not None:
            expires = record.expires_at_ms
            if expires is None or now < expires:
                return record
            del self._records[task_id]
            self._tombstones[task_id] = (record.owner, expires + TOMBSTONE_MS)
        tombstone = self._tombstones.get(task_id)
        if tombstone is None:
            return None
        if now >= tombstone[1]:
            del self._tombstones[task_id]
            return None
        return Expired(tombstone[0])

    async def commit(
        self, record: TaskRecord, *, expect_version: int, enqueue: bool = False, cancel: bool = False
    ) -> bool:
        current = await self.lookup(record.task_id)
        if not isinstance(current, TaskRecord) or current.version != expect_version:
            return False
        self._records[record.task_id] = record
        self._announce(record)
        if record.terminal:
            self._active.get(record.owner, {}).pop(record.task_id, None)
        if enqueue:
            self._queue.put_nowait(record.task_id)
        if cancel:
            for listener in self._cancel_listeners:
                listener.put_nowait(record.task_id)
        return True

    async def claim(self, key: str, ttl_ms: int) -> bool:
        now = self._clock_ms()
        if self._claims.get(key, 0) > now:
            return False
        if len(self._claims) > 100_000:  # forget lapsed claims now and then
            self._claims = {k: until for k, until in self._claims.items() if until > now}
        self._claims[key] = now + ttl_ms
        return True

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout=block_ms / 1000)
        except TimeoutError:
            return []
        ids = [first]
        while len(ids) < count and not self._queue.empty():
            ids.append(self._queue.get_nowait())
        runs = []
        for task_id in ids:
            self._deliveries += 1
            runs.append(Run(task_id=task_id, delivery=str(self._deliveries)))
        return runs

    async def heartbeat(self, consumer: str, runs: list[Run]) -> None:
        return None  # a run cannot outlive its only worker here

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        return []

    async def ack(self, run: Run) -> None:
        return None

    async def queue_depth(self) -> int:
        return self._queue.qsize()

    async def requeue(self, run: Run) -> None:
        self._queue.put_nowait(run.task_id)

    def _announce(self, record: TaskRecord) -> None:
        event = task_event(record)
        for listener in self._event_listeners:
            listener.put_nowait(event)

    async def task_events(self) -> AsyncIterator[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._event_listeners.add(queue)
        try:
            yield {}  # live from here on
            while True:
                yield await queue.get()
        finally:
            self._event_listeners.discard(queue)

    async def cancellations(self) -> AsyncIterator[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._cancel_listeners.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._cancel_listeners.discard(queue)
