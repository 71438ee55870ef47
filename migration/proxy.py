"""``ext-tasks proxy``: the migration shim in front of any remote 2026-07-28 tasks server.

Legacy (2025-11-25) traffic is translated by the same :class:`~.shim.LegacyShim` the server uses in
process, speaking the Tasks extension to the upstream through :class:`~.upstream.HttpUpstream`.
Modern traffic is passed through unchanged, so one proxy URL serves both eras. Either way the
upstream's answers are read with bounds (:mod:`.remote`): what cannot be relayed is answered as a
JSON-RPC error with a 5xx status, or ends a stream already begun with that error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from ext_tasks import sse, tracing
from ext_tasks.auth import Principal
from ext_tasks.failures import Guard
from ext_tasks.protocol.jsonrpc import Message, encode, id_of, to_wire
from ext_tasks.replies import JsonReply, Reply, StreamReply, chained

from .remote import UpstreamFailed
from .upstream import HttpUpstream

#: What cannot be relayed, answered with its own 5xx status (or ending a stream already begun).
_FAILURES: Final = Guard(logging.getLogger("ext_tasks.migration.proxy"), "relaying %s failed")
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
        tracer = tracing.tracer
        if tracer is not None:
            request = _request_of(body)
            if request is not None:
                params = request["params"]
                version = (headers.get("mcp-protocol-version") or [""])[0].strip()[:32] or None
                method = str(request["method"])
                target = tracing.plain_target(method, params)
                span = tracing.request_span(
                    tracer, method, params, request.get("id"), headers, protocol_version=version, target=target
                )
                return await tracing.traced_reply(span, self._relay_traced(request, headers))
        return await self._relay(body, headers)

    async def _relay_traced(self, request: dict[str, Any], headers: Mapping[str, Sequence[str]]) -> Reply:
        """The request relayed as the child of this proxy's span: its ``_meta`` and the W3C headers name
        the span (the client's own context is the span's parent)."""
        meta = request["params"].setdefault("_meta", {})
        if isinstance(meta, dict):
            tracing.inject(meta)
        context: dict[str, str] = {}
        tracing.inject(context)
        return await self._relay(_encoder.encode(request), headers, context)

    async def _relay(
        self, body: bytes, headers: Mapping[str, Sequence[str]], context: Mapping[str, str] | None = None
    ) -> Reply:
        forwarded = {
            name: values[0]
            for name, values in headers.items()
            if values and (name in _FORWARDED or name.startswith("mcp-param-"))
        }
        forwarded |= {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if context:
            forwarded |= context
        # The header names the method without decoding the body (the upstream checks that they agree);
        # it only chooses how long the upstream may stay silent.
        method = forwarded.get("mcp-method", "")
        reading = self.upstream.reading
        request_id = id_of(body)
        failure = _FAILURES.catching(request_id, method)
        with failure:
            response = await reading.open(method, self.upstream.url, forwarded, body)
            if not sse.is_event_stream(response):
                message = await reading.message(method, response)
                if message is None:
                    return JsonReply(202, None)
                return JsonReply(response.status_code, message, _relayed_headers(response.headers))
            messages = reading.messages(method, response)
            # The first message is read before the stream is answered, so an upstream stream that fails
            # from the start (too large, silent, not JSON) is a 5xx like a JSON answer, not a 200.
            first = await anext(messages, None)
            if first is None:
                raise UpstreamFailed("Upstream answered an event stream without a message")
            # A stream that breaks off (too large an event, silence, a broken connection) ends with the
            # error as the request's response; closing it closes the upstream's.
            return StreamReply(_FAILURES.stream(request_id, method, chained(first, messages)))
        return failure.reply

    def close(self) -> None:
        return None


_encoder: Final = msgspec.json.Encoder()


def _request_of(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON-RPC request object with object params (else ``None``: relayed as it is, the
    upstream answers what is wrong with it)."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("method"), str):
        return None
    params = decoded.setdefault("params", {})
    return decoded if isinstance(params, dict) else None


#: Response headers the client needs from the upstream: when to come back, and how to authorize (the
#: upstream is the resource server; its challenge names its metadata).
_RELAYED_HEADERS: Final = {"retry-after": "Retry-After", "www-authenticate": "WWW-Authenticate"}


def _relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {spelled: headers[name] for name, spelled in _RELAYED_HEADERS.items() if name in headers}
