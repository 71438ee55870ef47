"""The legacy front end: the 2025-11-25 session protocol, served by translating into 2026-07-28 calls.

Every legacy request becomes one or more modern requests to a :class:`~.upstream.ModernUpstream`
(this server's engine, or a remote server for ``ext-tasks proxy``); every reply is translated back.
What the legacy protocol has and the modern one does not is emulated here:

* sessions (``initialize``, ``Mcp-Session-Id``, ``logging/setLevel``, resource subscriptions), kept in
  a :class:`~.sessions.SessionStore` so any instance serves any request of a session;
* server→client requests: a modern ``input_required`` (MRTR, or a task's ``inputRequests``) is relayed
  as real JSON-RPC requests on the response stream, and the client's answers, which may be POSTed to
  another instance, come back through the session bus;
* ``tasks/result`` (block until terminal), ``tasks/list`` (per principal, or per session when
  anonymous, with signed cursors), legacy ``tasks/cancel`` semantics, ``notifications/tasks/status``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ext_tasks import tracing
from ext_tasks.auth import Caller
from ext_tasks.failures import Guard, StatusRule
from ext_tasks.options import EngineOptions, LegacyOptions, TaskOptions, WorkerOptions
from ext_tasks.protocol.envelope import LOG_LEVELS
from ext_tasks.protocol.errors import (
    Busy,
    InternalError,
    InvalidParams,
    InvalidRequest,
    LimitExceeded,
    MethodNotFound,
)
from ext_tasks.protocol.jsonrpc import (
    Notification,
    Request,
    Response,
    error_message,
    result_message,
)
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.tasks import MAX_CAPABILITY_BYTES
from ext_tasks.replies import JsonReply, Reply, StreamReply, chained
from ext_tasks.store.base import OwnerPlaces
from ext_tasks.waits import WaitLimit

from .get_stream import GetStream
from .legacy_calls import LegacyCalls
from .legacy_tasks import LegacyTasks
from .own_tasks import OwnTasks
from .remote import UpstreamFailed
from .sessions import LegacySession, SessionStore, TooManySessions, client_identity, kept_capabilities, new_session_id
from .translate import (
    legacy_result,
    legacy_server_capabilities,
    legacy_tools,
    modern_capabilities,
    negotiate_version,
    required_string,
    result_of,
)
from .upstream import ModernCall, ModernUpstream

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

logger = logging.getLogger("ext_tasks.migration")
#: The shim's failures as replies: a session's failure (or one before any session) with its own HTTP
#: status, a "retry later" among them logged as a warning.
_FAILURES: Final = Guard(logger, "legacy %s failed", busy="legacy request failed: %s")
#: A method's failure: 2025-11-25 answers it with HTTP 200 and the JSON-RPC error, except one that means
#: "retry later" (429 or 503, with ``Retry-After``) and a proxy's upstream that failed (502, 504).
_METHOD_STATUS: Final = StatusRule(fixed=200, kept=(LimitExceeded, Busy, UpstreamFailed))

Message = dict[str, Any]
_MAX_CAPABILITIES_CHARS: Final = MAX_CAPABILITY_BYTES
_MAX_SUBSCRIPTIONS: Final = 100
_PASSTHROUGH: Final = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "completion/complete"}
)


class SessionRequired(InvalidRequest):
    """A legacy request without ``Mcp-Session-Id`` (HTTP 400)."""


class SessionNotFound(InvalidRequest):
    """An unknown or expired session (HTTP 404: the client must initialize again)."""

    http_status = 404


@dataclass(frozen=True, slots=True)
class ShimOptions:
    server_info: Mapping[str, Any]
    instructions: str | None = None
    #: How long a relayed server→client request may wait for the client's answer.
    input_timeout_s: float = 600.0
    #: The settings' legacy section (sessions per principal) and engine section (the streams' keep-alive).
    legacy: LegacyOptions = field(default_factory=LegacyOptions)
    engine: EngineOptions = field(default_factory=EngineOptions)
    #: The task policy and the result limit, which bound the tasks the shim keeps itself.
    tasks: TaskOptions = field(default_factory=TaskOptions)
    worker: WorkerOptions = field(default_factory=WorkerOptions)


class LegacyShim:
    def __init__(
        self,
        upstream: ModernUpstream,
        sessions: SessionStore,
        codec: ResumeCodec,
        options: ShimOptions,
        *,
        waits: WaitLimit | None = None,
        places: OwnerPlaces | None = None,
    ) -> None:
        """``places`` count the tasks the shim keeps itself (the engine's task store's, when it has
        one: they then count with the principal's tasks); by default the session store's own."""
        self.upstream = upstream
        self.sessions = sessions
        self.options = options
        self.waits = waits or WaitLimit()
        own = OwnTasks(sessions, places or sessions.places, options.tasks, options.worker.max_result_bytes)
        self.tasks = LegacyTasks(sessions, codec, self._modern, self._final, self.waits, own, upstream.send)
        self.calls = LegacyCalls(upstream, sessions, self.tasks, self._modern, options.input_timeout_s)
        self._handlers: dict[str, Callable[[Request, LegacySession, Caller], AsyncIterator[Message]]] = {
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "tools/call": self.calls.call_tool,
            "prompts/get": self.calls.with_input,
            "resources/read": self.calls.with_input,
            "tasks/get": self.tasks.get,
            "tasks/result": self.tasks.result,
            "tasks/list": self.tasks.list,
            "tasks/cancel": self.tasks.cancel,
            **dict.fromkeys(_PASSTHROUGH, self._passthrough),
        }

    # --- HTTP entry points ------------------------------------------------------------------------

    async def post(self, body: bytes, headers: Mapping[str, Sequence[str]], caller: Caller) -> Reply:
        message = _FAILURES.decode(body)
        if isinstance(message, JsonReply):
            return message
        return await self.post_message(message, headers, caller)

    async def post_message(
        self, message: Request | Notification | Response, headers: Mapping[str, Sequence[str]], caller: Caller
    ) -> Reply:
        """A message already decoded (the era router decodes a body once to tell the eras apart)."""
        tracer = tracing.tracer
        if tracer is not None and isinstance(message, Request):
            return await tracing.traced_reply(_span(tracer, message, headers), self._guarded(message, headers, caller))
        return await self._guarded(message, headers, caller)

    async def _guarded(
        self, message: Request | Notification | Response, headers: Mapping[str, Sequence[str]], caller: Caller
    ) -> Reply:
        request_id = message.id if isinstance(message, Request | Response) else None
        failure = _FAILURES.catching(request_id, message.method if isinstance(message, Request) else "message")
        with failure:
            return await self._post(message, headers, caller)
        return failure.reply

    async def _post(
        self, message: Request | Notification | Response, headers: Mapping[str, Sequence[str]], caller: Caller
    ) -> Reply:
        if isinstance(message, Request) and message.method == "initialize":
            return await self._initialize(message, caller)
        session = await self._session(headers, caller)
        if isinstance(message, Response):
            # The client answers a relayed request; whichever instance holds the waiting stream gets it.
            answer = {"id": message.id, "result": message.result, "error": message.error}
            await self.sessions.publish(session.session_id, {"kind": "response", "message": answer})
            return JsonReply(202, None)
        if isinstance(message, Notification):
            return JsonReply(202, None)
        handler = self._handlers.get(message.method)
        if handler is None:
            error = MethodNotFound(f"Method not found: {message.method}")
            return JsonReply(200, error_message(message.id, error))
        return await _reply(message, handler(message, session, caller))

    async def get(self, headers: Mapping[str, Sequence[str]], caller: Caller) -> Reply:
        """The session's GET stream: change notifications, and messages other instances publish."""
        failure = _FAILURES.catching(None, "GET stream")
        with failure:
            session = await self._session(headers, caller)
            stream = GetStream(
                session,
                caller,
                sessions=self.sessions,
                upstream=self.upstream,
                tasks=self.tasks,
                modern=self._modern,
                keepalive_s=self.options.engine.keepalive_s,
            )
            messages = self._waiting(caller, stream.messages())
            first = await anext(messages)  # the stream is live (or refused, e.g. past the waits cap)
            return StreamReply(chained(first, messages))
        return failure.reply

    async def delete(self, headers: Mapping[str, Sequence[str]], caller: Caller) -> Reply:
        failure = _FAILURES.catching(None, "DELETE")
        with failure:
            session = await self._session(headers, caller)
            await self.sessions.delete(session)
            return JsonReply(204, None)
        return failure.reply

    async def _waiting(self, caller: Caller, messages: AsyncIterator[Message | None]) -> AsyncIterator[Message | None]:
        """``messages`` as one of the caller's open waits (refused past the cap)."""
        with self.waits.hold(caller.principal.id):
            try:
                async for message in messages:
                    yield message
            finally:
                await messages.aclose()  # type: ignore[attr-defined]

    # --- sessions ---------------------------------------------------------------------------------

    async def _initialize(self, request: Request, caller: Caller) -> Reply:
        params = request.params
        session = LegacySession(
            session_id=new_session_id(),
            protocol_version=negotiate_version(params.get("protocolVersion")),
            capabilities=kept_capabilities(params.get("capabilities")),
            principal=caller.principal.id,
            client_info=client_identity(params.get("clientInfo")),
        )
        if len(json.dumps(session.capabilities)) > _MAX_CAPABILITIES_CHARS:
            raise InvalidParams(f"Invalid params: capabilities larger than {_MAX_CAPABILITIES_CHARS} characters")
        try:
            await self.sessions.create(session, self.options.legacy.max_sessions)
        except TooManySessions:
            raise LimitExceeded(
                f"Too many open sessions for this caller (the limit is {self.options.legacy.max_sessions}); "
                "end one (DELETE) or let it expire",
                limit="max_sessions",
                retry_after_s=60,
            ) from None
        result: Message = {
            "protocolVersion": session.protocol_version,
            "capabilities": legacy_server_capabilities(list_tasks=True),
            "serverInfo": dict(self.options.server_info),
        }
        if self.options.instructions:
            result["instructions"] = self.options.instructions
        return JsonReply(200, result_message(request.id, result), {"Mcp-Session-Id": session.session_id})

    async def _session(self, headers: Mapping[str, Sequence[str]], caller: Caller) -> LegacySession:
        values = headers.get("mcp-session-id") or ()
        if len(values) != 1 or not values[0].strip():
            raise SessionRequired("Bad Request: a valid Mcp-Session-Id header is required (initialize first)")
        session = await self.sessions.load(values[0].strip())
        # A session of another principal answers exactly like one that does not exist.
        if session is None or session.principal != caller.principal.id:
            raise SessionNotFound("Session not found: initialize a new session")
        return session

    def _modern(self, session: LegacySession, method: str, params: Mapping[str, Any], *, tasks: bool) -> ModernCall:
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        task = params.get("task")
        ttl = task.get("ttl") if tasks and isinstance(task, dict) else None
        return ModernCall(
            method=method,
            params=dict(params),
            capabilities=modern_capabilities(session.capabilities, tasks=tasks),
            client_info=session.client_info,
            log_level=session.log_level,
            progress_token=meta.get("progressToken") if isinstance(meta, dict) else None,
            # A 2025-11-25 ``params.task.ttl`` is a lifetime hint; the server caps it by its maximum.
            ttl_hint_ms=ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else None,
        )

    # --- small methods ----------------------------------------------------------------------------

    async def _ping(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        yield result_message(request.id, {})

    async def _set_level(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        level = request.params.get("level")
        if level not in LOG_LEVELS:
            raise InvalidParams(f"Invalid params: level must be one of {', '.join(LOG_LEVELS)}")
        session.log_level = str(level)
        await self.sessions.save(session)
        yield result_message(request.id, {})

    async def _subscribe(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        uri = required_string(request.params, "uri")
        if uri not in session.subscriptions and len(session.subscriptions) >= _MAX_SUBSCRIPTIONS:
            raise InvalidParams(f"Invalid params: a session may subscribe to at most {_MAX_SUBSCRIPTIONS} resources")
        if uri not in session.subscriptions:
            session.subscriptions.append(uri)
            await self.sessions.save(session)
            await self.sessions.publish(session.session_id, {"kind": "resubscribe"})
        yield result_message(request.id, {})

    async def _unsubscribe(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        uri = required_string(request.params, "uri")
        if uri in session.subscriptions:
            session.subscriptions.remove(uri)
            await self.sessions.save(session)
            await self.sessions.publish(session.session_id, {"kind": "resubscribe"})
        yield result_message(request.id, {})

    async def _passthrough(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        final = await self._final(self._modern(session, request.method, request.params, tasks=False), caller)
        result = legacy_result(result_of(final))
        if request.method == "tools/list":
            result["tools"] = legacy_tools(result.get("tools", []), await self.upstream.task_support(caller))
        yield result_message(request.id, result)

    async def _final(self, call: ModernCall, caller: Caller) -> Message:
        final: Message | None = None
        async for message in self.upstream.send(call, caller):
            if "result" in message or "error" in message:
                final = message
        if final is None:
            raise InternalError("Internal error: the upstream server sent no response")
        return final


def _span(tracer: Tracer, request: Request, headers: Mapping[str, Sequence[str]]) -> tracing.Started:
    """The span of a legacy request: its session's id, and the version its header names (the session's)."""
    session = (headers.get("mcp-session-id") or [""])[0].strip()[:128] or None
    version = (headers.get("mcp-protocol-version") or [""])[0].strip()[:32] or None
    if request.method == "initialize":
        asked = request.params.get("protocolVersion")
        version = asked[:32] if isinstance(asked, str) else version
    target = tracing.plain_target(request.method, request.params)
    return tracing.request_span(
        tracer, request.method, request.params, request.id, headers,
        protocol_version=version, target=target, session_id=session,
    )  # fmt: skip


async def _reply(request: Request, messages: AsyncIterator[Message]) -> Reply:
    """JSON when the first message is already the response; an SSE stream otherwise. A failure before the
    first message is the reply (with the legacy status rule); after it, the stream ends with the error."""
    failure = _FAILURES.catching(request.id, request.method, _METHOD_STATUS)
    with failure:
        first = await anext(messages, None)
        if first is None:
            return JsonReply(200, error_message(request.id, InternalError("Internal error")))
        if first.get("id") == request.id and ("result" in first or "error" in first):
            with contextlib.suppress(Exception):
                await messages.aclose()  # type: ignore[attr-defined]
            return JsonReply(200, first)
        return StreamReply(_FAILURES.stream(request.id, request.method, _after(first, messages)))
    return failure.reply


async def _after(first: Message, messages: AsyncIterator[Message]) -> AsyncIterator[Message]:
    yield first
    async for message in messages:
        yield message
