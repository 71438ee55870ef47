"""An HTTP/1.1 relay on loopback that loses answers on purpose: a chosen request reaches the upstream and
is served there, but its answer never reaches the client (the connection closes instead), which is
what a client sees when a balancer or a network drops a response. It can also answer chosen requests
503 itself, as a balancer without an instance for them would.

::

    async with LossyProxy(upstream_url, drop=first_with(b'"tools/call"')) as proxy:
        ...  # a client pointed at proxy.url; proxy.dropped counts the lost answers

One request per connection (``Connection: close`` upstream), relayed byte for byte, event streams
included, until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urlsplit

#: The longest request head relayed (tests send small ones).
_MAX_HEAD = 64 * 1024
_UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def every(nth: int) -> Callable[[bytes], bool]:
    """A rule: every ``nth`` request."""
    seen = 0

    def rule(body: bytes) -> bool:
        nonlocal seen
        seen += 1
        return seen % nth == 0

    return rule


def first_with(marker: bytes, count: int = 1) -> Callable[[bytes], bool]:
    """A drop rule: the first ``count`` request bodies that contain ``marker``."""
    left = count

    def rule(body: bytes) -> bool:
        nonlocal left
        if left > 0 and marker in body:
            left -= 1
            return True
        return False

    return rule


class LossyProxy:
    def __init__(
        self, upstream: str, *, drop: Callable[[bytes], bool], refuse: Callable[[bytes], bool] | None = None
    ) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname is not None and parts.port is not None, upstream
        self._host, self._port, self._path = parts.hostname, parts.port, parts.path
        self._drop = drop
        #: Requests answered 503 here, never sent upstream (a balancer with no instance to give it to).
        self._refuse = refuse
        self.refused = 0
        self.dropped = 0
        self.relayed = 0
        #: Every request body received, in order.
        self.bodies: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}{self._path}"

    async def __aenter__(self) -> LossyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        assert current is not None
        self._connections.add(current)
        upstream_out: asyncio.StreamWriter | None = None
        try:
            head = await client_in.readuntil(b"\r\n\r\n")
            if len(head) > _MAX_HEAD:
                return
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                (int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0
            )
            body = await client_in.readexactly(length)
            self.bodies.append(body)
            if self._refuse is not None and self._refuse(body):
                self.refused += 1
                client_out.write(_UNAVAILABLE)
                await client_out.drain()
                return
            kept = [line for line in lines[1:] if line and not line.lower().startswith("connection:")]
            request = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1") + body
            upstream_in, upstream_out = await asyncio.open_connection(self._host, self._port)
            upstream_out.write(request)
            await upstream_out.drain()
            if self._drop(body):
                await upstream_in.read()  # served upstream to its end; the answer goes nowhere
                self.dropped += 1
                return
            self.relayed += 1
            while chunk := await upstream_in.read(65536):
                client_out.write(chunk)
                await client_out.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        finally:
            self._connections.discard(current)
            for writer in (client_out, upstream_out):
                if writer is not None:
                    writer.close()
                    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                        await writer.wait_closed()
