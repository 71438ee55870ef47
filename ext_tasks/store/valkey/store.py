"""The Valkey task store: records (:mod:`.records`), the run queue (:mod:`.queue`), per-task broadcast
over sharded channels (:mod:`..connection.channels`) and claims, composed on one
:class:`~..connection.topology.Topology` (one Valkey, a Valkey Cluster: ``valkey+cluster://``, or the
primary Sentinel names: ``valkey+sentinel://``).

Every multi-step change is one Lua script touching one hash slot, so it is atomic across instances
and valid on a cluster; the key schema (:mod:`.keys`) puts each task's keys in its partition's slot.

Each noun is an object of its own (:attr:`ValkeyTaskStore.records`, ``queue``, ``broadcast``,
``claims``, ``places``, flow control's ``gates`` (:mod:`.gates`) and the operator's ``listing``), which
is what the engine and the workers are given; the store answers the whole :class:`~..base.TaskStore`
too, by handing each call to its noun, for the composition root and the contract tests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Unpack

from ...options import VALKEY_PREFIX
from ...protocol.tasks import TaskRecord
from ..base import ActiveLimit, ExistingTask, Expired, FlowGates, Followups, IdempotencyClaim, Run, WatchItem
from ..connection.acks import ReplicaAcks
from ..connection.channels import ShardedChannels
from ..connection.jsontext import decode_json
from ..connection.pool import PoolSettings
from ..connection.refusals import unavailable_on_connection_errors
from ..connection.topology import Topology, connect
from .codec import record_from_fields
from .gates import ValkeyGates
from .keys import KeySchema
from .listing import ValkeyListing
from .places import ValkeyPlaces
from .queue import ValkeyRunQueue
from .records import ValkeyRecords


def published_record(text: str) -> TaskRecord:
    """The record a commit published: its hash's fields, as one JSON object."""
    return record_from_fields(decode_json(text))


class ValkeyBroadcast:
    """A task's changes, to whoever watches it: its commits are published on its sharded channel once
    someone marked it watched."""

    def __init__(self, channels: ShardedChannels, records: ValkeyRecords) -> None:
        self._channels = channels
        self._records = records

    @contextlib.asynccontextmanager
    async def watch(self, task_id: str) -> AsyncIterator[asyncio.Queue[WatchItem]]:
        """Subscribe to the task's channel, then mark the task watched so its commits are published:
        a commit after the mark reaches us; one before it is in the record a watcher reads on ``None``."""
        channel = self._records.keys.task_channel(task_id)
        async with self._channels.subscribe(channel, published_record) as events:
            await self._records.mark_watched(task_id)
            yield events


class ValkeyClaims:
    """Single-use keys with a lifetime: one ``SET NX PX`` each."""

    def __init__(self, client: Any, keys: KeySchema) -> None:
        self._client = client
        self._keys = keys

    async def claim(self, key: str, ttl_ms: int) -> bool:
        with unavailable_on_connection_errors():
            return bool(await self._client.set(self._keys.claim(key), "1", nx=True, px=max(1, ttl_ms)))


class ValkeyTaskStore:
    """``ValkeyTaskStore("valkey://127.0.0.1:6379/0")`` owns its connections; give it a shared
    :class:`Topology` (and :class:`ShardedChannels`) to share them with the legacy session store."""

    def __init__(
        self,
        target: str | Topology,
        *,
        prefix: str = VALKEY_PREFIX,
        pool: PoolSettings | None = None,
        channels: ShardedChannels | None = None,
        owner_places: bool = True,
        acks: ReplicaAcks | None = None,
    ) -> None:
        self._owns_topology = isinstance(target, str)
        self.topology = connect(target, pool, acks=acks) if isinstance(target, str) else target
        self._owns_channels = channels is None
        self.channels = channels or ShardedChannels(self.topology)
        self.keys = KeySchema(prefix)
        self.records = ValkeyRecords(self.topology, self.keys, owner_places=owner_places)
        self.queue = ValkeyRunQueue(self.topology, self.keys)
        self.broadcast = ValkeyBroadcast(self.channels, self.records)
        self.claims = ValkeyClaims(self.topology.client, self.keys)
        self._gates = ValkeyGates(self.topology, self.keys)
        #: The operator's listing (the admin listener's): reads what is kept, adds nothing to the hot path.
        self.listing = ValkeyListing(self.topology, self.keys, self.records.places if owner_places else None)

    @property
    def places(self) -> ValkeyPlaces:
        return self.records.places

    @property
    def gates(self) -> FlowGates:
        return self._gates

    async def open(self) -> None:
        await self.queue.open()

    async def close(self) -> None:
        await self.queue.close()
        if self._owns_channels:
            await self.channels.close()
        if self._owns_topology:
            await self.topology.close()

    async def ping(self) -> None:
        await self.topology.ping()

    # --- the whole TaskStore, each call handed to its noun --------------------------------------------

    async def create(
        self,
        record: TaskRecord,
        idempotency: IdempotencyClaim | None = None,
        limit: ActiveLimit | None = None,
        *,
        start_at_ms: int | None = None,
    ) -> ExistingTask | None:
        return await self.records.create(record, idempotency, limit, start_at_ms=start_at_ms)

    async def lookup(self, task_id: str) -> TaskRecord | Expired | None:
        return await self.records.lookup(task_id)

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        return await self.records.owners(task_ids)

    async def commit(self, before: TaskRecord, after: TaskRecord, **then: Unpack[Followups]) -> bool:
        return await self.records.commit(before, after, **then)

    async def overdue(self, now_ms: int, count: int) -> list[TaskRecord]:
        return await self.records.overdue(now_ms, count)

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        return await self.queue.next_runs(consumer, count, block_ms)

    async def heartbeat(self, consumer: str, runs: list[Run]) -> list[Run]:
        return await self.queue.heartbeat(consumer, runs)

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        return await self.queue.reclaim(consumer, min_idle_ms, count)

    async def ack(self, run: Run) -> None:
        await self.queue.ack(run)

    async def requeue(self, run: Run) -> None:
        await self.queue.requeue(run)

    async def queue_depth(self) -> int:
        return await self.queue.queue_depth()

    async def promote_due(self, now_ms: int, task_ids: Sequence[str] = ()) -> int:
        return await self.queue.promote_due(now_ms, task_ids)

    async def wake(self, task_ids: Sequence[str]) -> int:
        return await self.queue.wake(task_ids)

    def watch(self, task_id: str) -> AbstractAsyncContextManager[asyncio.Queue[WatchItem]]:
        return self.broadcast.watch(task_id)

    async def claim(self, key: str, ttl_ms: int) -> bool:
        return await self.claims.claim(key, ttl_ms)
