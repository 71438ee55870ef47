"""The person's side of an authorization: a browser is sent to the authorization URL, and the redirect
back lands on a one-shot HTTP listener on the loopback interface (RFC 8252 §7.3).

The listener is small and bounded on purpose: it binds ``127.0.0.1`` only, reads one request line and
its headers (at most :data:`MAX_REQUEST_BYTES`, each connection within :data:`READ_TIMEOUT_S`), answers
a short plain page, and hands over the query of the first ``GET /callback`` whose ``state`` is ours.
Any other request gets 404 or 400 and the wait goes on, until :data:`WAIT_TIMEOUT_S` in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import sys
import webbrowser
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import parse_qs, urlsplit

from .errors import AuthorizationError

OpenUrl = Callable[[str], Awaitable[None] | None]

ENV_BROWSER: Final = "EXT_TASKS_OAUTH_BROWSER"
CALLBACK_PATH: Final = "/callback"
MAX_REQUEST_BYTES: Final = 16 * 1024
READ_TIMEOUT_S: Final = 10.0
WAIT_TIMEOUT_S: Final = 300.0
_PAGE: Final = b"Authorization received. You can close this window and return to the terminal.\n"


def open_in_browser(url: str) -> None:
    """The default ``open_url``: the URL always goes to stderr (a person may need to copy it), and to
    a browser when there is one and ``EXT_TASKS_OAUTH_BROWSER`` is not ``none``."""
    sys.stderr.write(f"To authorize, open this URL in a browser:\n\n  {url}\n\n")
    sys.stderr.flush()
    if os.environ.get(ENV_BROWSER, "").strip().lower() == "none" or not _graphical():
        return
    with contextlib.suppress(webbrowser.Error):
        webbrowser.get().open(url)


def _graphical() -> bool:
    # Without a display, Python's webbrowser may pick a text browser (lynx, w3m) that would take over
    # the terminal the command runs in: there, the printed URL is the better way.
    platform: str = sys.platform  # a plain string: checked when run, not by the type checker
    if platform.startswith("linux") or "bsd" in platform:
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


async def call_open_url(open_url: OpenUrl, url: str) -> None:
    result = open_url(url)
    if inspect.isawaitable(result):
        await result


class CallbackListener:
    """``async with CallbackListener(port) as listener``: ``listener.redirect_uri`` to send, then
    ``await listener.wait(state)`` for the callback's query parameters."""

    def __init__(self, port: int = 0, *, wait_timeout_s: float = WAIT_TIMEOUT_S) -> None:
        self._port = port
        self._wait_timeout_s = wait_timeout_s
        self._server: asyncio.Server | None = None
        self._state: str | None = None
        self._received: asyncio.Future[dict[str, str]] | None = None

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    @property
    def port(self) -> int:
        assert self._server is not None, "the listener is not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        """Listen (raises :class:`OSError` when the port is taken)."""
        self._received = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port, limit=MAX_REQUEST_BYTES)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def __aenter__(self) -> CallbackListener:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def expect(self, state: str) -> None:
        self._state = state

    async def wait(self) -> dict[str, str]:
        assert self._received is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._received), self._wait_timeout_s)
        except TimeoutError:
            raise AuthorizationError(
                f"no authorization answer came back to {self.redirect_uri} within {self._wait_timeout_s:g} s"
            ) from None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status = await asyncio.wait_for(self._handle(reader), READ_TIMEOUT_S)
        except (TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            status = "400 Bad Request"
        body = _PAGE if status.startswith("200") else status.encode() + b"\n"
        head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
        with contextlib.suppress(OSError):
            writer.write(head.encode() + body)
            await writer.drain()
            writer.close()
            await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader) -> str:
        head = await reader.readuntil(b"\r\n\r\n")  # bounded by the reader's limit
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = request_line.partition(" ")
        target = rest.rpartition(" ")[0] or rest
        parts = urlsplit(target)
        if method != "GET" or parts.path != CALLBACK_PATH:
            return "404 Not Found"
        query = {name: values[0] for name, values in parse_qs(parts.query, keep_blank_values=True).items()}
        if self._state is None or query.get("state") != self._state:
            return "400 Bad Request"  # not the answer to our request: keep waiting for it
        if self._received is not None and not self._received.done():
            self._received.set_result(query)
        return "200 OK"
