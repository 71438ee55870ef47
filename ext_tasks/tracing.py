"""OpenTelemetry tracing: a span per request, a task's trace across instances, and the context sent on.

Off by default (:mod:`.tracing_setup` turns it on from the ``OTEL_*`` variables); this module needs only
``opentelemetry-api``. Off, every traced place makes one check, an attribute read of :data:`tracer`
(``None``): no span object, no context read from ``_meta`` or headers, nothing stored with a task.

On, names and attributes follow OpenTelemetry's MCP semantic conventions (Development status):

* **A request** is a ``SERVER`` span ``{mcp.method.name} {target}`` (the tool's or prompt's name, only
  when the server knows it: a client cannot make span names unbounded) with the conventions'
  attributes (:func:`request_span`). Its parent is the context in ``params._meta`` (SEP-414), else the
  W3C headers; when both are there and differ the headers' context is a link. A JSON-RPC error sets
  ``error.type`` and ``rpc.response.status_code`` to its code, the status ``ERROR`` with its message.
* **A task** keeps its creating request's span context as a ``traceparent`` (``TaskRecord.trace_context``).
  Each run attempt is an ``INTERNAL`` span ``execute_tool {tool}``, a child of that context (the whole
  task is one trace) and linked to it, with events for its start (the attempt number), a reclaim after a
  crash and its outcome. ``tasks/get|update|cancel`` spans (the legacy shim's too) link to it.
* **Outbound**: :func:`inject` writes the current context into a ``_meta`` or into HTTP headers.

docs/deploy.md "Tracing" has the attributes, the switch and what it costs.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Mapping, MutableMapping, Sequence
from typing import Any, Final, NamedTuple, TypeVar

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

#: The attribute naming a task (no convention has one): on request spans that create or read a task,
#: and on run attempts.
TASK_ID: Final = "ext_tasks.task.id"
#: A run attempt's number (1 the first time; one more after each interruption).
RUN_ATTEMPT: Final = "ext_tasks.run.attempt"
#: The events of a run attempt.
EVENT_RUN_STARTED: Final = "ext_tasks.run.started"
EVENT_RECLAIMED: Final = "ext_tasks.run.reclaimed"
EVENT_OUTCOME: Final = "ext_tasks.run.outcome"
EVENT_INTERRUPTED: Final = "ext_tasks.run.interrupted"
#: The keys SEP-414 carries in ``params._meta``.
META_KEYS: Final = ("traceparent", "tracestate", "baggage")
#: The longest value read from ``_meta`` or a header for a propagation key (W3C baggage's own limit).
_MAX_VALUE_CHARS: Final = 8192
#: A W3C traceparent, version 00, as a task keeps it (55 characters, lower-case hex, not all zeros).
TRACEPARENT: Final = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
TRACEPARENT_CHARS: Final = 55
_TARGETED: Final = frozenset({"tools/call", "prompts/get"})
#: MCP over Streamable HTTP (the conventions' ``network.*`` attributes).
_TRANSPORT: Final = {"network.transport": "tcp", "network.protocol.name": "http"}
_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_.\-/]{1,64}")
_SCOPE: Final = "ext_tasks"

R = TypeVar("R")

#: The tracer when tracing is on, else ``None``: the one check every traced place makes, read as
#: ``tracing.tracer`` (an attribute read, cheaper than a call; never imported by name, which would copy it).
tracer: Tracer | None = None
_provider: Any = None
_lock = threading.Lock()


def active() -> Tracer | None:
    """The tracer when tracing is on, else ``None`` (:data:`tracer`, for callers off the hot path)."""
    return tracer


def _install(provider: Any) -> None:
    global tracer, _provider
    _provider = provider
    tracer = provider.get_tracer(_SCOPE)


def use_provider(provider: Any | None) -> None:
    """Trace with ``provider`` (an SDK ``TracerProvider``: :mod:`.tracing_setup`'s, or a test's with an
    in-memory exporter), or turn tracing off (``None``)."""
    global tracer, _provider
    with _lock:
        if provider is None:
            tracer = None
            _provider = None
        else:
            _install(provider)


def current_provider() -> Any | None:
    """The SDK tracer provider in use (``None``: tracing off)."""
    return _provider


# --- reading a context ----------------------------------------------------------------------------------


class _MetaGetter(Getter[Mapping[str, Any]]):
    """The propagation keys of a ``_meta`` object: strings only, of bounded length (it is hostile input)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, str) and len(value) <= _MAX_VALUE_CHARS:
            return [value]
        return None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [key for key in META_KEYS if key in carrier]


class _HeaderGetter(Getter[Mapping[str, Sequence[str]]]):
    """The W3C headers of a request (lower-cased names, every value sent), bounded like ``_meta``'s."""

    def get(self, carrier: Mapping[str, Sequence[str]], key: str) -> list[str] | None:
        values = carrier.get(key.lower())
        if not values:
            return None
        kept = [value for value in values if len(value) <= _MAX_VALUE_CHARS]
        return kept or None

    def keys(self, carrier: Mapping[str, Sequence[str]]) -> list[str]:
        return [key for key in META_KEYS if key in carrier]


_META_GETTER: Final = _MetaGetter()
_HEADER_GETTER: Final = _HeaderGetter()


def _valid(context: otel_context.Context) -> bool:
    return trace.get_current_span(context).get_span_context().is_valid


def parent_of(
    meta: object, headers: Mapping[str, Sequence[str]] | None
) -> tuple[otel_context.Context | None, Link | None]:
    """The context a request's span continues, and a link to the other one: ``_meta``'s (SEP-414) as
    the parent, else the W3C headers'; the headers' is a link when ``_meta`` has its own. ``None``:
    continue the current (ambient) context, such as the legacy shim's span around the engine's."""
    from_meta = None
    if isinstance(meta, Mapping) and "traceparent" in meta:
        extracted = propagate.extract(meta, getter=_META_GETTER)
        from_meta = extracted if _valid(extracted) else None
    from_headers = None
    if headers and "traceparent" in headers:
        extracted = propagate.extract(headers, getter=_HEADER_GETTER)
        from_headers = extracted if _valid(extracted) else None
    if from_meta is not None:
        link = None
        if from_headers is not None:
            ambient = trace.get_current_span(from_headers).get_span_context()
            if ambient != trace.get_current_span(from_meta).get_span_context():  # a proxy sends both alike
                link = Link(ambient)
        return from_meta, link
    return from_headers, None


def context_of_traceparent(value: str | None) -> otel_context.Context | None:
    """The remote context a stored ``traceparent`` names (``None``: none stored, or not valid)."""
    if value is None or not TRACEPARENT.fullmatch(value):
        return None
    extracted = propagate.extract({"traceparent": value}, getter=_META_GETTER)
    return extracted if _valid(extracted) else None


def valid_traceparent(value: object) -> str | None:
    """``value`` if it is a W3C traceparent this server keeps (version 00, 55 characters), else ``None``:
    what a record keeps is bounded and checked like any other input."""
    if isinstance(value, str) and len(value) == TRACEPARENT_CHARS and TRACEPARENT.fullmatch(value):
        return value
    return None


def current_traceparent() -> str | None:
    """The current span's context as a ``traceparent`` (``None`` when tracing is off or no span is
    current): what a task keeps of the request that creates it."""
    if tracer is None:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return valid_traceparent(carrier.get("traceparent"))


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a stored ``traceparent``: what an operator looks up in the tracing
    backend."""
    valid = valid_traceparent(traceparent)
    return valid[3:35] if valid is not None else None


# --- writing a context ----------------------------------------------------------------------------------


def inject(carrier: MutableMapping[str, Any]) -> None:
    """Write the current context (``traceparent``, ``tracestate``, ``baggage``, per the configured
    propagators) into ``carrier``: a ``_meta`` object, or headers. Nothing when there is no valid span
    current (tracing off, no tracer active in a client)."""
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(carrier)


def plain_target(method: str, params: Mapping[str, Any]) -> str | None:
    """The span name's target where the server cannot check the name against its own tools (the legacy
    shim, the proxy): the ``name`` of a ``tools/call`` or ``prompts/get`` only when it looks like one
    (at most 64 characters of letters, digits, ``_.-/``)."""
    name = params.get("name")
    if method in _TARGETED and isinstance(name, str) and _PLAIN_NAME.fullmatch(name):
        return name
    return None


# --- request spans ----------------------------------------------------------------------------------------


class Started(NamedTuple):
    """A request's span, and the context to serve the request in."""

    span: Span
    context: otel_context.Context


def request_span(
    tracer: Tracer,
    method: str,
    params: Mapping[str, Any],
    request_id: object,
    headers: Mapping[str, Sequence[str]] | None,
    *,
    protocol_version: str | None,
    target: str | None = None,
    session_id: str | None = None,
) -> Started:
    """The ``SERVER`` span of one request (started, not current: see :func:`traced`). ``target``: the
    tool's or prompt's name when the server knows it (else the name is the method alone)."""
    parent, link = parent_of(params.get("_meta"), headers)
    attributes: dict[str, Any] = {"mcp.method.name": method, **_TRANSPORT}
    if protocol_version:
        attributes["mcp.protocol.version"] = protocol_version
    if isinstance(request_id, str | int) and not isinstance(request_id, bool):
        attributes["jsonrpc.request.id"] = str(request_id)
    if session_id:
        attributes["mcp.session.id"] = session_id
    if method == "tools/call" and target is not None:
        attributes["gen_ai.tool.name"] = target
        attributes["gen_ai.operation.name"] = "execute_tool"
    elif method == "prompts/get" and target is not None:
        attributes["gen_ai.prompt.name"] = target
    elif method == "resources/read":
        uri = params.get("uri")
        if isinstance(uri, str) and len(uri) <= 2048:
            attributes["mcp.resource.uri"] = uri
    task_id = params.get("taskId")
    if isinstance(task_id, str) and len(task_id) <= 128:
        attributes[TASK_ID] = task_id
    name = f"{method} {target}" if target is not None and method in _TARGETED else method
    span = tracer.start_span(
        name, context=parent, kind=SpanKind.SERVER, attributes=attributes, links=[link] if link else None
    )
    # Current while the request is served: the span, in the context it continues (its baggage kept).
    return Started(span, trace.set_span_in_context(span, parent))


def record_error(span: Span, code: object, message: object) -> None:
    """A JSON-RPC error on ``span``: ``error.type`` and ``rpc.response.status_code`` its code, status
    ``ERROR`` with its message."""
    text = str(code)
    span.set_attribute("error.type", text)
    span.set_attribute("rpc.response.status_code", text)
    span.set_status(Status(StatusCode.ERROR, message if isinstance(message, str) else None))


def record_message(span: Span, message: Mapping[str, Any] | None, error_code: int | None = None) -> None:
    """What a final message says on ``span``: a JSON-RPC error, or a tool's ``isError`` result."""
    if message is None:
        return
    error = message.get("error")
    if error_code is not None or error is not None:
        # The error member: a typed ErrorObject (this server's), or a plain object (relayed).
        code = error.get("code") if isinstance(error, Mapping) else getattr(error, "code", None)
        text = error.get("message") if isinstance(error, Mapping) else getattr(error, "message", None)
        record_error(span, error_code if error_code is not None else code, text)
        return
    result = message.get("result")
    is_error = getattr(result, "is_error", None) if not isinstance(result, Mapping) else result.get("isError")
    if is_error is True:
        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR))


def _final(item: object) -> bool:
    return isinstance(item, Mapping) and ("result" in item or "error" in item)


async def traced_items(span: Span, context: otel_context.Context, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A reply's stream with ``span`` current while each item is made, the span ended with the stream
    (its final message recorded)."""
    try:
        while True:
            token = otel_context.attach(context)
            try:
                item = await anext(items, _END)
            finally:
                otel_context.detach(token)
            if item is _END:
                return
            if _final(item):
                record_message(span, item)
            yield item
    except BaseException as exc:
        span.record_exception(exc)
        raise
    finally:
        span.end()
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()


_END: Final[Any] = object()


# --- a request's reply ------------------------------------------------------------------------------------


async def within(span: Span, work: Awaitable[R], context: otel_context.Context | None = None) -> R:
    """Await ``work`` with ``span`` current (in ``context``, which holds it); a failure is recorded on
    it (a cancellation as an event: a run stopped by ``tasks/cancel`` or a shutdown, a request whose
    client went away)."""
    token = otel_context.attach(context if context is not None else trace.set_span_in_context(span))
    try:
        return await work
    except asyncio.CancelledError:
        span.add_event(EVENT_INTERRUPTED, {"ext_tasks.reason": "cancelled"})
        raise
    except BaseException as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        otel_context.detach(token)


async def traced_reply(started: Started, work: Awaitable[R]) -> R:
    """Await ``work`` (a surface's answer: a JSON reply or a stream) with the request's span current; the
    span ends with a JSON reply, or with a stream's last item."""
    span, context = started
    try:
        reply = await within(span, work, context)
    except BaseException:
        span.end()
        raise
    items = getattr(reply, "items", None)
    if items is not None:  # a stream: the span ends with it
        traced: R = msgspec.structs.replace(reply, items=traced_items(span, context, items))  # type: ignore[type-var]
        return traced
    record_message(span, getattr(reply, "message", None), getattr(reply, "error_code", None))
    span.end()
    return reply


# --- clients ----------------------------------------------------------------------------------------------


def client_span(tracer: Tracer, method: str, params: Mapping[str, Any]) -> Started:
    """The ``CLIENT`` span of a request this process sends (``ext_tasks.client`` with tracing on), a
    child of the current context; the request's ``_meta`` carries it (:func:`inject`)."""
    attributes: dict[str, Any] = {"mcp.method.name": method, **_TRANSPORT}
    target = plain_target(method, params)
    if method == "tools/call" and target is not None:
        attributes["gen_ai.tool.name"] = target
        attributes["gen_ai.operation.name"] = "execute_tool"
    task_id = params.get("taskId")
    if isinstance(task_id, str):
        attributes[TASK_ID] = task_id
    name = f"{method} {target}" if target is not None else method
    span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
    return Started(span, trace.set_span_in_context(span))


async def root_span(name: str, work: Awaitable[R]) -> R:
    """``work`` under one span named ``name`` when tracing is on (a command: every request it sends is
    in one trace), else just ``work``."""
    if tracer is None:
        return await work
    span = tracer.start_span(name, kind=SpanKind.INTERNAL)
    try:
        return await within(span, work)
    finally:
        span.end()
