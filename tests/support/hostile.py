"""A hostile 2026-07-28 server on loopback, for the tests of what the client and ``ext-tasks proxy`` read:
a real HTTP/1.1 server (asyncio streams, in a thread of its own so sync tests can use it too) whose
answers are chosen by the called tool's name.

::

    with HostileServer() as hostile:
        ...  # point a client (or a proxy's --upstream) at hostile.url; hostile.count("tasks/get")

``tools/call`` of:

- ``ok``: a small result; ``huge``: a JSON body of ``huge_bytes`` (chunked, no Content-Length);
- ``endless-line``: an event stream whose one ``data:`` line never ends; ``endless-event``: an event of
  ``data:`` lines that never ends (no blank line);
- ``stall``: nothing at all after the request; ``keepalives``: an event stream with a keep-alive every
  0.25 s for ``quiet_s``, then the result;
- ``redirect``: 307 with an empty body; ``empty-502``: 502 with an empty body; ``deep``: a result nested
  100,000 levels deep;
- ``forever``: a task that stays ``working`` with ``pollIntervalMs: 0``; ``malformed``: a result that is not a
  ``CallToolResult`` (``content`` a string);
- ``unauthorized``: 401 with a Bearer challenge naming the upstream's resource metadata (:data:`CHALLENGE`).

``tools/list`` lists them (a valid listing: the proxy reads its ``Mcp-Param-*`` annotations); ``tasks/get``
says ``working`` (``pollIntervalMs: 0``); ``tasks/cancel`` is never answered; ``subscriptions/listen``
is refused (-32601) unless ``quiet_listen`` is set: then it is acknowledged after ``quiet_s`` of silence.
Every request is counted by method (and tool name) with its arrival time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from ext_tasks.protocol.errors import INVALID_REQUEST, METHOD_NOT_FOUND

TOOLS = ("ok", "huge", "endless-line", "endless-event", "stall", "keepalives", "redirect", "empty-502", "deep",
         "forever", "unauthorized", "malformed")  # fmt: skip
CHALLENGE = 'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"'
_CHUNK = b"x" * 65536
#: The task ``forever`` starts, as every ``tasks/get`` reads it.
_FOREVER = {
    "taskId": "t-forever",
    "status": "working",
    "pollIntervalMs": 0,
    "createdAt": "2026-01-01T00:00:00Z",
    "lastUpdatedAt": "2026-01-01T00:00:00Z",
    "ttlMs": 60_000,
}


class HostileServer:
    def __init__(self, *, huge_bytes: int = 64 * 1024 * 1024, quiet_s: float = 3.0, quiet_listen: bool = False) -> None:
        self.huge_bytes = huge_bytes
        self.quiet_s = quiet_s
        self.quiet_listen = quiet_listen
        #: Arrival times (time.monotonic) of each method, and of ``tools/call:<name>``.
        self.arrivals: dict[str, list[float]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hostile-server", daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/mcp"

    def count(self, key: str) -> int:
        return len(self.arrivals.get(key, ()))

    def __enter__(self) -> HostileServer:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop)
        self._server = started.result(timeout=10)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # the server stops: this connection ends with it (asyncio reports a cancelled handler)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])
        }
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        message: dict[str, Any] = json.loads(body) if body else {}
        method = str(message.get("method", ""))
        params = message.get("params") or {}
        key = f"tools/call:{params.get('name')}" if method == "tools/call" else method
        now = time.monotonic()
        for seen in {method, key}:
            self.arrivals.setdefault(seen, []).append(now)
        answer = self._answers.get(key) or self._answers.get(method) or _not_found
        return await answer(self, message.get("id"), writer)

    # --- answers (each returns whether the connection may serve another request) --------------------------

    async def _ok(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        return await _json(writer, _result(request_id, {"content": [{"type": "text", "text": "ok"}]}))

    async def _tools(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        tools = [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]
        return await _json(writer, _result(request_id, {"tools": tools, "ttlMs": 0, "cacheScope": "private"}))

    async def _malformed(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        return await _json(writer, _result(request_id, {"resultType": "complete", "content": "not a list"}))

    async def _huge(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        head = json.dumps(_result(request_id, {"content": [{"type": "text", "text": ""}]})).encode()
        opening, closing = head.split(b'"text": ""')
        await _chunk(writer, opening + b'"text": "')
        for _ in range(self.huge_bytes // len(_CHUNK)):
            await _chunk(writer, _CHUNK)
        await _chunk(writer, b'"' + closing)
        await _chunk(writer, b"")
        return True

    async def _endless_line(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(_SSE_HEAD + b'event: message\ndata: {"jsonrpc": "2.0", "method": "notifications/message", "x": "')
        while True:
            writer.write(_CHUNK)
            await writer.drain()

    async def _endless_event(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(_SSE_HEAD + b"event: message\n")
        while True:
            writer.write(b"data: x\n" * 8192)
            await writer.drain()

    async def _stall(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        await asyncio.Event().wait()  # until the server stops
        return False

    async def _keepalives(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(_SSE_HEAD)
        ends = time.monotonic() + self.quiet_s
        while time.monotonic() < ends:
            writer.write(b": keepalive\n\n")
            await writer.drain()
            await asyncio.sleep(0.25)
        writer.write(_event(_result(request_id, {"content": [{"type": "text", "text": "kept alive"}]})))
        await writer.drain()
        return False

    async def _redirect(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        return True

    async def _empty_502(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        return True

    async def _deep(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        depth = 100_000
        body = b'{"jsonrpc": "2.0", "id": %s, "result": {"deep": ' % json.dumps(request_id).encode()
        return await _raw_json(writer, body + b"[" * depth + b"]" * depth + b"}}")

    async def _unauthorized(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        body = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": INVALID_REQUEST, "message": "Unauthorized"}}
        )
        head = b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nWWW-Authenticate: %s\r\n" % (
            CHALLENGE.encode()
        )
        writer.write(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()))
        await writer.drain()
        return True

    async def _forever(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        return await _json(writer, _result(request_id, {"resultType": "task", **_FOREVER}))

    async def _task_state(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        return await _json(writer, _result(request_id, _FOREVER))

    async def _listen(self, request_id: Any, writer: asyncio.StreamWriter) -> bool:
        if not self.quiet_listen:
            return await _not_found(self, request_id, writer)
        writer.write(_SSE_HEAD)
        await writer.drain()
        await asyncio.sleep(self.quiet_s)  # silent, as a subscription is while nothing changes
        params: dict[str, Any] = {"notifications": {}}
        writer.write(_event({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": params}))
        writer.write(_event(_result(request_id, {})))
        await writer.drain()
        return False

    _answers: dict[str, Callable[[HostileServer, Any, asyncio.StreamWriter], Awaitable[bool]]] = {
        "tools/list": _tools,
        "tasks/get": _task_state,
        "tasks/cancel": _stall,
        "subscriptions/listen": _listen,
        "tools/call:ok": _ok,
        "tools/call:huge": _huge,
        "tools/call:endless-line": _endless_line,
        "tools/call:endless-event": _endless_event,
        "tools/call:stall": _stall,
        "tools/call:keepalives": _keepalives,
        "tools/call:redirect": _redirect,
        "tools/call:empty-502": _empty_502,
        "tools/call:deep": _deep,
        "tools/call:forever": _forever,
        "tools/call:unauthorized": _unauthorized,
        "tools/call:malformed": _malformed,
    }


_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


async def _json(writer: asyncio.StreamWriter, message: dict[str, Any], status: bytes = b"200 OK") -> bool:
    return await _raw_json(writer, json.dumps(message).encode(), status)


async def _raw_json(writer: asyncio.StreamWriter, body: bytes, status: bytes = b"200 OK") -> bool:
    head = b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(body))
    writer.write(head + body)
    await writer.drain()
    return True


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


async def _not_found(server: HostileServer, request_id: Any, writer: asyncio.StreamWriter) -> bool:
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"}}
    return await _json(writer, error, b"404 Not Found")
