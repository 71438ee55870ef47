"""``ext-tasks proxy``: the migration shim in front of any remote 2026-07-28 tasks server.

Legacy (2025-11-25) traffic is translated by the same :class:`~.shim.LegacyShim` the server uses in
process, speaking the Tasks extension to the upstream through :class:`~.upstream.HttpUpstream`.
Modern traffic is passed through unchanged, so one proxy URL serves both eras.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from ext_tasks import sse
from ext_tasks.auth import Principal
from ext_tasks.protocol.errors import InternalError
from ext_tasks.protocol.jsonrpc import Message, encode, id_of, to_wire
from ext_tasks.replies import JsonReply, Reply, StreamItem, StreamReply

from .upstream import HttpUpstream

#: Request headers a modern client sends that the upstream needs to see.
_FORWARDED: Final = ("mcp-protocol-version", "mcp-method", "mcp-name", "authorization", "idempotency-key")


class ForwardingHandler:
    """Answers modern requests by relaying them to the upstream, byte for byte in, message by message out."""

    def __init__(self, upstream: HttpUpstream) -> None:
        self.upstream = upstream

    async def handle_message(
        self, message: Message, headers: Mapping[str, Sequence[str]], principal: Principal
    ) -> Reply:
        return await self.handle(encode(to_wire(message)), headers, principal)

    async def handle(self, body: bytes, headers: Mapping[str, Sequence[str]], principal: Principal) -> Reply:
        forwarded = {
            name: values[0]
            for name, values in headers.items()
            if values and (name in _FORWARDED or name.startswith("mcp-param-"))
        }
        forwarded |= {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        client = self.upstream.client
        request = client.build_request("POST", self.upstream.url, headers=forwarded, content=body)
        try:
            response = await client.send(request, stream=True)
        except Exception:  # noqa: BLE001 - any transport failure is "upstream unavailable" to the client
            return JsonReply.error(id_of(body), InternalError("Upstream server unavailable"), 502)
        if sse.is_event_stream(response):

            async def items() -> AsyncIterator[StreamItem]:
                try:
                    async for message in sse.messages(response):
                        yield message
                finally:
                    await response.aclose()

            return StreamReply(items())
        raw = await response.aread()
        await response.aclose()
        if response.status_code == 202 or not raw:
            return JsonReply(202, None)
        try:
            message: Any = json.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            error = InternalError(f"Upstream answered HTTP {response.status_code} without JSON-RPC")
            return JsonReply.error(id_of(body), error, 502)
        retry_after = response.headers.get("retry-after")
        return JsonReply(response.status_code, message, {"Retry-After": retry_after} if retry_after else {})

    def close(self) -> None:
        return None
