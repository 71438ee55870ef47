"""Both eras on one endpoint: the request handler that sends each request to the 2026-07-28 engine or to
the 2025-11-25 shim (protocol.md §6), decided without guessing, and decoding a body at most once.

Modern (2026-07-28): the ``_meta`` protocol-version key, or a modern (or unknown) ``MCP-Protocol-Version``
header. Legacy (2025-11-25 and older): an ``Mcp-Session-Id``, a legacy header, ``initialize`` without the
modern ``_meta`` key, a JSON-RPC response from the client, or no version signal at all.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Final, Literal, Protocol

from ext_tasks.auth import Caller, Principal
from ext_tasks.failures import Guard
from ext_tasks.protocol.envelope import Headers
from ext_tasks.protocol.errors import ProtocolError
from ext_tasks.protocol.jsonrpc import Message, Request, Response, decode_message
from ext_tasks.protocol.versions import META_PROTOCOL_VERSION, MODERN_VERSIONS
from ext_tasks.replies import NOT_ALLOWED, JsonReply, Reply

from .shim import LegacyShim
from .translate import LEGACY_VERSIONS

Era = Literal["modern", "legacy"]

#: A body that decodes in neither era, answered with its own HTTP status.
_FAILURES: Final = Guard(logging.getLogger("ext_tasks.migration"), "request %s failed")


class ModernHandler(Protocol):
    """The 2026-07-28 side: this server's engine, or ``ext-tasks proxy``'s forwarding to a remote one."""

    async def handle(self, body: bytes, headers: Headers, principal: Principal) -> Reply: ...

    async def handle_message(self, message: Message, headers: Headers, principal: Principal) -> Reply: ...

    def close(self) -> None: ...


class EraRouter:
    """The :class:`~ext_tasks.replies.RequestHandler` of a server that serves both eras."""

    def __init__(self, modern: ModernHandler, legacy: LegacyShim) -> None:
        self.modern = modern
        self.legacy = legacy

    def post(self, body: bytes, headers: Headers, caller: Caller) -> Awaitable[Reply]:
        version = _version(headers)
        if version in MODERN_VERSIONS:
            # The fast path: every modern client sends the header, and the engine decodes the body once
            # (its coroutine is returned as is, without one of our own around it).
            # A stray Mcp-Session-Id on a modern request is ignored, as the 2026-07-28 transport says.
            return self.modern.handle(body, headers, caller.principal)
        if headers.get("mcp-session-id"):
            return self.legacy.post(body, headers, caller)
        return self._post_unversioned(body, headers, caller, version)

    async def _post_unversioned(self, body: bytes, headers: Headers, caller: Caller, version: str) -> Reply:
        """A request with neither a modern version header nor a session: its body decides."""
        message = _FAILURES.decode(body)
        if isinstance(message, JsonReply):
            return message  # undecodable: the answer is the same in both eras (the error, and its HTTP status)
        if era_of(version, message) == "modern":
            return await self.modern.handle_message(message, headers, caller.principal)
        return await self.legacy.post_message(message, headers, caller)

    async def get(self, headers: Headers, caller: Caller) -> Reply:
        return await self.legacy.get(headers, caller) if headers.get("mcp-session-id") else NOT_ALLOWED

    async def delete(self, headers: Headers, caller: Caller) -> Reply:
        return await self.legacy.delete(headers, caller) if headers.get("mcp-session-id") else NOT_ALLOWED

    def close(self) -> None:
        self.modern.close()


def _version(headers: Headers) -> str:
    return (headers.get("mcp-protocol-version") or [""])[0].strip()


def era_of(version: str, message: Message | None) -> Era:
    """The era of a request without a modern ``MCP-Protocol-Version`` header or a session, from its
    decoded message (``None``: the body did not decode)."""
    if isinstance(message, Response):
        return "legacy"  # a client's response to a server→client request: sessions only
    if message is not None:
        meta = message.params.get("_meta")
        if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
            return "modern"
        if isinstance(message, Request) and message.method == "initialize":
            return "legacy"
    if version and version not in LEGACY_VERSIONS:
        return "modern"  # an unknown version gets the structured -32022 of the modern path
    return "legacy"


def classify(headers: Headers, body: bytes) -> Era:
    """The era of a whole request (headers and body), as :meth:`EraRouter.post` decides it."""
    version = _version(headers)
    if version in MODERN_VERSIONS:
        return "modern"
    if headers.get("mcp-session-id"):
        return "legacy"
    try:
        message: Message | None = decode_message(body)
    except ProtocolError:
        message = None
    return era_of(version, message)
