"""Valkey plumbing shared by the task store and the legacy session store.

* :func:`connect`: a client whose connection pool is **bounded** (``max_connections``): a burst of
  requests waits up to ``pool_timeout_s`` for a connection, then fails as "store unavailable", instead
  of opening connections until Valkey's client limit takes the whole fleet down. Connections left idle
  by a burst are closed after ``IDLE_S``, so the count falls back when the burst is over.
* :func:`unavailable_on_connection_errors`: the one mapping of a broken connection to
  :class:`~.base.TaskStoreUnavailable` (HTTP 503, "retry later"); protocol errors of Valkey
  (``ResponseError``, a script bug) pass through.
* :class:`Channels`: **one** pub/sub connection per process, whatever the number of local subscribers.
  Each channel is subscribed once on that connection and fanned out in memory to the subscribers'
  bounded queues. If the connection breaks, it is opened again and every channel re-subscribed; each
  subscriber then gets a ``None`` (as it did when first live), meaning "live again: messages may have
  been missed meanwhile", so it can catch up by reading the state it follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

from valkey.asyncio import BlockingConnectionPool, Valkey
from valkey.asyncio.client import PubSub
from valkey.exceptions import ResponseError, ValkeyError

from .base import TaskStoreUnavailable

logger = logging.getLogger("ext_tasks.store")

#: Connections one client may hold at once (commands, blocking reads and the pub/sub connection).
MAX_CONNECTIONS: Final = 64
#: How long a pooled connection may sit unused before it is closed.
IDLE_S: Final = 10.0
_SUBSCRIBE_TIMEOUT_S: Final = 5.0
_QUEUE_SIZE: Final = 1024


@contextlib.contextmanager
def unavailable_on_connection_errors() -> Iterator[None]:
    try:
        yield
    except (ConnectionError, TimeoutError, OSError, ValkeyError) as exc:
        if isinstance(exc, ResponseError):
            raise
        raise TaskStoreUnavailable(f"task store unavailable: {type(exc).__name__}") from exc


def connect(
    url: str,
    *,
    max_connections: int = MAX_CONNECTIONS,
    connect_timeout_s: float = 2.0,
    pool_timeout_s: float = 2.0,
    idle_s: float = IDLE_S,
) -> Valkey:
    """A client for ``url`` (``valkey://HOST:PORT/DB``) with a bounded, blocking connection pool."""
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
    return Valkey(connection_pool=pool)


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
        async with self._condition:
            stale = [
                connection
                for connection in self._available_connections
                if now - self._idle_since.get(id(connection), now) > self._idle_s
            ]
            for connection in stale:
                self._available_connections.remove(connection)
                self._idle_since.pop(id(connection), None)
        for connection in stale:
            with contextlib.suppress(Exception):
                await connection.disconnect()
        return len(stale)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if self._trimmer is not None:
            self._trimmer.cancel()
            self._trimmer = None
        await super().disconnect(inuse_connections)


class Channels:
    """Pub/sub for one process over one connection: ``async with channels.subscribe(name) as queue``.

    The queue yields ``None`` once the subscription is live (nothing published afterwards is missed),
    then each message's data, and ``None`` again after a reconnection. A subscriber too slow to keep up
    loses its oldest messages rather than growing without bound.
    """

    def __init__(self, client: Valkey) -> None:
        self._client = client
        self._subscribers: dict[str, set[asyncio.Queue[str | None]]] = {}
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._resubscribing: set[str] = set()
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[asyncio.Queue[str | None]]:
        queue: asyncio.Queue[str | None] = asyncio.Queue(_QUEUE_SIZE)
        local = self._subscribers.setdefault(channel, set())
        local.add(queue)
        try:
            await self._subscribed(channel)
            _put(queue, None)
            yield queue
        finally:
            local.discard(queue)
            if not local and self._subscribers.get(channel) is local:
                del self._subscribers[channel]
                await self._unsubscribe(channel)

    def channel_count(self) -> int:
        return len(self._subscribers)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        await self._drop_connection()

    # --- the one connection -------------------------------------------------------------------------

    async def _subscribed(self, channel: str) -> None:
        """Wait until ``channel`` is subscribed on the shared connection (subscribing it if needed)."""
        async with self._lock:
            confirmed = self._confirmed.get(channel)
            if confirmed is None or (confirmed.done() and confirmed.exception() is not None):
                confirmed = self._confirmed[channel] = asyncio.get_running_loop().create_future()
                with unavailable_on_connection_errors():
                    if self._pubsub is None:
                        self._pubsub = self._client.pubsub()
                    await self._pubsub.subscribe(channel)
                if self._reader is None or self._reader.done():
                    self._reader = asyncio.create_task(self._read(), name="ext-tasks-pubsub")
        try:
            async with asyncio.timeout(_SUBSCRIBE_TIMEOUT_S):
                await asyncio.shield(confirmed)
        except TimeoutError:
            raise TaskStoreUnavailable("task store unavailable: subscription not confirmed") from None

    async def _unsubscribe(self, channel: str) -> None:
        self._confirmed.pop(channel, None)
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.unsubscribe(channel)

    async def _read(self) -> None:
        """Fan messages out; on a broken connection, reconnect and re-subscribe every channel."""
        backoff_s = 0.1
        while True:
            try:
                assert self._pubsub is not None
                message = await self._pubsub.get_message(timeout=1.0)
                backoff_s = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the connection: start it again
                logger.warning("pub/sub connection lost (%s); reconnecting", type(exc).__name__)
                await self._reconnect(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind, channel = message.get("type"), str(message.get("channel"))
        if kind == "subscribe":
            confirmed = self._confirmed.get(channel)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)
            if channel in self._resubscribing:  # live again after a reconnection: tell the subscribers
                self._resubscribing.discard(channel)
                for queue in self._subscribers.get(channel, ()):
                    _put(queue, None)
        elif kind == "message":
            for queue in self._subscribers.get(channel, ()):
                _put(queue, str(message["data"]))

    async def _reconnect(self, pause_s: float) -> None:
        await self._drop_connection()
        for future in self._confirmed.values():
            if not future.done():
                future.set_exception(TaskStoreUnavailable("task store unavailable: pub/sub connection lost"))
        self._confirmed = {}
        await asyncio.sleep(pause_s)
        channels = list(self._subscribers)
        if not channels:
            return
        try:
            pubsub = self._client.pubsub()
            await pubsub.subscribe(*channels)
        except Exception:  # noqa: BLE001 - still down: the read loop tries again after a longer pause
            return
        self._pubsub = pubsub
        # The confirmations arrive through _read, and each tells that channel's subscribers they are
        # live again (and resolves the future a new subscriber of the channel would wait on).
        self._resubscribing = set(channels)
        for channel in channels:
            self._confirmed[channel] = asyncio.get_running_loop().create_future()

    async def _drop_connection(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]


def _put(queue: asyncio.Queue[str | None], item: str | None) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(item)
