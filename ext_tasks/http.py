"""The Litestar app: ``/mcp``. Origin/Host checks, authentication, the body's size and time limits
and the client's disconnection (with :mod:`.watch`), and replies as HTTP; with OAuth on, the Protected
Resource Metadata (RFC 9728) at its well-known paths.

This module never interprets MCP: it hands ``(body, headers, caller)`` to a
:class:`~.replies.RequestHandler` (the engine, or the era router in front of the engine and the legacy
shim, or a proxy) and writes what comes back, as one JSON object or as an SSE stream. ``GET`` and
``DELETE`` go to the handler too (the 2026-07-28 engine answers them 405; legacy sessions use them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, cast
from urllib.parse import urlsplit

from litestar import Litestar, Request, Response, asgi, get, route
from litestar import types as litestar_types
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler

from . import sse
from .auth import Authenticator, Caller, Challenge, Principal
from .auth.metadata import ProtectedResource
from .config import LOOPBACK_HOSTS, Settings
from .failures import Guard, StatusRule
from .metrics import scrape
from .pacing import FREE_BODY_BYTES, MAX_HELD, Pacing, body_cost
from .protocol.errors import ForbiddenOrigin, InternalError, InvalidRequest, ProtocolError
from .protocol.jsonrpc import encode
from .replies import JsonReply, Reply, RequestHandler, StreamItem, StreamReply
from .watch import Clock, Disconnected, Receive, RequestWatch

# Plain ASGI shapes: this endpoint reads and writes the messages itself (Receive: see .watch).
Scope = Mapping[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]


JSON: Final = "application/json"
_READY_TIMEOUT_S: Final = 2.0
#: The edge's own refusals (origin, credentials, body, pacing), before any surface, with their own status.
_FAILURES: Final = Guard(logging.getLogger("ext_tasks.http"), "internal error checking a %s request")
_ALLOWED_HOSTS_KEPT: Final = 64


def _headers(scope: Mapping[str, Any]) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for raw_name, raw_value in scope["headers"]:
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
        #: Host header values seen and allowed -> their host part. A server is called by a handful of
        #: spellings of its own name; bounded all the same (without an allowed list, any host passes).
        self._allowed: dict[str, str] = {}

    def check(self, headers: dict[str, list[str]]) -> None:
        host_values = headers.get("host", [])
        if len(host_values) > 1:
            raise ForbiddenOrigin("Forbidden: more than one Host header")
        raw = host_values[0] if host_values else ""
        host = self._allowed.get(raw)
        if host is None:
            host = _host_of(raw.strip().lower())
            if self._hosts and host not in self._hosts:
                raise ForbiddenOrigin("Forbidden: Host not allowed")
            if len(self._allowed) < _ALLOWED_HOSTS_KEPT:
                self._allowed[raw] = host
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


def create_app(
    handler: RequestHandler,
    settings: Settings,
    authenticator: Authenticator,
    *,
    on_startup: Sequence[Callable[[], Awaitable[None]]] = (),
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
    ready: Callable[[], Awaitable[None]] | None = None,
    pacing: Pacing | None = None,
    tool_scopes: Iterable[str] = (),
) -> App:
    """The app serving ``handler`` at ``/mcp``.

    ``GET /healthz`` answers while the process serves; ``GET /readyz`` also awaits ``ready`` (the task
    store's ping) and answers 503 while it fails; ``GET /metrics`` is the Prometheus scrape. ``pacing``
    charges large bodies to their principal's budget (the engine's, so listens share it; a new one from
    the settings otherwise). With OAuth on (``settings.auth``), ``GET /.well-known/oauth-protected-resource``
    (and its path form) serve the metadata, whose ``scopes_supported`` has ``tool_scopes`` too.
    """
    limit = settings.max_body_bytes
    if pacing is None:
        pacing = Pacing(settings.engine.pacing_rate, settings.engine.pacing_burst)
    resource = ProtectedResource.from_options(settings.auth, tool_scopes)

    endpoint = McpEndpoint(handler, settings, authenticator, pacing, resource.challenge if resource else None)

    # A raw ASGI route: the protocol needs the body bytes and the headers, nothing of Litestar's request
    # and response machinery, which measured ~50 µs per request (performance.md §3). Requests for the
    # exact path skip Litestar's router and middleware too (App); other spellings still reach it here.
    @asgi("/mcp", is_mount=False, copy_scope=False)
    async def mcp(scope: litestar_types.Scope, receive: litestar_types.Receive, send: litestar_types.Send) -> None:
        await endpoint(cast(Scope, scope), cast(Receive, receive), cast(Send, send))

    litestar = Litestar(
        route_handlers=[mcp, *_operations_routes(ready), *(_metadata_routes(resource) if resource else [])],
        request_max_body_size=limit,
        on_startup=list(on_startup),
        # Listen streams end first (handler.close), then the callers' own shutdown (workers, store).
        on_shutdown=[handler.close, *on_shutdown],
        openapi_config=None,
        logging_config=None,
        # What Litestar refuses before our handler runs (a malformed Host header, say) still gets a
        # JSON-RPC error body, like everything else on this endpoint.
        exception_handlers={HTTPException: _framework_error},
    )
    return App(litestar, endpoint)


class App:
    """The ASGI app: ``POST|GET|DELETE /mcp`` straight to the endpoint (about 15 µs per request less
    than through Litestar's router, measured with ``bench.profile``), everything else (the operations
    routes, the lifespan, odd paths) to the Litestar app."""

    def __init__(self, litestar: Litestar, endpoint: McpEndpoint) -> None:
        self.litestar = litestar
        self._endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await self._endpoint(scope, receive, send)
        else:
            await self.litestar(cast(Any, scope), cast(Any, receive), cast(Any, send))


def _framework_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    """The framework's own refusals on the other routes (404 of an unknown path, 405 ...), as JSON-RPC
    errors with the framework's status; a 5xx tells nothing of its cause."""
    status = exc.status_code if 400 <= exc.status_code < 500 else 500
    error = InvalidRequest(f"Invalid Request: {exc.detail}") if status < 500 else InternalError("Internal error")
    reply = _FAILURES.reply(None, error, rule=StatusRule(fixed=status))
    assert reply.message is not None
    return Response(content=encode(reply.message), status_code=status, media_type=JSON)


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


#: Browser-based clients read the metadata cross-origin (it holds nothing private).
_METADATA_HEADERS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Cache-Control": "public, max-age=300",
}
_PREFLIGHT_HEADERS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, OPTIONS",
    # Some clients send MCP-Protocol-Version with every request, this one included.
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Max-Age": "86400",
}


def _metadata_routes(resource: ProtectedResource) -> list[HTTPRouteHandler]:
    """The Protected Resource Metadata (RFC 9728 §3) at the path form and the bare well-known path; a
    browser's preflight (OPTIONS) is answered too. One handler for both methods: Litestar would add an
    OPTIONS handler of its own to a GET-only route."""

    @route(list(resource.paths), http_method=["GET", "OPTIONS"], sync_to_thread=False)
    def protected_resource_metadata(request: Request[Any, Any, Any]) -> Response[bytes]:
        if request.method == "OPTIONS":
            return Response(content=b"", status_code=204, headers=_PREFLIGHT_HEADERS)
        return Response(content=resource.document, media_type=JSON, headers=_METADATA_HEADERS)

    return [protected_resource_metadata]


class McpEndpoint:
    """``/mcp`` as ASGI: every method goes to the handler, after the checks every request passes."""

    def __init__(
        self,
        handler: RequestHandler,
        settings: Settings,
        authenticator: Authenticator,
        pacing: Pacing,
        challenge: Challenge | None = None,
    ) -> None:
        self.handler = handler
        self.pacing = pacing
        #: Refusals waiting out their hold (``ext_tasks.pacing``).
        self._held = 0
        self.policy = OriginPolicy(settings)
        self.limit = settings.max_body_bytes
        self.body_timeout_s = settings.body_timeout_s
        self.authenticator = authenticator
        #: With OAuth on: what completes the challenge of a 401 or 403 raised where the resource is
        #: unknown (a tool's InsufficientScope, from the engine) with the metadata URL.
        self.challenge = challenge
        self.clock = Clock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        method = scope["method"]
        if method not in ("POST", "GET", "DELETE"):
            await _send_reply(send, None, JsonReply(405, None, {"Allow": "POST"}))
            return
        watch = RequestWatch(self.clock, receive, self.body_timeout_s)
        try:
            await self._answer(method, headers, watch, send)
        finally:
            watch.stop()

    async def _answer(self, method: str, headers: dict[str, list[str]], watch: RequestWatch, send: Send) -> None:
        body = b""
        refused = _FAILURES.catching(None, method)
        with refused:
            self.policy.check(headers)
            found = self.authenticator.authenticate(headers)
            # Static tokens and cached OAuth tokens come back as they are: no coroutine on that path.
            principal = found if isinstance(found, Principal) else await found
            authorization = headers.get("authorization")
            caller = Caller(principal, authorization[0] if authorization else None)
            if method == "POST":
                content_type = headers.get("content-type")
                if content_type != _JSON_ONLY and _media_type(content_type) != JSON:
                    raise InvalidRequest(f"Invalid Request: Content-Type must be {JSON}")
                try:
                    body = await watch.body(headers, self.limit)
                except Disconnected:
                    return  # the client went away while sending: nobody to answer
                if len(body) > FREE_BODY_BYTES:  # a large body is costly to decode, check and store
                    self.pacing.charge(caller.principal.id, body_cost(len(body)), kind="body")
        if refused.failed:
            body = b""  # a held refusal keeps nothing of the request
            await self._send_held(send, None, refused.reply)
            return
        # From here on (for a POST, from the last byte of the body), the client going away ends whatever
        # its request holds (a tool run, a legacy tasks/result wait), even before the first byte of the
        # answer.
        if method == "POST":
            answer = self.handler.post(body, headers, caller)
        elif method == "GET":
            answer = self.handler.get(headers, caller)
        else:
            answer = self.handler.delete(headers, caller)
        reply = await watch.run(answer)
        body = b""  # the answer is done with it (a held reply keeps nothing of the request)
        if reply is not None:
            await self._send_held(send, watch, reply)

    async def _send_held(self, send: Send, watch: RequestWatch | None, reply: Reply) -> None:
        """Send ``reply``, after its hold (a pacing refusal) while fewer than ``MAX_HELD`` are held."""
        if reply.headers and self.challenge is not None and isinstance(reply, JsonReply) and reply.status in (401, 403):
            reply = _challenged(reply, self.challenge)
        if isinstance(reply, JsonReply) and reply.hold_s > 0 and self._held < MAX_HELD:
            self._held += 1
            try:
                await asyncio.sleep(reply.hold_s)
            finally:
                self._held -= 1
        await _send_reply(send, watch, reply)


def _challenged(reply: JsonReply, challenge: Challenge) -> JsonReply:
    """``reply`` with its Bearer challenge naming the metadata URL (RFC 9728 §5.1), if it has one."""
    value = reply.headers.get("WWW-Authenticate")
    if value is None:
        return reply
    completed = challenge.complete(value)
    if completed == value:
        return reply
    return JsonReply(reply.status, reply.message, {**reply.headers, "WWW-Authenticate": completed}, reply.hold_s)


def _media_type(content_type: list[str] | None) -> str:
    """The media type of a Content-Type (the first one, without parameters); JSON when absent."""
    return content_type[0].split(";")[0].strip().lower() if content_type else JSON


#: The Content-Type nearly every client sends, compared as is before any parsing.
_JSON_ONLY: Final = [JSON]
_JSON_TYPE: Final = (b"content-type", b"application/json")
_SSE_START: Final = [
    (b"content-type", sse.CONTENT_TYPE.encode() + b"; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


async def _send_reply(send: Send, watch: RequestWatch | None, reply: Reply) -> None:
    headers = _encoded(reply.headers) if reply.headers else []
    if isinstance(reply, StreamReply):
        assert watch is not None
        await _send_stream(send, watch.start(), reply.items, headers)
        return
    if reply.message is None:
        body = b""
    else:
        body = encode(reply.message)
        headers.append(_JSON_TYPE)
    headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_stream(
    send: Send, disconnected: asyncio.Future[None], items: AsyncIterator[StreamItem], headers: list[tuple[bytes, bytes]]
) -> None:
    """An SSE response. The client closing it is how a 2026-07-28 client cancels: the item source is
    closed at once (which stops the work behind it), even while it is waiting for its next item."""
    await send({"type": "http.response.start", "status": 200, "headers": [*_SSE_START, *headers]})
    try:
        while True:
            following = asyncio.ensure_future(anext(items, _END))
            racing: list[asyncio.Future[Any]] = [following, disconnected]
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                return
            item = following.result()
            if item is _END:
                break
            await send({"type": "http.response.body", "body": sse.frame(item), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:
        return  # the connection broke while we were writing
    finally:
        with contextlib.suppress(Exception):
            await items.aclose()  # type: ignore[attr-defined]


_END: Final[Any] = object()
