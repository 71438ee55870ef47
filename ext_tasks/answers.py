"""What another server answers over HTTP, read with bounds: ``ext-tasks proxy`` reading its upstream, and
the client reading any server.

httpx reads a body whole (``aread``), and an event stream's line ends only at a newline that may never
come (httpx-sse buffers the line, then every ``data:`` line of the event): the other server would decide
how much memory this process uses. Here every read counts as it goes and stops at a limit with
:class:`AnswerTooLarge`: a JSON body as a whole (refused before reading when its ``Content-Length`` says
so), an event stream per event (its lines so far and the unfinished one), so a stream may run for hours
as long as each message in it stays under the limit. That is why this module parses the event stream
itself (the format is a few lines of rules, and httpx-sse has no bound to set); it follows the SSE
standard's interpretation for the fields this protocol uses (``event``, ``data``, comments).

Every JSON value goes through the project's decoder (:func:`~.protocol.jsonrpc.decode_json`: nothing
nested deeper than 100 levels), which raises :class:`~.protocol.errors.ParseError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

import httpx

from .protocol.jsonrpc import decode_json

#: The default limit of one answer (a body, or one event of a stream): 16 MiB, sixteen times the largest
#: task result this server keeps by default (``EXT_TASKS_MAX_RESULT_BYTES``).
DEFAULT_LIMIT: Final = 16 * 1024 * 1024


class AnswerTooLarge(Exception):
    """A body, or one event of a stream, went past ``limit`` bytes; reading stopped there."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit} bytes")
        self.limit = limit


async def read_body(response: httpx.Response, limit: int) -> bytes:
    """The whole body of ``response``, or :class:`AnswerTooLarge` once it passes ``limit`` bytes."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise AnswerTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def json_object(raw: bytes) -> dict[str, Any] | None:
    """``raw`` as a JSON object, ``None`` if it is JSON but not an object; ``ParseError`` if it is not
    JSON or nested too deep."""
    decoded = decode_json(raw)
    return decoded if isinstance(decoded, dict) else None


async def messages(response: httpx.Response, limit: int) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an event stream: the data of each ``message`` event (or unnamed one) that
    is a JSON object. Comments (keep-alives) and other events are skipped. Raises :class:`AnswerTooLarge`
    for an event over ``limit`` bytes and :class:`ParseError` for data that is not JSON."""
    event = b""
    data = bytearray()  # the SSE standard's data buffer: each line and a LF (no per-line object to keep)
    async for line in _lines(response.aiter_bytes(), limit):
        if not line:  # a blank line ends the event
            if data and event in (b"", b"message"):
                del data[-1]
                message = json_object(bytes(data))
                if message is not None:
                    yield message
            event, data = b"", bytearray()
            continue
        if line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"event":
            event = value
        elif field == b"data":
            data += value + b"\n"
    # An event without its closing blank line is not dispatched (the SSE standard): the stream broke.


async def _lines(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """The lines of a stream (ended by CRLF, CR or LF), keeping at most ``limit`` bytes of one event: the
    lines since the last blank one, and the line not finished yet."""
    unfinished = bytearray()
    held_cr = b""  # a CR at the end of a chunk may be the first half of a CRLF
    event_size = 0
    async for received in chunks:
        chunk = held_cr + received
        held_cr = b"\r" if chunk.endswith(b"\r") else b""
        if held_cr:
            chunk = chunk[:-1]
        *ended, rest = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        for part in ended:
            unfinished += part
            line = bytes(unfinished)
            unfinished.clear()
            event_size = event_size + len(line) + 1 if line else 0
            if event_size > limit:
                raise AnswerTooLarge(limit)
            yield line
        unfinished += rest
        if event_size + len(unfinished) > limit:
            raise AnswerTooLarge(limit)
    if held_cr or unfinished:
        yield bytes(unfinished)
