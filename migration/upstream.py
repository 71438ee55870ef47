"""Where the shim sends its 2026-07-28 requests: this server's engine in process, or a remote server.

Both take the same :class:`ModernCall` (a method, its params, the per-request ``_meta`` a legacy
session implies), which is what lets one translator serve as the in-process shim and as ``ext-tasks
proxy``. In process the call reaches the engine as a request with its envelope already known: nothing
is encoded, decoded or checked twice. A remote server gets it as a network client would send it (a
body and the SEP-2243 headers).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ext_tasks import sse, tracing
from ext_tasks.auth import Caller
from ext_tasks.engine import Engine
from ext_tasks.protocol.envelope import META_STATUS_ONLY, META_TTL_HINT, Envelope
from ext_tasks.protocol.jsonrpc import Request, encode
from ext_tasks.protocol.outbound import InvalidHeaderAnnotation, header_params_of, mirror_headers
from ext_tasks.protocol.result_types import ListToolsResult
from ext_tasks.protocol.versions import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    MODERN_2026_07_28,
)
from ext_tasks.replies import JsonReply

from .modern_results import typed_response
from .remote import Reading, UpstreamFailed

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ModernCall:
    method: str
    params: dict[str, Any]
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None = None
    log_level: str | None = None
    progress_token: str | int | None = None
    #: ``tasks/get`` for the status only (the shim's legacy status reads; this project's ``_meta`` key).
    status_only: bool = False
    ttl_hint_ms: int | None = None

    def envelope(self) -> Envelope:
        return Envelope(
            protocol_version=MODERN_2026_07_28,
            client_capabilities=self.capabilities,
            client_info=self.client_info,
            log_level=self.log_level,
            progress_token=self.progress_token,
            ttl_hint_ms=self.ttl_hint_ms,
            status_only=self.status_only,
        )

    def params_without_meta(self) -> dict[str, Any]:
        return {key: value for key, value in self.params.items() if key not in ("_meta", "task")}

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            META_PROTOCOL_VERSION: MODERN_2026_07_28,
            META_CLIENT_CAPABILITIES: self.capabilities,
        }
        if self.client_info is not None:
            meta[META_CLIENT_INFO] = self.client_info
        if self.log_level is not None:
            meta[META_LOG_LEVEL] = self.log_level
        if self.progress_token is not None:
            meta["progressToken"] = self.progress_token
        if self.ttl_hint_ms is not None:
            meta[META_TTL_HINT] = self.ttl_hint_ms
        if self.status_only:
            meta[META_STATUS_ONLY] = True
        params = self.params_without_meta()
        params["_meta"] = meta
        return {"jsonrpc": "2.0", "id": f"shim-{next(_ids)}", "method": self.method, "params": params}

    def headers(self, header_params: Mapping[str, str]) -> dict[str, str]:
        """The SEP-2243 headers that mirror the body (``Mcp-Param-*`` from the tool's schema)."""
        return mirror_headers(MODERN_2026_07_28, self.method, self.params, header_params)


class ModernUpstream(Protocol):
    def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
        """Every message of the reply: notifications first, then the JSON-RPC response, whose ``result``
        is the typed result of ``call.method`` (``migration.modern_results``)."""
        ...

    async def task_support(self, caller: Caller) -> dict[str, str]:
        """Each tool's task policy (``forbidden``/``optional``/``required``), for legacy ``tools/list``."""
        ...

    async def close(self) -> None: ...


class EngineUpstream:
    """This server's own engine, called in process with the legacy caller's principal."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
        request = Request(id=f"shim-{next(_ids)}", method=call.method, params=call.params_without_meta())
        reply = await self.engine.call(request, call.envelope(), caller.principal)
        # The engine's results are typed already: the shim reads them as they are.
        if isinstance(reply, JsonReply):
            if reply.message is not None:
                yield typed_response(call.method, reply.message)
            return
        async for item in reply.items:
            if item is not None:
                yield typed_response(call.method, item)

    async def task_support(self, caller: Caller) -> dict[str, str]:
        return {name: tool.task for name, tool in self.engine.registry.tools.items()}

    async def close(self) -> None:
        return None


class HttpUpstream:
    """A remote 2026-07-28 server with the Tasks extension, for ``ext-tasks proxy``.

    The upstream's task policy is not on the wire (2026-07-28 has no ``execution.taskSupport``), so
    every tool is offered to legacy clients as ``optional``: the upstream decides per call anyway.
    ``Mcp-Param-*`` headers are derived from the upstream's own ``tools/list``.
    """

    def __init__(self, url: str, *, reading: Reading | None = None) -> None:
        self.url = url
        #: The limits the upstream's answers are read with (size, silence), and the httpx client.
        self.reading = reading or Reading()
        self._header_params: dict[str, dict[str, str]] | None = None

    async def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
        """Raises an :class:`~.remote.UpstreamFailed` when the answer cannot be relayed."""
        header_params: Mapping[str, str] = {}
        if call.method == "tools/call":
            header_params = (await self._tools(caller)).get(str(call.params.get("name")), {})
        headers = {
            **call.headers(header_params),
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if caller.authorization is not None:
            headers["Authorization"] = caller.authorization
        body = call.body()
        if tracing.tracer is not None:  # the legacy request's span is the upstream request's parent
            tracing.inject(body["params"]["_meta"])
            tracing.inject(headers)
        response = await self.reading.open(call.method, self.url, headers, encode(body))
        if sse.is_event_stream(response):
            async with contextlib.aclosing(self.reading.messages(call.method, response)) as messages:
                async for message in messages:
                    yield typed_response(call.method, message)
            return
        answer = await self.reading.message(call.method, response)
        if answer is None:  # 202 to a request: no JSON-RPC response where one was due
            raise UpstreamFailed("Upstream answered HTTP 202 to a request")
        yield typed_response(call.method, answer)

    async def _tools(self, caller: Caller) -> dict[str, dict[str, str]]:
        if self._header_params is None:
            listing = ModernCall("tools/list", {}, {})
            found: dict[str, dict[str, str]] = {}
            async for message in self.send(listing, caller):
                listed = message.get("result")
                for tool in listed.tools if isinstance(listed, ListToolsResult) else ():
                    try:
                        found[tool["name"]] = header_params_of(tool)
                    except InvalidHeaderAnnotation:  # not mirrored: the upstream decides what it takes
                        found[tool["name"]] = {}
            self._header_params = found
        return self._header_params

    async def task_support(self, caller: Caller) -> dict[str, str]:
        return dict.fromkeys(await self._tools(caller), "optional")

    async def close(self) -> None:
        await self.reading.close()
