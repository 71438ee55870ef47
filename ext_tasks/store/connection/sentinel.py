"""Valkey behind Sentinel: ``valkey+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/NAME[/DB]``.

The URL names the sentinels (any of them will do; they are asked in turn) and the monitored primary's
name. The command client's connections go to the primary the sentinels name **when the connection is
opened**, so after a promotion the process follows by itself: a connection to the old primary fails (it
died) or is refused writes (it was demoted, ``READONLY``), is dropped, and the next one asks the
sentinels again. While the sentinels cannot name a healthy primary (the minute between a death and the
promotion), every command fails as "store unavailable" (HTTP 503, retry later); nothing is answered from
a replica. Each time the named primary changes the process counts a failover
(``ext_tasks_store_failovers_total``).

The pool is the same bounded, trimmed pool as one Valkey's (:class:`~.pool.TrimmedPool`), its
connections valkey-py's :class:`SentinelManagedConnection`, which ask the pool for the address.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Final

from valkey.asyncio import Valkey
from valkey.asyncio.sentinel import Sentinel, SentinelManagedConnection

from ...metrics import STORE_FAILOVERS
from .acks import ReplicaAcks
from .pool import PoolSettings, TrimmedPool
from .refusals import unavailable_on_connection_errors
from .single import PooledTopology
from .urls import Endpoint, sentinel_target

logger = logging.getLogger("ext_tasks.store")

#: How long asking one sentinel may take before the next is asked.
_SENTINEL_TIMEOUT_S: Final = 1.0


class FollowingPool(TrimmedPool):
    """A bounded pool whose new connections go to the primary the sentinels name now."""

    def __init__(self, name: str, sentinel: Sentinel, **kwargs: Any) -> None:
        super().__init__(connection_class=SentinelManagedConnection, **kwargs)
        # What SentinelManagedConnection expects of its pool (valkey-py's own sentinel pool has these).
        self.connection_kwargs["connection_pool"] = weakref.proxy(self)
        self.is_master = True
        self.check_connection = False
        self.service_name = name
        self.sentinel_manager = sentinel
        self.master_address: tuple[str, int] | None = None

    async def get_master_address(self) -> tuple[str, int]:
        host, port = await self.sentinel_manager.discover_master(self.service_name)
        address = (str(host), int(port))
        if address != self.master_address:
            if self.master_address is not None:
                STORE_FAILOVERS.inc()
                logger.warning(
                    "the sentinels name a new primary for %s: %s:%d (was %s:%d)",
                    self.service_name, *address, *self.master_address,
                )  # fmt: skip
            self.master_address = address
            # Idle connections still point at the old primary: they reconnect on their next use.
            await self.retire_idle()  # the idle ones lead to the old primary
        return address


class SentinelTopology(PooledTopology):
    """The primary a group of sentinels names, followed through promotions."""

    def __init__(self, client: Valkey, sentinel: Sentinel, acks: ReplicaAcks | None = None) -> None:
        super().__init__(client, acks)
        self._sentinel = sentinel

    @classmethod
    def open(cls, url: str, settings: PoolSettings, acks: ReplicaAcks | None = None) -> SentinelTopology:
        target = sentinel_target(url)
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            [(seed.host, seed.port) for seed in target.sentinels],
            sentinel_kwargs={"socket_timeout": _SENTINEL_TIMEOUT_S, "socket_connect_timeout": _SENTINEL_TIMEOUT_S},
        )
        pool = FollowingPool(
            target.name,
            sentinel,
            db=target.db,
            username=target.credentials.get("username"),
            password=target.credentials.get("password"),
            **settings.pool(),
        )
        return cls(Valkey.from_pool(pool), sentinel, acks)

    async def endpoint_for(self, key: str) -> Endpoint:
        with unavailable_on_connection_errors():
            host, port = await self.client.connection_pool.get_master_address()
        return Endpoint(host, port)

    async def close(self) -> None:
        await super().close()
        for sentinel in self._sentinel.sentinels:
            await sentinel.aclose()
