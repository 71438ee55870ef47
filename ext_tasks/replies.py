"""The one reply type every surface answers with (the engine, the legacy shim, the proxy), and the one
interface the HTTP edge calls.

A reply is a single JSON-RPC message (or none: 202/204) or a stream of messages, each with the HTTP
status and headers it is sent with. How a reply becomes bytes (JSON, or SSE) is the HTTP edge's
business; what it says is the surface's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from .auth import Caller
from .protocol.errors import ProtocolError
from .protocol.jsonrpc import RequestId, error_message

Message = dict[str, Any]
#: ``None`` in a stream stands for a keep-alive (an SSE comment).
StreamItem = Message | None
Headers = Mapping[str, Sequence[str]]


class JsonReply(msgspec.Struct, frozen=True):
    status: int
    message: Message | None  # None: no body (202 Accepted, 204, 405 ...)
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    #: Seconds the HTTP edge waits before sending it (a pacing refusal: see ``ext_tasks.pacing``).
    hold_s: float = 0.0
    #: The JSON-RPC error code of an error reply (``None``: not one), for the request metric: the
    #: outcome as the reply was made, not read back out of its message.
    error_code: int | None = None

    @property
    def wire(self) -> Message:
        """The message as the JSON object it is sent as: a typed result (``protocol.result_types``) turned
        into plain objects, for readers in process that want the wire shape (tests); ``{}`` without one."""
        return {} if self.message is None else wire_of(self.message)

    @classmethod
    def error(cls, request_id: RequestId | None, error: ProtocolError, status: int | None = None) -> JsonReply:
        """The reply for a failure: its HTTP status (unless ``status`` says otherwise), its extra headers
        (``Retry-After``, ``WWW-Authenticate``), its JSON-RPC error, and how long to hold it."""
        message = error_message(request_id, error)
        return cls(status or error.http_status, message, error.http_headers(), error.hold_s, error.code)


def wire_of(message: Message) -> Message:
    """``message`` as the JSON object it is sent as (typed results turned into plain objects)."""
    wire: Message = msgspec.to_builtins(message)
    return wire


class StreamReply(msgspec.Struct, frozen=True):
    items: AsyncIterator[StreamItem]
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)


Reply = JsonReply | StreamReply

NOT_ALLOWED: Final = JsonReply(405, None, {"Allow": "POST"})


class RequestHandler(Protocol):
    """What the HTTP edge calls: the engine, the era router in front of it and the shim, or a proxy."""

    def post(self, body: bytes, headers: Headers, caller: Caller) -> Awaitable[Reply]: ...

    async def get(self, headers: Headers, caller: Caller) -> Reply: ...

    async def delete(self, headers: Headers, caller: Caller) -> Reply: ...

    def close(self) -> None:
        """End open streams gracefully (server shutdown)."""
        ...


async def chained(first: StreamItem, rest: AsyncIterator[StreamItem]) -> AsyncIterator[StreamItem]:
    """``first``, then ``rest``; closing this closes ``rest`` (a stream primed by reading its first item)."""
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
