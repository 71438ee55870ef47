"""A Valkey Cluster (``valkey+cluster://HOST:PORT[,...]``), reached through its seed nodes.

``MOVED``/``ASK`` are followed and ``TRYAGAIN`` or a node that went away are retried with backoff by
the cluster client (:mod:`.cluster_client`), then answered "unavailable". Every key lives on the node
that serves its slot: a command touches one slot, a confirmed write is confirmed by that node's
replicas (:func:`~.acks.confirmed_cluster`), and a command can be sent to the key's node directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, ClassVar

from valkey.asyncio.cluster import ValkeyCluster
from valkey.backoff import ExponentialBackoff

from .acks import ReplicaAcks, confirmed_cluster
from .cluster_client import CountingRetry, StoreCluster, StoreNode
from .pool import PoolSettings, dedicated
from .refusals import unavailable_on_connection_errors
from .urls import Endpoint, cluster_seeds


class ClusterTopology:
    #: A command touches keys of one slot only.
    spans_slots: ClassVar[bool] = False

    def __init__(self, client: StoreCluster, acks: ReplicaAcks | None = None) -> None:
        self.client: Any = client
        self.acks = acks or ReplicaAcks()

    @classmethod
    def open(cls, url: str, settings: PoolSettings, acks: ReplicaAcks | None = None) -> ClusterTopology:
        seeds, credentials = cluster_seeds(url)
        cluster = StoreCluster(
            startup_nodes=[StoreNode(seed.host, seed.port) for seed in seeds],
            # MOVED/ASK are followed at once; TRYAGAIN, a failover or a node gone are retried with
            # backoff (about 1.5 s in all), then the request fails as "unavailable".
            retry=CountingRetry(ExponentialBackoff(cap=0.5, base=0.05), retries=4),
            cluster_error_retry_attempts=4,
            username=credentials.get("username"),
            password=credentials.get("password"),
            **settings.client(),
        )
        return cls(cluster, acks)

    @property
    def confirms(self) -> bool:
        return self.acks.replicas > 0

    async def confirmed(self, key: str, *command: str | int, source: str | None = None) -> Any:
        with unavailable_on_connection_errors():
            return await confirmed_cluster(self.client, self.acks, key, command, source)

    def routing(self, key: str) -> dict[str, Any]:
        # Left to find the key itself, the cluster client would first ask the server (COMMAND GETKEYS)
        # on every call; a slot that moved meanwhile still answers MOVED, which the client follows.
        return {"target_nodes": self.client.get_node_from_key(key)}

    async def endpoint_for(self, key: str) -> Endpoint:
        with unavailable_on_connection_errors():
            await self.client.initialize()  # a no-op once the slot map is known
        node = self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))
        return Endpoint(node.host, int(node.port))

    async def refresh(self) -> None:
        """Learn the slot owners again (after a slot moved or a primary failed over)."""
        with contextlib.suppress(Exception):
            await self.client.nodes_manager.initialize()

    def connection_kwargs(self) -> dict[str, Any]:
        return dedicated(self.client.get_connection_kwargs())

    async def ping(self) -> None:
        with unavailable_on_connection_errors():
            await self.client.ping(target_nodes=ValkeyCluster.PRIMARIES)

    async def primaries(self, *sections: str) -> list[tuple[str, Mapping[str, Any]]]:
        with unavailable_on_connection_errors():
            await self.client.initialize()  # a no-op once the slot map is known
            nodes = self.client.get_primaries()
            replies = await asyncio.gather(*(self.client.info(*sections, target_nodes=node) for node in nodes))
        return [(node.name, info) for node, info in zip(nodes, replies, strict=True)]

    async def close(self) -> None:
        await self.client.aclose()
