"""The embedded default: tasks in a dict, runs on an asyncio queue, all in one process.

Each method runs without awaiting in the middle of a change, so on one event loop every operation is
atomic, which is exactly the guarantee the Valkey store gets from its Lua scripts. It implements every
noun of :mod:`.base` in one class: in one process there is nothing to split. Nothing survives the
process; use the Valkey store when tasks must outlive an instance.

Valkey forgets lapsed keys by itself; here :meth:`MemoryTaskStore.sweep` does, every minute once the
store is open: expired records become tombstones, lapsed tombstones, idempotency keys, claims and
owners' places go, and each map keeps at most :data:`CEILING` entries (those that lapse soonest go first), so
the embedded default can run for weeks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final, Unpack

from ..clock import now_ms
from ..protocol.states import TaskStatus
from ..protocol.tasks import TaskRecord
from .base import TOMBSTONE_MS, ActiveLimit, ExistingTask, Expired, Followups, IdempotencyClaim, Run, WatchItem
from .ceilings import CEILING, within_ceiling
from .gates import MemoryGates
from .listing import Lease, TaskRow, row_of
from .places import MemoryPlaces, place_changes, place_of

_SWEEP_EVERY_S: Final = 60.0
_WATCH_QUEUE: Final = 1024


class MemoryTaskStore:
    def __init__(self, *, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or now_ms
        self._records: dict[str, TaskRecord] = {}
        self._tombstones: dict[str, tuple[str, int]] = {}
        self._idempotency: dict[str, tuple[ExistingTask, int]] = {}
        self.places = MemoryPlaces(self._clock_ms)
        self.gates = MemoryGates(self._clock_ms)
        self._claims: dict[str, int] = {}
        #: Waits for input with a deadline: the task, and when its wait ends it.
        self._deadlines: dict[str, int] = {}
        self._sweeper: asyncio.Task[None] | None = None
        #: Queued runs: the task, and how many deliveries of this run came before.
        self._queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._deliveries = 0
        #: Scheduled runs (retries with backoff): the task -> when it is due (one run per task at most).
        self._scheduled: dict[str, int] = {}
        self._watchers: dict[str, set[asyncio.Queue[WatchItem]]] = {}
        #: Runs taken and not yet acknowledged, by delivery: the task, its holder, when it last heartbeated.
        self._held: dict[str, tuple[str, str, int, int]] = {}
        #: The operator's listing (the same store: in one process there is nothing to split).
        self.listing = self

    async def open(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="ext-tasks-memory-sweep")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_EVERY_S)
            self.sweep()

    def sweep(self) -> None:
        """Forget what has lapsed, and the soonest-lapsing entries beyond :data:`CEILING` in each map."""
        now = self._clock_ms()
        live: dict[str, TaskRecord] = {}
        for task_id, record in self._records.items():
            expires = record.expires_at_ms
            if expires is not None and expires <= now:
                self._tombstones[task_id] = (record.owner, expires + TOMBSTONE_MS)
            else:
                live[task_id] = record
        self._records = live  # a new dict: a dict never gives back the room its deleted entries took
        self._tombstones = within_ceiling({key: value for key, value in self._tombstones.items() if value[1] > now})
        self._idempotency = within_ceiling({key: value for key, value in self._idempotency.items() if value[1] > now})
        self._claims = within_ceiling({key: until for key, until in self._claims.items() if until > now})
        # A run left unacknowledged (its run failed unexpectedly; nothing reclaims here) is forgotten with its task.
        self._held = {delivery: held for delivery, held in self._held.items() if held[0] in self._records}
        self._deadlines = {task_id: at for task_id, at in self._deadlines.items() if task_id in self._records}
        self._scheduled = {task_id: due for task_id, due in self._scheduled.items() if task_id in self._records}
        self.places.sweep()

    def sizes(self) -> dict[str, int]:
        """How many entries each map holds (for tests and operators)."""
        return {
            "records": len(self._records),
            "tombstones": len(self._tombstones),
            "idempotency": len(self._idempotency),
            "claims": len(self._claims),
            **self.places.sizes(),
        }

    async def ping(self) -> None:
        return None

    async def create(
        self,
        record: TaskRecord,
        idempotency: IdempotencyClaim | None = None,
        limit: ActiveLimit | None = None,
        *,
        start_at_ms: int | None = None,
    ) -> ExistingTask | None:
        now = self._clock_ms()
        if idempotency is not None:
            prior = self._idempotency.get(idempotency.key)
            if prior is not None and now < prior[1]:
                return prior[0]
        if record.task_id in self._records:
            raise ValueError(f"task {record.task_id} exists")
        if limit is not None and limit.counts:
            await self.places.take(place_of(record), limit)  # never suspends: still one atomic step
        self._records[record.task_id] = record
        if idempotency is not None:
            existing = ExistingTask(record.task_id, idempotency.fingerprint)
            self._idempotency[idempotency.key] = (existing, now + idempotency.window_ms)
        if max(len(self._records), len(self._idempotency)) > CEILING:
            self.sweep()
        if start_at_ms is None:
            self._queue.put_nowait((record.task_id, 0))
        else:
            self._scheduled[record.task_id] = start_at_ms
        return None

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        found = {}
        for task_id in task_ids:
            record = await self.lookup(task_id)
            if isinstance(record, TaskRecord):
                found[task_id] = record.owner
        return found

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

    async def commit(self, before: TaskRecord, after: TaskRecord, **then: Unpack[Followups]) -> bool:
        enqueue, finishing, retry_at_ms = then.get("enqueue", False), then.get("finishing"), then.get("retry_at_ms")
        current = await self.lookup(after.task_id)
        if not isinstance(current, TaskRecord) or current.version != before.version:
            return False
        self._records[after.task_id] = after
        if after.status is TaskStatus.INPUT_REQUIRED and after.deadline_ms is not None:
            self._deadlines[after.task_id] = after.deadline_ms
        else:
            self._deadlines.pop(after.task_id, None)
        if place_changes(before, after):
            await self.places.settle(place_of(after))  # never suspends
        if enqueue:
            self._queue.put_nowait((after.task_id, 0))
        if retry_at_ms is not None:
            self._scheduled[after.task_id] = retry_at_ms
        if finishing is not None:
            self._held.pop(finishing.delivery, None)
        for watcher in self._watchers.get(after.task_id, ()):
            if watcher.full():  # a watcher too slow to keep up loses its oldest changes, not our memory
                watcher.get_nowait()
            watcher.put_nowait(after)
        return True

    async def overdue(self, now_ms: int, count: int) -> list[TaskRecord]:
        due = sorted((at, task_id) for task_id, at in self._deadlines.items() if at <= now_ms)
        found = []
        for _, task_id in due[:count]:
            record = await self.lookup(task_id)
            if isinstance(record, TaskRecord):
                found.append(record)
            else:
                del self._deadlines[task_id]
        return found

    async def claim(self, key: str, ttl_ms: int) -> bool:
        now = self._clock_ms()
        if self._claims.get(key, 0) > now:
            return False
        self._claims[key] = now + ttl_ms
        if len(self._claims) > CEILING:
            self.sweep()
        return True

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        try:
            async with asyncio.timeout(block_ms / 1000):  # not wait_for: it can swallow a cancellation
                first = await self._queue.get()
        except TimeoutError:
            return []
        queued = [first]
        while len(queued) < count and not self._queue.empty():
            queued.append(self._queue.get_nowait())
        runs = []
        now = self._clock_ms()
        for task_id, earlier in queued:
            self._deliveries += 1
            runs.append(Run(task_id=task_id, delivery=str(self._deliveries), attempt=earlier + 1))
            self._held[runs[-1].delivery] = (task_id, consumer, now, earlier + 1)
        return runs

    async def heartbeat(self, consumer: str, runs: list[Run]) -> list[Run]:
        now = self._clock_ms()
        for run in runs:
            if run.delivery in self._held:
                self._held[run.delivery] = (run.task_id, consumer, now, run.attempt)
        return []  # a run cannot outlive its only worker here

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        return []

    async def ack(self, run: Run) -> None:
        self._held.pop(run.delivery, None)

    async def queue_depth(self) -> int:
        return self._queue.qsize()

    async def promote_due(self, now_ms: int, task_ids: Sequence[str] = ()) -> int:
        due = [task_id for task_id, due_ms in self._scheduled.items() if due_ms <= now_ms]
        for task_id in due:
            del self._scheduled[task_id]
            self._queue.put_nowait((task_id, 0))
        return len(due)

    async def wake(self, task_ids: Sequence[str]) -> int:
        woken = [task_id for task_id in task_ids if self._scheduled.pop(task_id, None) is not None]
        for task_id in woken:
            self._queue.put_nowait((task_id, 0))
        return len(woken)

    async def requeue(self, run: Run) -> None:
        self._held.pop(run.delivery, None)
        self._queue.put_nowait((run.task_id, run.attempt))

    # --- the operator's listing (store.listing) ---------------------------------------------------------

    async def rows(self) -> list[TaskRow]:
        now = self._clock_ms()
        return [row_of(record) for record in self._records.values() if not _lapsed(record, now)]

    async def leases(self) -> dict[str, Lease]:
        now = self._clock_ms()
        held: dict[str, Lease] = {}
        for task_id, holder, seen_ms, attempt in self._held.values():
            held[task_id] = Lease(task_id, holder, max(0, now - seen_ms), attempt)
        return held

    async def remove(self, task_id: str) -> bool:
        record = self._records.get(task_id)
        if record is None or not (record.terminal or _lapsed(record, self._clock_ms())):
            return False
        del self._records[task_id]
        self._tombstones.pop(task_id, None)
        await self.places.give_back(record.owner, task_id)  # never suspends
        return True

    @contextlib.asynccontextmanager
    async def watch(self, task_id: str) -> AsyncIterator[asyncio.Queue[WatchItem]]:
        queue: asyncio.Queue[WatchItem] = asyncio.Queue(_WATCH_QUEUE)
        watchers = self._watchers.setdefault(task_id, set())
        watchers.add(queue)
        queue.put_nowait(None)  # live from here on
        try:
            yield queue
        finally:
            watchers.discard(queue)
            if not watchers and self._watchers.get(task_id) is watchers:
                del self._watchers[task_id]


def _lapsed(record: TaskRecord, now: int) -> bool:
    expires = record.expires_at_ms
    return expires is not None and expires <= now
