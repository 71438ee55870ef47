"""Reading another server's answers with bounds (``ext_tasks.answers``), on hand-made httpx responses whose
bytes arrive in the chunks the test chooses: an event stream parsed the same however it is cut (CRLF
split across chunks included), a limit per event (a stream of many small events is fine, one event of
many small lines is not), and a body refused before it is read when its length is declared too large.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from ext_tasks import answers
from ext_tasks.protocol.errors import ParseError

pytestmark = pytest.mark.anyio


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks = chunks
        self.served = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.served += 1
            yield chunk


def _response(chunks: Sequence[bytes], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream", **(headers or {})}, stream=Chunks(chunks))


async def _messages(chunks: Sequence[bytes], limit: int = 1000) -> list[dict[str, Any]]:
    return [message async for message in answers.messages(_response(chunks), limit)]


STREAM = (
    b": keepalive\r\n\r\n"
    b'event: message\r\ndata: {"a":\r\ndata:  1}\r\n\r\n'
    b'data: {"b": 2}\r\r'
    b'event: other\ndata: {"skipped": true}\n\n'
    b'id: 7\nretry: 10\ndata: {"c": 3}\n\n'
    b'data: {"unfinished": true}\n'
)


async def test_an_event_stream_reads_the_same_however_it_is_cut() -> None:
    whole = await _messages([STREAM])
    assert whole == [{"a": 1}, {"b": 2}, {"c": 3}]
    for cut in range(1, len(STREAM)):
        assert await _messages([STREAM[:cut], STREAM[cut:]]) == whole, cut
    assert await _messages([STREAM[i : i + 1] for i in range(len(STREAM))]) == whole


async def test_the_limit_is_per_event() -> None:
    small = b'data: {"n": 1}\n\n' * 1000  # 16 KB of events of 16 bytes
    assert len(await _messages([small], limit=64)) == 1000
    many_lines = b"event: message\n" + b"data: 1\n" * 100
    with pytest.raises(answers.AnswerTooLarge):
        await _messages([many_lines], limit=500)


async def test_a_line_that_never_ends_stops_at_the_limit() -> None:
    stream = Chunks([b"data: " + b"x" * 100] * 1000)
    with pytest.raises(answers.AnswerTooLarge):
        async for _ in answers.messages(httpx.Response(200, stream=stream), 1000):
            pass
    assert stream.served <= 11, "reading stopped at the limit"


async def test_data_that_is_not_json_or_too_deep_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        await _messages([b"data: {not json\n\n"])
    deep = b"data: " + b"[" * 200 + b"]" * 200 + b"\n\n"
    with pytest.raises(ParseError, match="nested deeper than 100 levels"):
        await _messages([deep], limit=10_000)


async def test_a_body_is_read_up_to_the_limit() -> None:
    assert await answers.read_body(httpx.Response(200, stream=Chunks([b"ab", b"cd"])), 4) == b"abcd"
    declared = Chunks([b"x" * 10])
    with pytest.raises(answers.AnswerTooLarge):
        await answers.read_body(httpx.Response(200, headers={"content-length": "10"}, stream=declared), 4)
    assert declared.served == 0, "refused on its Content-Length, before reading"
    endless = Chunks([b"x" * 3] * 100)
    with pytest.raises(answers.AnswerTooLarge):
        await answers.read_body(httpx.Response(200, stream=endless), 10)
    assert endless.served == 4
