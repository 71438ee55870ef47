"""Server-sent events, both ways: the frames this server writes, and the events it reads from an
upstream server (``ext-tasks proxy``), through httpx-sse.

Every message is one ``message`` event whose data is the JSON-RPC message; a keep-alive is an SSE
comment (what ``None`` stands for in a stream of replies).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Final

import httpx
from httpx_sse import EventSource

from .protocol.jsonrpc import encode

CONTENT_TYPE: Final = "text/event-stream"
KEEPALIVE: Final = b": keepalive\n\n"


def frame(message: dict[str, Any] | None) -> bytes:
    """The bytes of one event (``None``: a keep-alive comment)."""
    return KEEPALIVE if message is None else b"event: message\ndata: " + encode(message) + b"\n\n"


def is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith(CONTENT_TYPE)


async def messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an upstream's SSE response (comments and other events skipped)."""
    async for event in EventSource(response).aiter_sse():
        if event.data and event.event in ("message", ""):
            decoded = json.loads(event.data)
            if isinstance(decoded, dict):
                yield decoded
