"""What the HTTP edge watches while it serves a request: the body's deadline, and the client going
away (which cancels the answer).

Both need time to pass, and a timer per request (``call_later`` and its cancel) measured ~1.8 µs on
uvloop, a tenth of what the protocol itself costs a request. So one :class:`Clock` per endpoint ticks
every :data:`WATCH_AFTER_S` while there are young requests, and each request only enters and leaves
its table. A request that has taken :data:`WATCH_AFTER_S` (so between one and two ticks) has its
disconnect watched, which takes a task of its own that most requests (answered within a millisecond)
never need; a disconnect before that is queued by the server and seen at once. A body still arriving
is checked against its deadline on every tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from .protocol.errors import BodyTooLarge, InvalidRequest

Receive = Callable[[], Awaitable[dict[str, Any]]]
T = TypeVar("T")

#: How long a request runs before its client's disconnection is watched (also the clock's tick).
WATCH_AFTER_S: Final = 0.05


class Disconnected(Exception):
    """The client went away before its request was complete."""


class BodyTimeout(InvalidRequest):
    """The request body did not arrive in time: the connection is closed (HTTP 408)."""

    http_status = 408

    def http_headers(self) -> dict[str, str]:
        return {"Connection": "close"}


class Clock:
    """The endpoint's one timer. It runs while some request is young or still reading its body, and
    stops when none is (an idle server does not wake up)."""

    def __init__(self) -> None:
        self._watched: dict[RequestWatch, None] = {}  # a dict: ordered, and O(1) to leave
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def enter(self, watch: RequestWatch, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # a new event loop (tests run apps in several): the old table is dead
            self._watched.clear()
            self._loop, self._timer = loop, None
        self._watched[watch] = None
        if self._timer is None:
            self._timer = loop.call_later(WATCH_AFTER_S, self._tick)

    def leave(self, watch: RequestWatch) -> None:
        self._watched.pop(watch, None)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        for watch in list(self._watched):
            if watch.tick(now):
                self._watched.pop(watch, None)
        self._timer = self._loop.call_later(WATCH_AFTER_S, self._tick) if self._watched else None


class RequestWatch:
    """One request's deadline for its body and the watch on its client; see the module's docstring."""

    __slots__ = ("_answering", "_cancelled", "_clock", "_deadline", "_expired", "_reading", "_receive",
                 "_started", "_task", "_timeout_s", "gone")  # fmt: skip

    def __init__(self, clock: Clock, receive: Receive, body_timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._clock = clock
        self._receive = receive
        self._task: asyncio.Task[Any] | None = asyncio.current_task(loop)
        self._timeout_s = body_timeout_s
        self._started = loop.time()
        self._deadline = self._started + body_timeout_s
        self._reading = False  # the body is being read
        self._answering = False  # the handler's answer is awaited (only then may a disconnect cancel it)
        self._expired = False  # the body missed its deadline: the task was cancelled for it
        self._cancelled = False  # the client left: the task was cancelled for it
        self.gone: asyncio.Future[None] | None = None
        clock.enter(self, loop)

    def tick(self, now: float) -> bool:
        """The clock's call; ``True`` when this request needs the clock no more."""
        if self._task is None or self.gone is not None:
            return True  # answered, or already watched
        if self._reading:
            if now >= self._deadline:
                self._expired = True
                self._task.cancel()
                return True
            return False
        if now - self._started < WATCH_AFTER_S or not self._answering:
            return False  # young, or an early error reply is being sent: nothing to cancel
        self.start()
        return True

    async def body(self, headers: Mapping[str, Sequence[str]], limit: int) -> bytes:
        """The whole body, within ``limit`` bytes and the body timeout (a client that stalls mid-body
        does not keep its connection and coroutine for good)."""
        self._reading = True
        try:
            return await _read_body(self._receive, headers, limit)
        except asyncio.CancelledError:
            if self._expired and self._task is not None:
                self._task.uncancel()  # our own cancel: the deadline passed
                raise BodyTimeout(f"Request Timeout: the body did not arrive within {self._timeout_s:g}s") from None
            raise
        finally:
            self._reading = False

    async def run(self, answer: Awaitable[T]) -> T | None:
        """``answer``'s result, or ``None`` (``answer`` cancelled) if the client disconnects first."""
        self._answering = True
        try:
            return await answer
        except asyncio.CancelledError:
            if self._cancelled and self._task is not None:
                self._task.uncancel()  # our own cancel: the client left, nobody waits for the answer
                return None
            raise
        finally:
            self._task = None  # the answer is done: a disconnect from now on cancels nothing

    def start(self) -> asyncio.Future[None]:
        """Watch for the disconnect now (a stream begins, or the request has taken a while)."""
        if self.gone is None:
            self.gone = asyncio.ensure_future(_disconnect(self._receive))
            self.gone.add_done_callback(self._left)
        return self.gone

    def _left(self, gone: asyncio.Future[None]) -> None:
        if not gone.cancelled() and self._task is not None:
            self._cancelled = True
            self._task.cancel()

    def stop(self) -> None:
        self._clock.leave(self)
        if self.gone is not None:
            self.gone.cancel()


async def _read_body(receive: Receive, headers: Mapping[str, Sequence[str]], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared and declared[0].strip().isdigit() and int(declared[0]) > limit:
        raise BodyTooLarge(f"Request body too large: the limit is {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"Request body too large: the limit is {limit} bytes")
        if not message.get("more_body", False):
            if not chunks:
                return chunk  # the usual case: the whole body in one message
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
