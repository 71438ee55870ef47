"""The Litestar app: ``POST /mcp``. Origin/Host checks, the body limit, and engine replies as HTTP.

This module never interprets MCP: it hands ``(body, headers, principal)`` to the engine (or, for
2025-11-25 traffic, to the migration shim) and writes what comes back, as one JSON object or as an SSE
stream. ``GET``/``DELETE`` serve legacy sessions only; otherwise they answer 405 (the 2026-07-28
transport has no GET stream and no sessions).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from litestar import HttpMethod, Litestar, Request, Response, get, post, route
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from migration.era import classify
from migration.shim import LegacyReply, LegacyShim
from migration.upstream import Caller

from .auth import Authenticator, Unauthenticated
from .config import LOOPBACK_HOSTS, Settings
from .engine import JsonReply, RequestHandler, StreamItem, StreamReply
from .metrics import scrape
from .protocol.errors import BodyTooLarge, ForbiddenOrigin, InternalError, InvalidRequest, ProtocolError
from .protocol.jsonrpc import encode, error_message

JSON: Final = "application/json"
_SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_KEEPALIVE: Final = b": keepalive\n\n"
_READY_TIMEOUT_S: Final = 2.0


def _headers(request: Request[Any, Any, Any]) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for raw_name, raw_value in request.scope["headers"]:
        headers.setdefault(raw_name.decode("latin-1").lower(), []).append(raw_value.decode("latin-1"))
    return headers


def _host_of(value: str) -> str:
    """The host part of a Host header (``[::1]:3001`` -> ``[::1]``, ``localhost:80`` -> ``localhost``)."""
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class OriginPolicy:
    """DNS-rebinding protection: a loopback server only answers loopback Host names and origins."""

    def __init__(self, settings: Settings) -> None:
        hosts = settings.allowed_hosts or (LOOPBACK_HOSTS if settings.bound_to_loopback else ())
        self._hosts = frozenset(host.lower() for host in hosts)
        self._origins = frozenset(origin.lower().rstrip("/") for origin in settings.allowed_origins)

    def check(self, headers: dict[str, list[str]]) -> None:
        host_values = headers.get("host", [])
        if len(host_values) > 1:
            raise ForbiddenOrigin("Forbidden: more than one Host header")
        host = _host_of(host_values[0].strip().lower()) if host_values else ""
        if self._hosts and host not in self._hosts:
            raise ForbiddenOrigin("Forbidden: Host not allowed")
        origins = headers.get("origin")
        if not origins:
            return
        origin = origins[0].strip().lower().rstrip("/")
        if len(origins) > 1 or not self._origin_allowed(origin, host):
            raise ForbiddenOrigin("Forbidden: Origin not allowed")

    def _origin_allowed(self, origin: str, host: str) -> bool:
        if origin in self._origins:
            return True
        if self._origins:
            return False
        origin_host = _host_of(urlsplit(origin).netloc)
        # With no list configured: same host as the request, or any loopback origin for a loopback server.
        return origin_host == host or (bool(self._hosts) and origin_host in self._hosts)


def _error_response(error: ProtocolError, request_id: Any = None) -> Response[bytes]:
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthenticated) else None
    return Response(
        content=encode(error_message(request_id, error)),
        status_code=error.http_status,
        media_type=JSON,
        headers=headers,
    )


async def _sse(items: AsyncIterator[StreamItem]) -> AsyncIterator[bytes]:
    async for item in items:
        yield _KEEPALIVE if item is None else b"event: message\ndata: " + encode(item) + b"\n\n"


def create_app(
    engine: RequestHandler,
    settings: Settings,
    authenticator: Authenticator,
    *,
    on_startup: Sequence[Callable[[], Awaitable[None]]] = (),
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
    shim: LegacyShim | None = None,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> Litestar:
    """The app. With ``shim``, 2025-11-25 clients are served on the same endpoint (era routing).

    ``GET /healthz`` answers while the process serves; ``GET /readyz`` also awaits ``ready`` (the task
    store's ping) and answers 503 while it fails; ``GET /metrics`` is the Prometheus scrape.
    """
    policy = OriginPolicy(settings)
    limit = settings.max_body_bytes

    def caller_of(headers: dict[str, list[str]]) -> Caller:
        authorization = headers.get("authorization")
        return Caller(authenticator.authenticate(headers), authorization[0] if authorization else None)

    @post("/mcp", status_code=200)
    async def mcp(request: Request[Any, Any, Any]) -> Response[bytes] | Stream:
        headers = _headers(request)
        try:
            policy.check(headers)
            content_type = (headers.get("content-type") or [JSON])[0].split(";")[0].strip().lower()
            if content_type != JSON:
                raise InvalidRequest(f"Invalid Request: Content-Type must be {JSON}")
            caller = caller_of(headers)
            body = await _read_body(request, limit)
        except ProtocolError as exc:
            return _error_response(exc)
        if shim is not None and classify(headers, body) == "legacy":
            return _legacy(await shim.post(body, headers, caller))
        reply = await engine.handle(body, headers, caller.principal)
        if isinstance(reply, StreamReply):
            return Stream(_sse(reply.items), media_type="text/event-stream", headers=_SSE_HEADERS)
        return _json(reply)

    @route("/mcp", http_method=[HttpMethod.GET, HttpMethod.DELETE], status_code=200)
    async def sessions(request: Request[Any, Any, Any]) -> Response[bytes] | Stream:
        """Legacy sessions only: the GET stream and DELETE. The 2026-07-28 transport answers 405."""
        headers = _headers(request)
        if shim is None or not headers.get("mcp-session-id"):
            return Response(content=b"", status_code=405, headers={"Allow": "POST"})
        try:
            policy.check(headers)
            caller = caller_of(headers)
        except ProtocolError as exc:
            return _error_response(exc)
        if request.method == HttpMethod.GET:
            return _legacy(await shim.get(headers, caller))
        return _legacy(await shim.delete(headers, caller))

    return Litestar(
        route_handlers=[mcp, sessions, *_operations_routes(ready)],
        request_max_body_size=limit,
        on_startup=list(on_startup),
        # Listen streams end first (engine.close), then the callers' own shutdown (workers, store).
        on_shutdown=[engine.close, *on_shutdown],
        openapi_config=None,
        logging_config=None,
        # What Litestar refuses before our handler runs (a malformed Host header, say) still gets a
        # JSON-RPC error body, like everything else on this endpoint.
        exception_handlers={HTTPException: _framework_error},
    )


def _framework_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    status = exc.status_code if 400 <= exc.status_code < 500 else 500
    error = InvalidRequest(f"Invalid Request: {exc.detail}") if status < 500 else InternalError("Internal error")
    return Response(content=encode(error_message(None, error)), status_code=status, media_type=JSON)


def _operations_routes(ready: Callable[[], Awaitable[None]] | None) -> list[HTTPRouteHandler]:
    """Liveness, readiness (the task store answers) and the Prometheus scrape."""

    @get("/healthz", sync_to_thread=False)
    def healthz() -> Response[bytes]:
        return Response(content=b'{"status":"ok"}', media_type=JSON)

    @get("/readyz")
    async def readyz() -> Response[bytes]:
        if ready is not None:
            try:
                async with asyncio.timeout(_READY_TIMEOUT_S):
                    await ready()
            except (ProtocolError, TimeoutError, OSError):
                return Response(content=b'{"status":"unavailable"}', status_code=503, media_type=JSON)
        return Response(content=b'{"status":"ready"}', media_type=JSON)

    @get("/metrics", sync_to_thread=False)
    def metrics() -> Response[bytes]:
        body, content_type = scrape()
        return Response(content=body, media_type=content_type)

    return [healthz, readyz, metrics]


def _legacy(reply: LegacyReply) -> Response[bytes] | Stream:
    if reply.stream is not None:
        return Stream(_sse(reply.stream), media_type="text/event-stream", headers={**_SSE_HEADERS, **reply.headers})
    if reply.message is None:
        return Response(content=b"", status_code=reply.status, headers=reply.headers)
    return Response(content=encode(reply.message), status_code=reply.status, media_type=JSON, headers=reply.headers)


def _json(reply: JsonReply) -> Response[bytes]:
    if reply.message is None:
        return Response(content=b"", status_code=202)
    return Response(content=encode(reply.message), status_code=reply.status, media_type=JSON)


async def _read_body(request: Request[Any, Any, Any], limit: int) -> bytes:
    try:
        return await request.body()
    except HTTPException as exc:
        if exc.status_code == 413:
            raise BodyTooLarge(f"Request body too large: the limit is {limit} bytes") from None
        raise InvalidRequest(f"Invalid Request: {exc.detail}") from None
