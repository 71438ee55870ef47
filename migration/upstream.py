"""Where the shim sends its 2026-07-28 requests: this server's engine in process, or a remote server.

Both speak the same request interface a network client uses (a body, the SEP-2243 headers, a caller),
which is what lets one translator serve as the in-process shim and as ``ext-tasks proxy``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ext_tasks.auth import Principal
from ext_tasks.engine import Engine, JsonReply
from ext_tasks.protocol.envelope import NAME_FIELDS, encode_header_value
from ext_tasks.protocol.jsonrpc import encode
from ext_tasks.protocol.versions import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    MODERN_2026_07_28,
)

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the legacy client is: its principal here, and its credentials to forward upstream."""

    principal: Principal
    authorization: str | None = None


@dataclass(frozen=True, slots=True)
class ModernCall:
    method: str
    params: dict[str, Any]
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None = None
    log_level: str | None = None
    progress_token: str | int | None = None
    extra_meta: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            **self.extra_meta,
            META_PROTOCOL_VERSION: MODERN_2026_07_28,
            META_CLIENT_CAPABILITIES: self.capabilities,
        }
        if self.client_info is not None:
            meta[META_CLIENT_INFO] = self.client_info
        if self.log_level is not None:
            meta[META_LOG_LEVEL] = self.log_level
        if self.progress_token is not None:
            meta["progressToken"] = self.progress_token
        params = {key: value for key, value in self.params.items() if key not in ("_meta", "task")}
        params["_meta"] = meta
        return {"jsonrpc": "2.0", "id": f"shim-{next(_ids)}", "method": self.method, "params": params}

    def headers(self, header_params: Mapping[str, str]) -> dict[str, str]:
        """The SEP-2243 headers that mirror the body (``Mcp-Param-*`` from the tool's schema)."""
        headers = {"MCP-Protocol-Version": MODERN_2026_07_28, "Mcp-Method": self.method}
        name_field = NAME_FIELDS.get(self.method)
        if name_field is not None and isinstance(self.params.get(name_field), str):
            headers["Mcp-Name"] = encode_header_value(self.params[name_field])
        arguments = self.params.get("arguments") or {}
        for header, argument in header_params.items():
            value = arguments.get(argument)
            if value is not None:
                text = value if isinstance(value, str) else json.dumps(value)
                headers[f"Mcp-Param-{header}"] = encode_header_value(text)
        return headers


class ModernUpstream(Protocol):
    def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
        """Every message of the reply: notifications first, then the JSON-RPC response."""
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
        header_params: Mapping[str, str] = {}
        if call.method == "tools/call":
            tool = self.engine.registry.tools.get(str(call.params.get("name")))
            header_params = tool.header_params if tool is not None else {}
        headers = {name.lower(): [value] for name, value in call.headers(header_params).items()}
        # The shim counts its own waits (a GET stream, a tasks/result): what it opens for them is not
        # counted a second time.
        reply = await self.engine.handle(encode(call.body()), headers, caller.principal, own_wait=False)
        if isinstance(reply, JsonReply):
            if reply.message is not None:
                yield reply.message
            return
        async for item in reply.items:
            if item is not None:
                yield item

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

    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        import httpx

        self.url = url
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, read=None))
        self._header_params: dict[str, dict[str, str]] | None = None

    async def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
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
        async with self.client.stream("POST", self.url, headers=headers, content=encode(call.body())) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                async for message in sse_messages(response.aiter_lines()):
                    yield message
                return
            raw = await response.aread()
        try:
            decoded: object = json.loads(raw)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            yield decoded
            return
        error = {"code": -32603, "message": f"Upstream answered HTTP {response.status_code} without JSON-RPC"}
        yield {"jsonrpc": "2.0", "id": None, "error": error}

    async def _tools(self, caller: Caller) -> dict[str, dict[str, str]]:
        if self._header_params is None:
            listing = ModernCall("tools/list", {}, {})
            found: dict[str, dict[str, str]] = {}
            async for message in self.send(listing, caller):
                for tool in (message.get("result") or {}).get("tools", []):
                    properties = (tool.get("inputSchema") or {}).get("properties") or {}
                    found[tool["name"]] = {
                        spec["x-mcp-header"]: name
                        for name, spec in properties.items()
                        if isinstance(spec, dict) and isinstance(spec.get("x-mcp-header"), str)
                    }
            self._header_params = found
        return self._header_params

    async def task_support(self, caller: Caller) -> dict[str, str]:
        return dict.fromkeys(await self._tools(caller), "optional")

    async def close(self) -> None:
        await self.client.aclose()


async def sse_messages(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []
    if data:
        yield json.loads("\n".join(data))
