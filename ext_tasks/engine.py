"""The engine: one request in (body bytes, headers, principal), one reply out.

This is the single place where exceptions become JSON-RPC errors: a :class:`ProtocolError` becomes its
own code and HTTP status, anything else becomes -32603 with the traceback in the server log only.

A reply is JSON, or an SSE stream when the request may receive notifications (``progressToken`` or
``logLevel`` in ``_meta``, and ``subscriptions/listen``). A streamable request that emits nothing
before it finishes is still answered as plain JSON, with its proper HTTP status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from .auth import Principal
from .context import Emit
from .methods import CacheOptions, Call, CoreMethods
from .metrics import header_tolerated, method_label, observe_request
from .notify import ChangeEvent, ChangeHub
from .protocol.envelope import Envelope, Headers, check_envelope
from .protocol.errors import InternalError, InvalidRequest, MethodNotFound, ProtocolError
from .protocol.jsonrpc import (
    Notification,
    Request,
    RequestId,
    Response,
    decode_message,
    error_message,
    notification_message,
    result_message,
)
from .protocol.resume import ResumeCodec
from .protocol.versions import META_SERVER_INFO, META_SUBSCRIPTION_ID
from .protocol.wire import ListenParams, validate_params
from .task_methods import TaskMethods, require_tasks_extension
from .tools import ChangeKind, ToolRegistry
from .waits import WaitLimit

logger = logging.getLogger("ext_tasks.engine")

Message = dict[str, Any]
#: ``None`` in a stream stands for a keep-alive (an SSE comment).
StreamItem = Message | None

STREAMABLE: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
_LIST_CHANGED: Final = {
    "tools": ("toolsListChanged", "notifications/tools/list_changed"),
    "prompts": ("promptsListChanged", "notifications/prompts/list_changed"),
    "resources": ("resourcesListChanged", "notifications/resources/list_changed"),
}


@dataclass(frozen=True, slots=True)
class JsonReply:
    status: int
    message: Message | None  # None: 202 Accepted with no body
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def error(cls, request_id: RequestId | None, error: ProtocolError) -> JsonReply:
        """The reply for a failure: its HTTP status, its extra headers, its JSON-RPC error."""
        return cls(error.http_status, error_message(request_id, error), error.http_headers())


@dataclass(frozen=True, slots=True)
class StreamReply:
    items: AsyncIterator[StreamItem]
    status: int = 200


Reply = JsonReply | StreamReply


class RequestHandler(Protocol):
    """What the HTTP layer needs: the :class:`Engine`, or a proxy's forwarding handler."""

    async def handle(self, body: bytes, headers: Headers, principal: Principal) -> Reply: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineOptions:
    cache_ttl_ms: int = 60_000
    cache_scope: str = "public"
    keepalive_s: float = 15.0
    #: Refuse a ``tasks/*`` request without ``Mcp-Name`` (by default it is served and counted).
    strict_headers: bool = False


class Engine:
    def __init__(
        self,
        registry: ToolRegistry,
        codec: ResumeCodec,
        options: EngineOptions | None = None,
        *,
        tasks: TaskMethods | None = None,
        waits: WaitLimit | None = None,
    ) -> None:
        self.options = options or EngineOptions()
        self.registry = registry
        self.tasks = tasks
        self.waits = waits or WaitLimit()
        self.hub = ChangeHub(tasks.store.task_events, tasks.event_of) if tasks is not None else ChangeHub()
        cache = CacheOptions(self.options.cache_ttl_ms, self.options.cache_scope)
        self.core = CoreMethods(registry, codec, cache, tasks)
        self._handlers = self.core.table()
        self._server_info = {"name": registry.name, "version": registry.version}
        registry.on_change(self._list_changed)

    def _list_changed(self, kind: ChangeKind, uri: str | None) -> None:
        self.hub.publish(ChangeEvent(kind=kind, uri=uri))

    def close(self) -> None:
        """End open subscription streams gracefully (server shutdown)."""
        self.hub.close()

    async def handle(self, body: bytes, headers: Headers, principal: Principal, *, own_wait: bool = True) -> Reply:
        """Answer one request. ``own_wait=False``: a listen opened on behalf of a wait that is already
        counted against the caller's cap (the legacy shim's GET stream follows its tasks this way)."""
        try:
            message = decode_message(body)
        except ProtocolError as exc:
            return JsonReply.error(None, exc)
        if isinstance(message, Notification):
            # The only client notification of 2026-07-28 is notifications/cancelled, used on stdio only.
            return JsonReply(202, None)
        if isinstance(message, Response):
            error = InvalidRequest("Invalid Request: this server sends no requests, so it accepts no responses")
            return JsonReply.error(message.id, error)
        return await self._handle_request(message, headers, principal, own_wait)

    async def _handle_request(self, request: Request, headers: Headers, principal: Principal, own_wait: bool) -> Reply:
        started = time.perf_counter()
        reply = await self._dispatch(request, headers, principal, own_wait)
        error = reply.message.get("error") if isinstance(reply, JsonReply) and reply.message else None
        outcome = "ok" if error is None else str(error.get("code"))
        observe_request(method_label(request.method), outcome, time.perf_counter() - started)
        return reply

    async def _dispatch(self, request: Request, headers: Headers, principal: Principal, own_wait: bool) -> Reply:
        try:
            envelope = check_envelope(
                request, headers, self._header_params(request), strict_headers=self.options.strict_headers
            )
            for header in envelope.tolerated_headers:
                header_tolerated(header)
            if request.method == "subscriptions/listen":
                return await self._listen(request, envelope, principal, own_wait)
            handler = self._handlers.get(request.method)
            if handler is None:
                raise MethodNotFound(f"Method not found: {request.method}")
            if request.method in STREAMABLE and envelope.wants_stream():
                return await self._maybe_stream(request, lambda emit: handler(Call(request, envelope, principal, emit)))
            result = await handler(Call(request, envelope, principal, _drop))
        except ProtocolError as exc:
            return JsonReply.error(request.id, exc)
        except Exception:  # noqa: BLE001 - the one place that turns any failure into -32603
            return self._internal_error(request)
        return JsonReply(200, self._result(request.id, result))

    def _header_params(self, request: Request) -> dict[str, str] | None:
        name = request.params.get("name")
        if request.method != "tools/call" or not isinstance(name, str):
            return None  # a non-string name is refused by the params check, with -32602
        tool = self.registry.tools.get(name)
        return tool.header_params if tool is not None else None

    def _result(self, request_id: RequestId, result: dict[str, Any]) -> Message:
        meta = result.get("_meta")
        result["_meta"] = (
            {**meta, META_SERVER_INFO: self._server_info} if meta else {META_SERVER_INFO: self._server_info}
        )
        return result_message(request_id, result)

    def _internal_error(self, request: Request) -> JsonReply:
        logger.exception("internal error handling %s", request.method)
        return JsonReply.error(request.id, InternalError("Internal error"))

    # --- requests that may stream notifications ---------------------------------------------------

    async def _maybe_stream(self, request: Request, run: Callable[[Emit], Awaitable[dict[str, Any]]]) -> Reply:
        queue: asyncio.Queue[Message] = asyncio.Queue()

        async def emit(method: str, params: dict[str, Any]) -> None:
            await queue.put(notification_message(method, params))

        async def guarded() -> JsonReply:
            try:
                return JsonReply(200, self._result(request.id, await run(emit)))
            except ProtocolError as exc:
                return JsonReply.error(request.id, exc)
            except Exception:  # noqa: BLE001 - same mapping as _handle_request, inside a stream
                return self._internal_error(request)

        work = asyncio.create_task(guarded())
        first = asyncio.create_task(queue.get())
        await asyncio.wait({work, first}, return_when=asyncio.FIRST_COMPLETED)
        if not first.done():
            first.cancel()
            return work.result()
        return StreamReply(self._drain(first.result(), queue, work))

    @staticmethod
    async def _drain(
        first: Message, queue: asyncio.Queue[Message], work: asyncio.Task[JsonReply]
    ) -> AsyncIterator[StreamItem]:
        try:
            yield first
            while True:
                getter = asyncio.create_task(queue.get())
                await asyncio.wait({work, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                    continue
                getter.cancel()
                while not queue.empty():
                    yield queue.get_nowait()
                final = work.result().message
                if final is not None:
                    yield final
                return
        finally:
            # Closing the stream is how an HTTP client cancels (2026-07-28 transport): stop the work.
            work.cancel()

    # --- subscriptions/listen ---------------------------------------------------------------------

    async def _listen(self, request: Request, envelope: Envelope, principal: Principal, own_wait: bool) -> StreamReply:
        params = validate_params(ListenParams, request.params)  # caps the ids and URIs one listen may name
        wanted = params.notifications
        honored: dict[str, Any] = {}
        for kind in ("tools", "prompts", "resources"):
            flag = _LIST_CHANGED[kind][0]
            if getattr(wanted, f"{kind}_list_changed"):
                honored[flag] = True
        if wanted.resource_subscriptions:
            honored["resourceSubscriptions"] = list(dict.fromkeys(wanted.resource_subscriptions))
        if wanted.task_ids is not None:
            require_tasks_extension(envelope)  # -32021 before any stream opens
        if wanted.task_ids is not None and self.tasks is not None:
            # A server without tasks acknowledges the rest and leaves taskIds out: nothing to watch.
            # Only the caller's own tasks are honored; others are left out of the acknowledgement
            # exactly like ids that do not exist.
            honored["taskIds"] = await self.tasks.owned(list(dict.fromkeys(wanted.task_ids)), principal)
        stream = self._subscription(request.id, honored, principal, own_wait)
        # The acknowledgement comes once the stream holds its place among the caller's waits and its
        # subscriptions are live: a refusal (429) or a store failure (503) is still the HTTP answer.
        first = await anext(stream)
        return StreamReply(_chain(first, stream))

    async def _subscription(
        self, subscription_id: RequestId, honored: dict[str, Any], principal: Principal, own_wait: bool
    ) -> AsyncIterator[StreamItem]:
        meta = {META_SUBSCRIPTION_ID: subscription_id}
        watched = set(honored.get("resourceSubscriptions", ()))
        task_ids = frozenset(honored.get("taskIds", ()))
        with self.waits.hold(principal.id) if own_wait else contextlib.nullcontext():
            async with self.hub.subscribe(task_ids) as events:
                yield notification_message(
                    "notifications/subscriptions/acknowledged", {"_meta": meta, "notifications": honored}
                )
                while True:
                    try:
                        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
                        # that arrives as the get completes, and the stream would outlive its client.
                        async with asyncio.timeout(self.options.keepalive_s):
                            event = await events.get()
                    except TimeoutError:
                        yield None
                        continue
                    if ChangeHub.is_closing(event):
                        yield self._result(subscription_id, {"resultType": "complete", "_meta": dict(meta)})
                        return
                    notification = self._notification(event, honored, watched, principal)
                    if notification is not None:
                        yield {**notification, "params": {**notification["params"], "_meta": dict(meta)}}

    @staticmethod
    def _notification(
        event: ChangeEvent, honored: dict[str, Any], watched: set[str], principal: Principal
    ) -> Message | None:
        if event.kind in _LIST_CHANGED and honored.get(_LIST_CHANGED[event.kind][0]):
            return notification_message(_LIST_CHANGED[event.kind][1], {})
        if event.kind == "resource" and event.uri in watched:
            return notification_message("notifications/resources/updated", {"uri": event.uri})
        if event.kind == "task" and event.task is not None and event.task.get("owner") == principal.id:
            # The full DetailedTask, as tasks/get would show it at that commit (ext spec §3.9).
            return notification_message("notifications/tasks", dict(event.task["task"]))
        return None


async def _chain(first: StreamItem, rest: AsyncIterator[StreamItem]) -> AsyncIterator[StreamItem]:
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


async def _drop(method: str, params: dict[str, Any]) -> None:
    """Notifications of a request that cannot carry them go nowhere."""
