"""The engine: the 2026-07-28 surface. A request in (bytes from the HTTP edge, or a decoded message from
the era router, or a request the legacy shim builds in process), one reply out.

The request is decoded and checked once (JSON-RPC, ``_meta`` and headers, then the method's params into
a typed struct, ``protocol.requests``); handlers read typed fields only. Exceptions become the modern
surface's JSON-RPC errors through one guard (``_FAILURES``, :mod:`.failures`): a :class:`ProtocolError`
keeps its own code, HTTP status and headers, anything else becomes -32603 with the traceback in the
server log only.

A reply is JSON, or an SSE stream when the request may receive notifications (``progressToken`` or
``logLevel`` in ``_meta``, and ``subscriptions/listen``). A streamable request that emits nothing
before it finishes is still answered as plain JSON, with its proper HTTP status. Its notifications wait
for the client in a bounded :class:`~.outbox.Outbox`: a client that reads slowly, or not at all, loses
the oldest progress (counted), never the response, and never holds the tool up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

from . import tracing
from .auth import Caller, Principal
from .context import Emit
from .failures import Guard
from .listen import Subscriptions
from .methods import CacheOptions, CoreMethods
from .metrics import header_tolerated, method_label, observe_request
from .mrtr import ClaimOnce
from .notify import ChangeEvent, ChangeHub
from .options import EngineOptions
from .outbox import Outbox
from .pacing import Pacing
from .protocol.envelope import Envelope, Headers, Target, check_envelope
from .protocol.errors import InvalidRequest, MethodNotFound, ProtocolError
from .protocol.jsonrpc import Message as Decoded
from .protocol.jsonrpc import Notification, Request, RequestId, Response, notification_message, result_message
from .protocol.requests import PARSERS, Call, ToolCall, loose_target, parse_tool_call
from .protocol.result_types import TypedResult
from .protocol.resume import ResumeCodec
from .protocol.versions import META_PROTOCOL_VERSION, META_SERVER_INFO, MODERN_2026_07_28
from .replies import NOT_ALLOWED, JsonReply, Message, Reply, StreamItem, StreamReply
from .task_methods import TaskMethods
from .tools import ChangeKind, ToolRegistry
from .waits import WaitLimit

logger = logging.getLogger("ext_tasks.engine")
#: The engine's failures as replies, each with its own HTTP status (see :mod:`.failures`).
_FAILURES: Final = Guard(logger, "internal error handling %s")

Handler = Callable[[Call[Any], Principal, Emit], Awaitable[TypedResult]]
#: The request's checked envelope, given the parsed call and its tool's ``Mcp-Param-*`` (``tools/call``).
EnvelopeOf = Callable[[Target | None, Mapping[str, str] | None], Envelope]

STREAMABLE: Final = frozenset({"tools/call", "prompts/get", "resources/read"})


class Engine:
    def __init__(
        self,
        registry: ToolRegistry,
        codec: ResumeCodec,
        options: EngineOptions | None = None,
        *,
        tasks: TaskMethods | None = None,
        waits: WaitLimit | None = None,
        claim_once: ClaimOnce | None = None,
        cache_scope: str = "public",
        pacing: Pacing | None = None,
    ) -> None:
        self.options = options or EngineOptions()
        self.registry = registry
        self.tasks = tasks
        self.waits = waits or WaitLimit(self.options.max_waits)
        #: The costly requests' budget per principal (shared with the HTTP edge, which charges bodies).
        self.pacing = pacing or Pacing(self.options.pacing_rate, self.options.pacing_burst)
        self.hub = ChangeHub(tasks.store.watch, tasks.record_of) if tasks is not None else ChangeHub()
        cache = CacheOptions(self.options.cache_ttl_ms, cache_scope)
        self.core = CoreMethods(registry, codec, cache, tasks, claim_once=claim_once)
        self.subscriptions = Subscriptions(
            self.hub, self.waits, tasks, self.options.keepalive_s, self._result, pacing=self.pacing
        )
        self._handlers = self._table()
        self._server_info = {"name": registry.name, "version": registry.version}
        #: The ``_meta`` of a result without one of its own (encoded only, never changed).
        self._server_meta = {META_SERVER_INFO: self._server_info}
        registry.on_change(self._list_changed)

    def _table(self) -> dict[str, Handler]:
        core = self.core
        handlers: dict[str, Handler] = {
            "server/discover": core.discover,
            "tools/list": core.list_tools,
            "prompts/list": core.list_prompts,
            "prompts/get": core.get_prompt,
            "resources/list": core.list_resources,
            "resources/templates/list": core.list_resource_templates,
            "resources/read": core.read_resource,
            "completion/complete": core.complete,
        }
        if self.tasks is not None:
            handlers.update(
                {"tasks/get": self.tasks.get, "tasks/update": self.tasks.update, "tasks/cancel": self.tasks.cancel}
            )
        return handlers

    def _list_changed(self, kind: ChangeKind, uri: str | None) -> None:
        self.hub.publish(ChangeEvent(kind=kind, uri=uri))

    def close(self) -> None:
        """End open subscription streams gracefully (server shutdown)."""
        self.hub.close()

    # --- the HTTP edge's interface (RequestHandler) -------------------------------------------------

    async def post(self, body: bytes, headers: Headers, caller: Caller) -> Reply:
        return await self.handle(body, headers, caller.principal)

    async def get(self, headers: Headers, caller: Caller) -> Reply:
        return NOT_ALLOWED  # the 2026-07-28 transport has no GET stream

    async def delete(self, headers: Headers, caller: Caller) -> Reply:
        return NOT_ALLOWED  # ... and no sessions

    # --- requests in ----------------------------------------------------------------------------------

    async def handle(self, body: bytes, headers: Headers, principal: Principal) -> Reply:
        message = _FAILURES.decode(body)
        if isinstance(message, JsonReply):
            return message
        return await self.handle_message(message, headers, principal)

    async def handle_message(self, message: Decoded, headers: Headers, principal: Principal) -> Reply:
        """A message already decoded (the era router decodes a body once to tell the eras apart)."""
        if isinstance(message, Notification):
            # The only client notification of 2026-07-28 is notifications/cancelled, used on stdio only.
            return JsonReply(202, None)
        if isinstance(message, Response):
            error = InvalidRequest("Invalid Request: this server sends no requests, so it accepts no responses")
            return JsonReply.error(message.id, error)
        checked: EnvelopeOf = lambda target, params: self._checked(message, headers, target, params)  # noqa: E731
        return await self._observed(message, checked, principal, own_wait=True, headers=headers)

    async def call(self, request: Request, envelope: Envelope, principal: Principal) -> Reply:
        """A request the legacy shim builds in process: its envelope is given, so no headers are checked
        and nothing is encoded or decoded. The shim counts its own waits (a GET stream following its
        tasks opens a listen here), so this one is not counted again."""
        return await self._observed(request, lambda target, params: envelope, principal, own_wait=False)

    async def _observed(
        self,
        request: Request,
        envelope: EnvelopeOf,
        principal: Principal,
        own_wait: bool,
        headers: Headers | None = None,
    ) -> Reply:
        started = time.perf_counter()
        tracer = tracing.tracer
        if tracer is None:
            reply = await self._dispatch(request, envelope, principal, own_wait)
        else:
            span = tracing.request_span(
                tracer,
                request.method,
                request.params,
                request.id,
                headers,
                protocol_version=_version_of(request) if headers is not None else MODERN_2026_07_28,
                target=self._target(request),
            )
            reply = await tracing.traced_reply(span, self._dispatch(request, envelope, principal, own_wait))
        code = reply.error_code if isinstance(reply, JsonReply) else None
        outcome = "ok" if code is None else str(code)
        observe_request(method_label(request.method), outcome, time.perf_counter() - started)
        return reply

    def _target(self, request: Request) -> str | None:
        """The span name's target: the called tool or the prompt, if this server has it (a name a client
        makes up would make span names unbounded)."""
        name = request.params.get("name")
        if not isinstance(name, str):
            return None
        if request.method == "tools/call":
            return name if self.registry.find_tool(name) is not None else None
        if request.method == "prompts/get":
            return name if name in self.registry.prompts else None
        return None

    def _checked(
        self, request: Request, headers: Headers, target: Target | None, header_params: Mapping[str, str] | None
    ) -> Envelope:
        """``_meta`` and the SEP-2243 headers against the body (for ``tools/call``, against the call as
        parsed, ``target``, and the called tool's ``Mcp-Param-*``)."""
        strict = self.options.strict_headers
        envelope = check_envelope(request, headers, header_params, strict_headers=strict, target=target)
        for header in envelope.tolerated_headers:
            header_tolerated(header)
        return envelope

    async def _dispatch(self, request: Request, envelope_of: EnvelopeOf, principal: Principal, own_wait: bool) -> Reply:
        failure = _FAILURES.catching(request.id, request.method)
        with failure:
            method = request.method
            if method == "tools/call":
                return await self._call_tool(request, envelope_of, principal)
            envelope = envelope_of(None, None)
            if method == "subscriptions/listen":
                listen = PARSERS[method](request.params, envelope)
                return await self.subscriptions.open(request.id, listen, principal, own_wait)
            handler = self._handlers.get(method)
            if handler is None:
                raise MethodNotFound(f"Method not found: {method}")
            call = Call(request.id, method, PARSERS[method](request.params, envelope), envelope)
            return await self._run(call, lambda emit: handler(call, principal, emit))
        return failure.reply

    async def _call_tool(self, request: Request, envelope_of: EnvelopeOf, principal: Principal) -> Reply:
        """``tools/call``, the hot path: the call is parsed once (its ``name`` read once), the tool looked
        up once, and both handed to the envelope check and to the handler."""
        try:
            params = parse_tool_call(request.params)
        except ProtocolError:
            # The envelope's own errors come first (protocol.md §1.7): check it as far as the call allows.
            loose = loose_target(request.params)
            known = self.registry.find_tool(loose.name) if loose.name is not None else None
            envelope_of(loose, known.header_params if known is not None else None)
            raise
        tool = self.registry.find_tool(params.name)
        header_params = tool.header_params if tool is not None else None
        envelope = envelope_of(Target(params.name, params.arguments), header_params)
        call: Call[ToolCall] = Call(request.id, "tools/call", params, envelope)
        return await self._run(call, lambda emit: self.core.call_tool(call, tool, principal, emit))

    async def _run(self, call: Call[Any], run: Callable[[Emit], Awaitable[TypedResult]]) -> Reply:
        if call.method in STREAMABLE and call.envelope.wants_stream():
            return await self._maybe_stream(call, run)
        return JsonReply(200, self._result(call.id, await run(_drop)))

    def _result(self, request_id: RequestId, result: TypedResult) -> Message:
        """The response carrying ``result``, which gets the server's identity in ``_meta`` (next to any
        ``_meta`` of its own) here, once: the result is sent as built, ``resultType`` its tag."""
        own = result.meta
        result.meta = {**own, META_SERVER_INFO: self._server_info} if own else self._server_meta
        return result_message(request_id, result)

    # --- requests that may stream notifications ---------------------------------------------------

    async def _maybe_stream(self, call: Call[Any], run: Callable[[Emit], Awaitable[TypedResult]]) -> Reply:
        outbox = Outbox()

        async def emit(method: str, params: dict[str, Any]) -> None:
            outbox.put(notification_message(method, params))
            # A report is a point where the tool lets others run: a tool reporting in a tight loop
            # would otherwise hold the event loop, its own stream's writer included.
            await asyncio.sleep(0)

        async def guarded() -> JsonReply:
            failure = _FAILURES.catching(call.id, call.method)  # as in _dispatch, inside a stream
            with failure:
                return JsonReply(200, self._result(call.id, await run(emit)))
            return failure.reply

        work = asyncio.create_task(guarded())
        first = asyncio.create_task(outbox.get())
        await asyncio.wait({work, first}, return_when=asyncio.FIRST_COMPLETED)
        if not first.done():
            first.cancel()
            return work.result()
        return StreamReply(_drain(first.result(), outbox, work))


async def _drain(first: Message, outbox: Outbox, work: asyncio.Task[JsonReply]) -> AsyncIterator[StreamItem]:
    """The stream of one request: its notifications as the client reads them (see :mod:`.outbox` for
    what a slow reader loses), then the final response, which is never dropped."""
    try:
        yield first
        while True:
            getter = asyncio.create_task(outbox.get())
            await asyncio.wait({work, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
                continue
            getter.cancel()
            for message in outbox.take_all():
                yield message
            final = work.result().message
            if final is not None:
                yield final
            return
    finally:
        # Closing the stream is how an HTTP client cancels (2026-07-28 transport): stop the work.
        work.cancel()


def _version_of(request: Request) -> str | None:
    """The protocol version a request's ``_meta`` names, for its span (a short string, else none)."""
    meta = request.params.get("_meta")
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    return version if isinstance(version, str) and len(version) <= 32 else None


async def _drop(method: str, params: dict[str, Any]) -> None:
    """Notifications of a request that cannot carry them go nowhere."""
