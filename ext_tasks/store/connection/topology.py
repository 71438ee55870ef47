"""What the stores ask of a Valkey deployment (:class:`Topology`), and :func:`connect`, which opens the
one a URL names.

Three shapes answer it: one Valkey (:class:`~.single.SingleTopology`), the primary a group of sentinels
names (:class:`~.sentinel.SentinelTopology`) and a Valkey Cluster (:class:`~.cluster.ClusterTopology`).
The stores above never ask which one they have: where the shapes differ (where a key lives, how a write
is confirmed, how a dedicated connection is opened, which nodes are primaries) the topology answers
for itself. The one thing a store does decide by is :attr:`Topology.spans_slots`: whether one command
may touch keys of several slots.

One per process and URL: the composition root opens it and hands it to the task store and the legacy
session store, so they share connections.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from .acks import ReplicaAcks
from .cluster import ClusterTopology
from .pool import PoolSettings
from .sentinel import SentinelTopology
from .single import SingleTopology
from .urls import CLUSTER_SCHEME, SENTINEL_SCHEME, Endpoint, scheme_of


class Topology(Protocol):
    #: The command client: valkey-py's ``Valkey`` or (a cluster) ``ValkeyCluster``.
    client: Any
    acks: ReplicaAcks

    @property
    def spans_slots(self) -> bool:
        """Whether one command may touch keys of several slots (not on a cluster)."""
        ...

    @property
    def confirms(self) -> bool:
        """Whether writes wait for replicas (:meth:`confirmed`)."""
        ...

    async def confirmed(self, key: str, *command: str | int, source: str | None = None) -> Any:
        """``command`` (a write in ``key``'s slot), answered once the replicas confirm it, its reply
        parsed as the client would; for an ``EVALSHA``, the script's ``source`` (loaded where the server
        does not know it yet)."""
        ...

    def routing(self, key: str) -> dict[str, Any]:
        """What ``client.execute_command`` is given to send a command on ``key`` to its node."""
        ...

    async def endpoint_for(self, key: str) -> Endpoint:
        """The node that serves ``key`` (or a sharded channel) as far as this client knows."""
        ...

    async def refresh(self) -> None:
        """Learn again where keys live (after a slot moved or a primary failed over)."""
        ...

    def connection_kwargs(self) -> dict[str, Any]:
        """What a dedicated connection to one node is opened with (credentials, timeouts, encoding)."""
        ...

    async def ping(self) -> None: ...

    async def primaries(self, *sections: str) -> list[tuple[str, Mapping[str, Any]]]:
        """``INFO sections`` of every primary, by node name."""
        ...

    async def close(self) -> None: ...


_Opener = Callable[[str, PoolSettings, "ReplicaAcks | None"], Topology]
#: Each scheme's shape; any other URL (``valkey://``, ``unix://``, ...) is one Valkey's.
_SHAPES: Final[dict[str, _Opener]] = {
    CLUSTER_SCHEME: ClusterTopology.open,
    SENTINEL_SCHEME: SentinelTopology.open,
}


def connect(url: str, settings: PoolSettings | None = None, *, acks: ReplicaAcks | None = None) -> Topology:
    """The deployment ``url`` names (``ValueError`` says what is wrong with it), not yet connected:
    connections open on first use."""
    return _SHAPES.get(scheme_of(url), SingleTopology.open)(url, settings or PoolSettings(), acks)
