"""Valkey plumbing shared by the task store and the legacy session store: one :class:`Topology` per
process and URL.

* :meth:`Topology.from_url`: ``valkey://HOST:PORT/DB`` is one Valkey; ``valkey+cluster://HOST:PORT[,...]``
  a Valkey Cluster reached through seed nodes; ``valkey+sentinel://HOST:PORT[,...]/NAME[/DB]`` the
  primary a group of sentinels names (:mod:`.sentinel`), followed through promotions. The client's
  connections are **bounded** (``max_connections``, per node on a cluster): on one Valkey a burst of
  requests waits up to ``pool_timeout_s`` for a connection, then fails as "store unavailable", instead
  of opening connections until Valkey's client limit takes the whole fleet down; connections left idle
  by a burst are closed after ``IDLE_S``. On a cluster, ``MOVED``/``ASK`` are followed and ``TRYAGAIN``
  or a node that went away are retried with backoff by the cluster client (:mod:`.cluster_client`),
  then answered "unavailable".
* :func:`unavailable_on_connection_errors`: the one mapping of a broken connection, of a cluster
  that cannot serve the slot right now, or of a command Valkey refuses for now (out of memory, busy,
  loading: :mod:`.refusals`) to :class:`~.base.TaskStoreUnavailable` (HTTP 503, "retry later"); other
  errors of Valkey (a script bug) pass through.
* :meth:`Topology.confirmed`: a write the replicas confirm before it counts (:mod:`.acks`), when the
  deployment asks for replica acknowledgements.
* The pub/sub side (sharded channels, one connection per node) is :mod:`.channels`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from valkey.asyncio import BlockingConnectionPool, Valkey
from valkey.asyncio.cluster import ValkeyCluster
from valkey.asyncio.sentinel import Sentinel
from valkey.backoff import ExponentialBackoff
from valkey.exceptions import (
    AskError,
    ClusterDownError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
    ValkeyClusterException,
    ValkeyError,
)

from ..options import VALKEY_MAX_CONNECTIONS
from .acks import ReplicaAcks, confirmed_cluster, confirmed_single
from .base import TaskStoreUnavailable
from .cluster_client import CountingRetry, StoreCluster, StoreNode
from .refusals import REFUSALS, refusal_reason

logger = logging.getLogger("ext_tasks.store")

MAX_CONNECTIONS: Final = VALKEY_MAX_CONNECTIONS
#: How long a pooled connection may sit unused before it is closed.
IDLE_S: Final = 10.0
CLUSTER_SCHEME: Final = "valkey+cluster"
SENTINEL_SCHEME: Final = "valkey+sentinel"
#: What a dedicated connection takes from the client's settings (the rest is the pool's business).
_CONNECTION_SETTINGS: Final = frozenset(
    {
        "db",
        "username",
        "password",
        "credential_provider",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "encoding",
        "encoding_errors",
        "decode_responses",
        "client_name",
        "lib_name",
        "lib_version",
        "protocol",
    }
)
#: Answers of a cluster (or of a primary that just became a replica) that mean "not now, retry".
_TRANSIENT_REPLIES: Final = (AskError, ClusterDownError, TryAgainError, ReadOnlyError)


@contextlib.contextmanager
def unavailable_on_connection_errors() -> Iterator[None]:
    try:
        yield
    except (ConnectionError, TimeoutError, OSError, ValkeyError, ValkeyClusterException) as exc:
        reason = refusal_reason(exc)
        if reason is not None:  # Valkey refused for now (out of memory, busy, loading, ...): it passes
            REFUSALS.seen(reason)
            raise TaskStoreUnavailable(f"task store refused the command: {reason}") from exc
        if isinstance(exc, ResponseError) and not isinstance(exc, _TRANSIENT_REPLIES):
            raise
        raise TaskStoreUnavailable(f"task store unavailable: {type(exc).__name__}") from exc


def connect_single(
    url: str,
    *,
    max_connections: int = MAX_CONNECTIONS,
    connect_timeout_s: float = 2.0,
    pool_timeout_s: float = 2.0,
    idle_s: float = IDLE_S,
) -> Valkey:
    """A client of one Valkey (``valkey://HOST:PORT/DB``) with a bounded, blocking connection pool."""
    pool = TrimmedPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout_s,
        idle_s=idle_s,
        decode_responses=True,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=10.0,
        health_check_interval=15,
        retry_on_timeout=False,
    )
    return Valkey.from_pool(pool)  # the client closes the pool with itself


class TrimmedPool(BlockingConnectionPool):
    """A bounded, blocking pool that also closes connections idle for longer than :data:`IDLE_S`.

    valkey-py's pools keep every connection they ever opened; after a burst the idle ones would stay
    open for good. This relies on the pool's list of idle connections (``_available_connections``,
    valkey-py 6), which is why the dependency is pinned below 7.
    """

    def __init__(self, *args: Any, idle_s: float = IDLE_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle_s = idle_s
        self._idle_since: dict[int, float] = {}
        self._trimmer: asyncio.Task[None] | None = None

    async def get_connection(self, command_name: Any, *keys: Any, **options: Any) -> Any:
        if self._trimmer is None or self._trimmer.done():
            self._trimmer = asyncio.create_task(self._trim_forever(), name="ext-tasks-pool-trim")
        if self._available_connections and not self._condition._waiters:
            # An idle connection and nobody queued before us: take it at once. The blocking path's lock,
            # condition and timeout cost a busy process about a tenth of its tasks/get throughput
            # (python -m bench: 3,085-3,122 requests/s at c=64 through it, 3,345-3,481 past it); it is
            # still taken whenever a caller would have to wait.
            connection = self.get_available_connection()  # type: ignore[no-untyped-call]
            try:
                await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        return await super().get_connection(command_name, *keys, **options)  # type: ignore[no-untyped-call]

    async def release(self, connection: Any) -> None:
        self._idle_since[id(connection)] = time.monotonic()
        await super().release(connection)

    async def _trim_forever(self) -> None:
        while True:
            await asyncio.sleep(self._idle_s / 2)
            await self.trim()

    async def trim(self) -> int:
        """Close the connections idle for longer than ``idle_s``; how many were closed."""
        now = time.monotonic()
        return await self.retire_idle(lambda connection: now - self._idle_since.get(id(connection), now) > self._idle_s)

    async def retire_idle(self, stale: Callable[[Any], bool] = lambda _: True) -> int:
        """Close the idle connections ``stale`` picks; how many were closed. They leave the pool before
        they are closed: valkey-py's own ``disconnect(inuse_connections=False)`` closes them while they
        can still be handed out, and a caller then writes on a closed connection (an ``AttributeError``
        deep in the client, seen after a failover)."""
        async with self._condition:
            retired = [connection for connection in self._available_connections if stale(connection)]
            for connection in retired:
                self._available_connections.remove(connection)
                self._idle_since.pop(id(connection), None)
        for connection in retired:
            with contextlib.suppress(Exception):
                await connection.disconnect()
        return len(retired)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if inuse_connections and self._trimmer is not None:  # closing the pool (not only its idle connections)
            self._trimmer.cancel()
            self._trimmer = None
        await super().disconnect(inuse_connections)


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


def cluster_seeds(url: str) -> tuple[list[Endpoint], dict[str, str]]:
    """The seed nodes of ``valkey+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]``, and the
    credentials (``username``/``password``) if the URL has them."""
    parts = urlsplit(url)
    if parts.scheme != CLUSTER_SCHEME:
        raise ValueError(f"not a {CLUSTER_SCHEME}:// URL")
    return parse_hosts(parts.netloc, what="cluster seed")


def parse_hosts(netloc: str, *, what: str) -> tuple[list[Endpoint], dict[str, str]]:
    """``[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]``: the endpoints, and the credentials if any."""
    credentials: dict[str, str] = {}
    hosts = netloc
    if "@" in hosts:
        userinfo, hosts = hosts.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        if user:
            credentials["username"] = unquote(user)
        if password:
            credentials["password"] = unquote(password)
    endpoints = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{what} {item!r} is not HOST:PORT")
        endpoints.append(Endpoint(host.strip("[]"), int(port)))
    return endpoints, credentials


class Topology:
    """The Valkey deployment of one URL: the command client, where a key or channel lives, and how a
    write is confirmed.

    One per process and URL: the composition root builds it and hands it to the task store and the
    legacy session store, so they share connections.
    """

    def __init__(
        self,
        client: Any,
        *,
        cluster: bool,
        single: Endpoint | None = None,
        sentinel: Sentinel | None = None,
        acks: ReplicaAcks | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self._single = single
        self._sentinel = sentinel
        self.acks = acks or ReplicaAcks()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        max_connections: int = MAX_CONNECTIONS,
        connect_timeout_s: float = 2.0,
        acks: ReplicaAcks | None = None,
    ) -> Topology:
        if url.startswith(f"{CLUSTER_SCHEME}://"):
            seeds, credentials = cluster_seeds(url)
            cluster = StoreCluster(
                startup_nodes=[StoreNode(seed.host, seed.port) for seed in seeds],
                decode_responses=True,
                max_connections=max_connections,
                socket_connect_timeout=connect_timeout_s,
                socket_timeout=10.0,
                # MOVED/ASK are followed at once; TRYAGAIN, a failover or a node gone are retried with
                # backoff (about 1.5 s in all), then the request fails as "unavailable".
                retry=CountingRetry(ExponentialBackoff(cap=0.5, base=0.05), retries=4),
                cluster_error_retry_attempts=4,
                username=credentials.get("username"),
                password=credentials.get("password"),
            )
            return cls(cluster, cluster=True, acks=acks)
        if url.startswith(f"{SENTINEL_SCHEME}://"):
            from .sentinel import connect_sentinel

            client, sentinel = connect_sentinel(
                url,
                max_connections=max_connections,
                connect_timeout_s=connect_timeout_s,
                pool_timeout_s=2.0,
                idle_s=IDLE_S,
            )
            return cls(client, cluster=False, sentinel=sentinel, acks=acks)
        single = connect_single(url, max_connections=max_connections, connect_timeout_s=connect_timeout_s)
        kwargs = single.connection_pool.connection_kwargs
        endpoint = Endpoint(str(kwargs.get("host")), int(kwargs.get("port", 6379)))
        return cls(single, cluster=False, single=endpoint, acks=acks)

    @property
    def confirms(self) -> bool:
        """Whether writes wait for replicas (:meth:`confirmed`)."""
        return self.acks.replicas > 0

    async def confirmed(self, key: str, *command: str | int, source: str | None = None) -> Any:
        """``command`` (a write in ``key``'s slot), answered once the replicas confirm it; for an
        ``EVALSHA``, the script's ``source`` (loaded where the server does not know it yet)."""
        with unavailable_on_connection_errors():
            if self.cluster:
                return await confirmed_cluster(self.client, self.acks, key, command, source)
            return await confirmed_single(self.client.connection_pool, self.acks, command, source)

    async def endpoint_for(self, key: str) -> Endpoint:
        """The node that serves ``key`` (or a sharded channel) as far as this client knows."""
        if self._single is not None:
            return self._single
        with unavailable_on_connection_errors():
            if self._sentinel is not None:
                host, port = await self.client.connection_pool.get_master_address()
                return Endpoint(host, port)
            await self.client.initialize()  # a no-op once the slot map is known
        node = self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))
        return Endpoint(node.host, int(node.port))

    async def refresh(self) -> None:
        """Learn the cluster's slot owners again (after a slot moved or a primary failed over)."""
        if self.cluster:
            with contextlib.suppress(Exception):
                await self.client.nodes_manager.initialize()

    def connection_kwargs(self) -> dict[str, Any]:
        """What a dedicated connection to one node is opened with (credentials, timeouts, encoding)."""
        if self.cluster:
            kwargs = dict(self.client.get_connection_kwargs())
        else:
            kwargs = dict(self.client.connection_pool.connection_kwargs)
        kept = {name: value for name, value in kwargs.items() if name in _CONNECTION_SETTINGS}
        kept["socket_timeout"] = None  # a subscriber waits for messages as long as it takes
        return kept

    async def ping(self) -> None:
        with unavailable_on_connection_errors():
            if self.cluster:
                await self.client.ping(target_nodes=ValkeyCluster.PRIMARIES)
            else:
                await self.client.ping()

    async def close(self) -> None:
        await self.client.aclose()
        if self._sentinel is not None:
            for sentinel in self._sentinel.sentinels:
                await sentinel.aclose()
