"""Server-sent events: the frames this server writes, and how to tell an event stream from a JSON answer.
(Reading another server's event stream, with a bound per event, is :mod:`.answers`.)

Every message is one ``message`` event whose data is the JSON-RPC message; a keep-alive is an SSE
comment (what ``None`` stands for in a stream of replies).
"""

from __future__ import annotations

from typing import Any, Final

import httpx

from .protocol.jsonrpc import encode

CONTENT_TYPE: Final = "text/event-stream"
KEEPALIVE: Final = b": keepalive\n\n"


def frame(message: dict[str, Any] | None) -> bytes:
    """The bytes of one event (``None``: a keep-alive comment)."""
    return KEEPALIVE if message is None else b"event: message\ndata: " + encode(message) + b"\n\n"


def is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith(CONTENT_TYPE)
