"""The loader's HTTP/1.1: one keep-alive connection per virtual user, on raw asyncio streams.

A general-purpose client (httpx) costs several times more CPU per request than the servers it would
measure here; this one writes a request in one buffer and reads exactly the response's length, chunked
bodies and event streams included, so the loader stays cheap beside the server under test.
"""

from __future__ import annotations

import asyncio
from typing import Final

#: How long one request may take before it counts as an error (the connection is then dropped).
REQUEST_TIMEOUT_S: Final = 15.0


class Connection:
    """One HTTP/1.1 keep-alive connection; ``post`` sends a request and reads the whole response."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.requests = 0
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: bytes, headers: bytes, body: bytes) -> tuple[int, bytes, bytes]:
        """Status, head (the raw header block) and body of the response to one POST."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        self.writer.write(
            b"POST "
            + path
            + b" HTTP/1.1\r\n"
            + self._host_header
            + headers
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = -1
        chunked = False
        closing = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            lowered = name.strip().lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif lowered == b"connection" and b"close" in value.lower():
                closing = True
        if chunked:
            payload = await self._read_chunked()
        elif length >= 0:
            payload = await self.reader.readexactly(length)
        else:  # no length: the body ends with the connection
            payload = await self.reader.read()
            closing = True
        if closing:
            self.close()
        self.requests += 1
        return status, head, payload

    async def _read_chunked(self) -> bytes:
        assert self.reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)


def header_value(head: bytes, name: bytes) -> bytes | None:
    """One header of a raw response head (``name`` lower-case), or None."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def sse_response(payload: bytes) -> bytes:
    """The JSON-RPC response an event-stream body carries (its last ``data:`` event with a result or an
    error); notifications before it are skipped."""
    found = b""
    for event in payload.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if b'"result"' in data or b'"error"' in data:
            found = data
    return found
