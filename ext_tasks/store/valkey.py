"""The Valkey task store: records (:mod:`.valkey_records`), the run queue (:mod:`.valkey_queue`),
per-task broadcast over sharded channels (:mod:`.channels`) and claims, on one :class:`Topology`
(one Valkey, a Valkey Cluster: ``valkey+cluster://``, or the primary Sentinel names:
``valkey+sentinel://``).

Every multi-step change is one Lua script touching one hash slot, so it is atomic across instances
and valid on a cluster; the key schema (:mod:`.keys`) puts each task's keys in its partition's slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..options import VALKEY_PREFIX
from .acks import ReplicaAcks
from .base import WatchItem
from .channels import ShardedChannels
from .codec import decode_json
from .keys import KeySchema
from .plumbing import MAX_CONNECTIONS, Topology, unavailable_on_connection_errors
from .valkey_queue import ValkeyRunQueue
from .valkey_records import ValkeyRecords


class ValkeyTaskStore(ValkeyRecords, ValkeyRunQueue):
    """``ValkeyTaskStore("valkey://127.0.0.1:6379/0")`` owns its connections; give it a shared
    :class:`Topology` (and :class:`ShardedChannels`) to share them with the legacy session store."""

    def __init__(
        self,
        target: str | Topology,
        *,
        prefix: str = VALKEY_PREFIX,
        max_connections: int = MAX_CONNECTIONS,
        channels: ShardedChannels | None = None,
        owner_places: bool = True,
        acks: ReplicaAcks | None = None,
    ) -> None:
        self._owns_topology = isinstance(target, str)
        if isinstance(target, str):
            topology = Topology.from_url(target, max_connections=max_connections, acks=acks)
        else:
            topology = target
        self._owns_channels = channels is None
        self.topology = topology
        self.channels = channels or ShardedChannels(topology)
        keys = KeySchema(prefix)
        ValkeyRecords.__init__(self, topology, keys, owner_places=owner_places)
        ValkeyRunQueue.__init__(self, topology, keys)

    async def open(self) -> None:
        await self.open_queue()

    async def close(self) -> None:
        await self.close_queue()
        if self._owns_channels:
            await self.channels.close()
        if self._owns_topology:
            await self.topology.close()

    async def ping(self) -> None:
        await self.topology.ping()

    async def claim(self, key: str, ttl_ms: int) -> bool:
        with unavailable_on_connection_errors():
            return bool(await self._client.set(self.keys.claim(key), "1", nx=True, px=max(1, ttl_ms)))

    @contextlib.asynccontextmanager
    async def watch(self, task_id: str) -> AsyncIterator[asyncio.Queue[WatchItem]]:
        """Subscribe to the task's channel, then mark the task watched so its commits are published:
        a commit after the mark reaches us; one before it is in the record a watcher reads on ``None``."""
        async with self.channels.subscribe(self.keys.task_channel(task_id), decode_json) as events:
            await self.mark_watched(task_id)
            yield events
