"""One Valkey (``valkey://HOST:PORT/DB``), and what it shares with the primary Sentinel names: a client
on one bounded pool (:class:`~.pool.TrimmedPool`), every key on one node, writes confirmed on a pooled
connection (:func:`~.acks.confirmed_single`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from valkey.asyncio import Valkey

from .acks import ReplicaAcks, confirmed_single
from .pool import PoolSettings, TrimmedPool, dedicated
from .refusals import unavailable_on_connection_errors
from .urls import Endpoint


def connect_single(url: str, settings: PoolSettings | None = None) -> Valkey:
    """A client of one Valkey (``valkey://HOST:PORT/DB``) with a bounded, blocking connection pool."""
    pool = TrimmedPool.from_url(url, **(settings or PoolSettings()).pool())
    return Valkey.from_pool(pool)  # the client closes the pool with itself


class PooledTopology:
    """A deployment served through one pool of connections to one primary."""

    #: One command may touch keys of several slots (there is one node).
    spans_slots: ClassVar[bool] = True

    def __init__(self, client: Valkey, acks: ReplicaAcks | None = None) -> None:
        self.client: Any = client
        self.acks = acks or ReplicaAcks()

    @property
    def confirms(self) -> bool:
        return self.acks.replicas > 0

    async def confirmed(self, key: str, *command: str | int, source: str | None = None) -> Any:
        with unavailable_on_connection_errors():
            reply = await confirmed_single(self.client.connection_pool, self.acks, command, source)
        # Read off a connection directly: parsed as the client parses that command's reply (a cluster
        # node's replies come parsed already).
        parse = self.client.response_callbacks.get(str(command[0]).upper())
        return reply if parse is None else parse(reply)

    def routing(self, key: str) -> dict[str, Any]:
        return {}  # one node serves every key

    async def endpoint_for(self, key: str) -> Endpoint:
        raise NotImplementedError

    async def refresh(self) -> None:
        return None  # nothing to learn: every key stays on the one primary

    def connection_kwargs(self) -> dict[str, Any]:
        return dedicated(self.client.connection_pool.connection_kwargs)

    async def ping(self) -> None:
        with unavailable_on_connection_errors():
            await self.client.ping()

    async def primaries(self, *sections: str) -> list[tuple[str, Mapping[str, Any]]]:
        with unavailable_on_connection_errors():
            info = await self.client.info(*sections)
            endpoint = await self.endpoint_for("")
        return [(f"{endpoint.host}:{endpoint.port}", info)]

    async def close(self) -> None:
        await self.client.aclose()


class SingleTopology(PooledTopology):
    """One Valkey, at the address of its URL."""

    def __init__(self, client: Valkey, acks: ReplicaAcks | None = None) -> None:
        super().__init__(client, acks)
        kwargs = client.connection_pool.connection_kwargs
        self._endpoint = Endpoint(str(kwargs.get("host")), int(kwargs.get("port", 6379)))

    @classmethod
    def open(cls, url: str, settings: PoolSettings, acks: ReplicaAcks | None = None) -> SingleTopology:
        return cls(connect_single(url, settings), acks)

    async def endpoint_for(self, key: str) -> Endpoint:
        return self._endpoint
