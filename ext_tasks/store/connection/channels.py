"""Sharded pub/sub for one process: ``async with channels.subscribe(name) as queue``.

A sharded channel (``SPUBLISH``/``SSUBSCRIBE``) lives in the hash slot of its name, like a key: on a
Valkey Cluster a message reaches only subscribers connected to the node that serves that slot, and on
one Valkey it behaves like a plain channel. So the process keeps **one subscriber connection per
node** it needs, whatever the number of local subscribers: each channel is subscribed once, on the
node that serves it, and fanned out in memory to the subscribers' bounded queues.

The queue yields ``None`` once the subscription is live (nothing published afterwards is missed),
then each message's data, and ``None`` again whenever the subscription had to be made again: the
connection broke, or the slot moved to another node (Valkey then ends the subscription itself, with a
``sunsubscribe`` the client did not ask for). ``None`` means "live again: messages may have been
missed meanwhile", so the subscriber reads the state it follows. A subscriber too slow to keep up
loses its oldest messages rather than growing without bound.

valkey-py's asyncio cluster client has no pub/sub at all, hence these few lines over plain connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from valkey.asyncio.connection import Connection

from .errors import TaskStoreUnavailable
from .refusals import unavailable_on_connection_errors
from .topology import Topology
from .urls import Endpoint

logger = logging.getLogger("ext_tasks.store")

_SUBSCRIBE_TIMEOUT_S: Final = 5.0
_PING_EVERY_S: Final = 10.0
_QUEUE_SIZE: Final = 1024
_BACKOFF_MAX_S: Final = 5.0


class ShardedChannels:
    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        #: Each channel's local subscribers: how each wants a message's data decoded, and what it gets
        #: when the subscription is live (again).
        self._subscribers: dict[str, dict[asyncio.Queue[Any], tuple[Callable[[str], Any], Any]]] = {}
        self._links: dict[Endpoint, _Link] = {}
        self._home: dict[str, _Link] = {}
        self._rehoming: dict[str, asyncio.Task[None]] = {}
        #: Set by :meth:`close`: no link is opened again afterwards (a late subscriber, or a link lost
        #: while closing, would otherwise leave a connection and its reader behind the closed store).
        self._closed = False

    @contextlib.asynccontextmanager
    async def subscribe(
        self, channel: str, decode: Callable[[str], Any] = str, live: Any = None
    ) -> AsyncIterator[asyncio.Queue[Any]]:
        """A queue of ``live`` (``None`` unless asked otherwise) whenever the subscription is live
        (again), and ``decode(data)`` of each message."""
        if self._closed:
            raise TaskStoreUnavailable("task store unavailable: closed")
        queue: asyncio.Queue[Any] = asyncio.Queue(_QUEUE_SIZE)
        local = self._subscribers.setdefault(channel, {})
        local[queue] = (decode, live)
        try:
            await self._subscribe_at_home(channel)
            _put(queue, live)
            yield queue
        finally:
            local.pop(queue, None)
            if not local and self._subscribers.get(channel) is local:
                del self._subscribers[channel]
                rehoming = self._rehoming.pop(channel, None)
                if rehoming is not None:
                    rehoming.cancel()
                link = self._home.pop(channel, None)
                if link is not None:
                    await link.unsubscribe(channel)

    def channel_count(self) -> int:
        return len(self._subscribers)

    def connection_count(self) -> int:
        return sum(1 for link in self._links.values() if link.connected)

    async def close(self) -> None:
        self._closed = True
        for task in self._rehoming.values():
            task.cancel()
        self._rehoming.clear()
        for link in list(self._links.values()):
            await link.close()
        self._links.clear()
        self._home.clear()

    async def _subscribe_at_home(self, channel: str) -> None:
        link = self._home.get(channel)
        if link is None:
            endpoint = await self._topology.endpoint_for(channel)
            if self._closed:  # closed while asking where the channel lives
                raise TaskStoreUnavailable("task store unavailable: closed")
            link = self._links.get(endpoint)
            if link is None:
                link = self._links[endpoint] = _Link(self, endpoint)
            self._home[channel] = link
        await link.subscribe(channel)

    # --- called by the links ------------------------------------------------------------------------

    def deliver(self, channel: str, data: str) -> None:
        for queue, (decode, _) in self._subscribers.get(channel, {}).items():
            _put(queue, decode(data))

    def lost(self, link: _Link, channels: list[str]) -> None:
        """``link``'s connection broke: subscribe its channels again, wherever they live now."""
        if self._links.get(link.endpoint) is link:
            del self._links[link.endpoint]
        for channel in channels:
            if self._home.get(channel) is link:
                self._rehome(channel)

    def moved(self, link: _Link, channel: str) -> None:
        """The node ended ``channel``'s subscription by itself: its slot moved elsewhere."""
        if self._home.get(channel) is link:
            self._rehome(channel)

    def _rehome(self, channel: str) -> None:
        self._home.pop(channel, None)
        if channel in self._subscribers and channel not in self._rehoming and not self._closed:
            self._rehoming[channel] = asyncio.create_task(self._subscribe_again(channel), name="ext-tasks-resubscribe")

    async def _subscribe_again(self, channel: str) -> None:
        pause_s = 0.05
        try:
            while channel in self._subscribers:
                await self._topology.refresh()
                try:
                    await self._subscribe_at_home(channel)
                except Exception as exc:  # noqa: BLE001 - still away: try again after a longer pause
                    logger.warning("re-subscribing %s failed (%s); retrying", channel, type(exc).__name__)
                    self._home.pop(channel, None)
                    await asyncio.sleep(pause_s)
                    pause_s = min(pause_s * 2, _BACKOFF_MAX_S)
                    continue
                for queue, (_, live) in self._subscribers.get(channel, {}).items():
                    _put(queue, live)  # live again: the subscriber catches up on what it missed
                return
        finally:
            if self._rehoming.get(channel) is asyncio.current_task():
                del self._rehoming[channel]


class _Link:
    """One subscriber connection to one node, and the channels subscribed on it."""

    def __init__(self, owner: ShardedChannels, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._owner = owner
        self._connection: Connection | None = None
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        #: SUNSUBSCRIBEs sent and not yet answered, per channel. Replies come in the order the commands
        #: went out, so a ``sunsubscribe`` while one is outstanding is ours; any other means the node
        #: ended the subscription (its slot moved). A count, not a flag: a channel may be left and
        #: joined again before the node answered.
        self._leaving: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._connection is not None

    async def subscribe(self, channel: str) -> None:
        async with self._lock:
            confirmed = self._confirmed.get(channel)
            if confirmed is None or (confirmed.done() and confirmed.exception() is not None):
                confirmed = self._confirmed[channel] = asyncio.get_running_loop().create_future()
                try:
                    with unavailable_on_connection_errors():
                        connection = await self._connect()
                        # Shielded: valkey-py drops a connection whose write is cancelled midway, and this
                        # one carries every channel of the link, not only the cancelled caller's.
                        await asyncio.shield(connection.send_command("SSUBSCRIBE", channel, check_health=False))
                except (asyncio.CancelledError, TaskStoreUnavailable):
                    self._forget(channel, confirmed)
                    raise
                except Exception as exc:
                    # The shared connection is in a state its client did not expect (seen: its writer
                    # gone under a concurrent send): start it afresh, as when it breaks.
                    self._forget(channel, confirmed)
                    await self._drop()
                    raise TaskStoreUnavailable("task store unavailable: pub/sub connection lost") from exc
        try:
            async with asyncio.timeout(_SUBSCRIBE_TIMEOUT_S):
                await asyncio.shield(confirmed)
        except TimeoutError:
            raise TaskStoreUnavailable("task store unavailable: subscription not confirmed") from None

    def _forget(self, channel: str, confirmed: asyncio.Future[None]) -> None:
        """``channel``'s SSUBSCRIBE may not have been sent: the next attempt must send it again, not
        wait for this one's answer."""
        if self._confirmed.get(channel) is confirmed:
            del self._confirmed[channel]

    async def unsubscribe(self, channel: str) -> None:
        self._confirmed.pop(channel, None)
        if self._connection is None:
            return
        self._leaving[channel] = self._leaving.get(channel, 0) + 1
        with contextlib.suppress(Exception):
            await self._connection.send_command("SUNSUBSCRIBE", channel, check_health=False)

    async def _connect(self) -> Connection:
        if self._connection is None:
            kwargs: dict[str, Any] = self._owner._topology.connection_kwargs()
            connection = Connection(host=self.endpoint.host, port=self.endpoint.port, **kwargs)
            await connection.connect()  # type: ignore[no-untyped-call]
            self._connection = connection
            self._tasks = [
                asyncio.create_task(self._read(connection), name="ext-tasks-pubsub"),
                asyncio.create_task(self._ping(connection), name="ext-tasks-pubsub-ping"),
            ]
        return self._connection

    async def _read(self, connection: Connection) -> None:
        try:
            while True:
                message = await connection.read_response(disconnect_on_error=False, push_request=True)
                if isinstance(message, list) and len(message) >= 2:
                    self._dispatch(str(message[0]), str(message[1]), message[2] if len(message) > 2 else None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the connection: subscribe elsewhere
            logger.warning("pub/sub connection to %s:%d lost (%s)", self.endpoint.host, self.endpoint.port, exc)
            await self._drop()

    async def _ping(self, connection: Connection) -> None:
        """A subscribed connection carries no replies; a periodic PING makes a dead one fail the read."""
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(_PING_EVERY_S)
                await connection.send_command("PING", check_health=False)

    def _dispatch(self, kind: str, channel: str, data: Any) -> None:
        if kind == "smessage":
            self._owner.deliver(channel, str(data))
        elif kind == "ssubscribe":
            confirmed = self._confirmed.get(channel)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)
        elif kind == "sunsubscribe":
            if self._leaving.get(channel, 0) > 0:
                self._leaving[channel] -= 1
                if not self._leaving[channel]:
                    del self._leaving[channel]
            elif channel in self._confirmed:
                del self._confirmed[channel]
                self._owner.moved(self, channel)

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        channels = list(self._confirmed)
        for future in self._confirmed.values():
            if not future.done():
                future.set_exception(TaskStoreUnavailable("task store unavailable: pub/sub connection lost"))
                future.exception()  # a subscriber waiting on it sees it; nobody waiting is no error
        self._confirmed = {}
        self._leaving.clear()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._tasks = []
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.disconnect(nowait=True)
        self._owner.lost(self, channels)

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.disconnect()


def _put(queue: asyncio.Queue[Any], item: Any) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(item)
