"""Connection pools, and their settings written once for every shape of deployment.

The client's connections are **bounded** (``max_connections``, per node on a cluster): on one Valkey a
burst of requests waits up to ``pool_timeout_s`` for a connection, then fails as "store unavailable",
instead of opening connections until Valkey's client limit takes the whole fleet down; connections
left idle by a burst are closed after ``idle_s`` (:class:`TrimmedPool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from valkey.asyncio import BlockingConnectionPool

from ...options import VALKEY_MAX_CONNECTIONS

#: Connections one client may hold at once (commands, blocking reads and the pub/sub connection).
MAX_CONNECTIONS: Final = VALKEY_MAX_CONNECTIONS
#: How long a pooled connection may sit unused before it is closed.
IDLE_S: Final = 10.0
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


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How every client of the process connects: the one place these numbers are written."""

    max_connections: int = MAX_CONNECTIONS
    connect_timeout_s: float = 2.0
    pool_timeout_s: float = 2.0
    idle_s: float = IDLE_S
    #: A command's reply may take this long (blocking reads ask for at most a second).
    command_timeout_s: float = 10.0

    def client(self) -> dict[str, Any]:
        """What any client (a pool's, or a cluster's per node) is built with."""
        return {
            "decode_responses": True,
            "max_connections": self.max_connections,
            "socket_connect_timeout": self.connect_timeout_s,
            "socket_timeout": self.command_timeout_s,
        }

    def pool(self) -> dict[str, Any]:
        """What a :class:`TrimmedPool` (one Valkey, or the primary Sentinel names) is built with."""
        return {
            **self.client(),
            "timeout": self.pool_timeout_s,
            "idle_s": self.idle_s,
            "health_check_interval": 15,
            "retry_on_timeout": False,
        }


def dedicated(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a dedicated connection to one node is opened with, from a client's connection settings
    (credentials, timeouts, encoding): a subscriber waits for messages as long as it takes."""
    kept = {name: value for name, value in settings.items() if name in _CONNECTION_SETTINGS}
    kept["socket_timeout"] = None
    return kept


class TrimmedPool(BlockingConnectionPool):
    """A bounded, blocking pool that also closes connections idle for longer than ``idle_s``.

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
