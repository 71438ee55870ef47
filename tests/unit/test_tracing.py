"""Tracing in process (``ext_tasks.tracing``): the spans the engine, the worker and the task methods make,
exported to an in-memory exporter; and that nothing is made or stored with tracing off.

The cross-instance trace (three instances, OTLP/HTTP, a SIGKILL mid-run) is ``tests/e2e/test_tracing.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ext_tasks import Principal, ToolRegistry, tracing, tracing_setup
from ext_tasks.engine import Engine
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.replies import JsonReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.store.valkey.codec import field_map, record_from_fields
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker

pytestmark = pytest.mark.anyio

VERSION = "2026-07-28"
EXTENSION = "io.modelcontextprotocol/tasks"
ALICE = Principal(id="alice")
KEY = b"tracing-test-key".ljust(32, b"!")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
HEADER_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HEADER_TRACEPARENT = f"00-{HEADER_TRACE_ID}-b7ad6b7169203331-01"


def make_registry() -> ToolRegistry:
    registry = ToolRegistry("tracing-test", version="1.0.0")

    @registry.tool(task="required")
    async def add(a: int, b: int) -> int:
        return a + b

    @registry.tool()
    async def echo(text: str) -> str:
        return text

    return registry


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracing.use_provider(provider)
    try:
        yield exported
    finally:
        tracing.use_provider(None)
        provider.shutdown()


@pytest.fixture
def store() -> MemoryTaskStore:
    return MemoryTaskStore()


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry()


@pytest.fixture
def engine(registry: ToolRegistry, store: MemoryTaskStore) -> Iterator[Engine]:
    codec = ResumeCodec([KEY], audience="tracing-test", ttl_s=600)
    engine = Engine(registry, codec, tasks=TaskMethods(store))
    yield engine
    engine.close()


async def send(
    engine: Engine,
    method: str,
    params: dict[str, Any],
    *,
    meta: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JsonReply:
    body_params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
            **(meta or {}),
        },
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": body_params}
    sent = {"mcp-protocol-version": [VERSION], "mcp-method": [method]}
    name = params.get("name") or params.get("taskId")
    if isinstance(name, str):
        sent["mcp-name"] = [name]
    for header, value in (headers or {}).items():
        sent[header] = [value]
    with anyio.fail_after(5):
        reply = await engine.handle(json.dumps(body).encode(), sent, ALICE)
    assert isinstance(reply, JsonReply), reply
    return reply


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = named(exporter, name)
    assert len(found) == 1, [span.name for span in exporter.get_finished_spans()]
    return found[0]


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


async def test_a_task_is_one_trace_request_run_and_reads_linked(
    exporter: InMemorySpanExporter, engine: Engine, store: MemoryTaskStore, registry: ToolRegistry
) -> None:
    reply = await send(
        engine, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, meta={"traceparent": TRACEPARENT}
    )
    task_id = reply.wire["result"]["taskId"]

    request = one(exporter, "tools/call add")
    assert request.kind is SpanKind.SERVER
    assert hex_trace(request) == TRACE_ID
    assert request.parent is not None and f"{request.parent.span_id:016x}" == CLIENT_SPAN
    assert request.attributes is not None
    assert dict(request.attributes) == {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": VERSION,
        "jsonrpc.request.id": "7",
        "gen_ai.tool.name": "add",
        "gen_ai.operation.name": "execute_tool",
        "network.transport": "tcp",
        "network.protocol.name": "http",
        tracing.TASK_ID: task_id,
    }
    # The task keeps the request span's context: its trace id is the task's trace.
    record = await store.lookup(task_id)
    assert isinstance(record, TaskRecord)
    assert request.context is not None
    assert record.trace_context == f"00-{TRACE_ID}-{request.context.span_id:016x}-01"
    assert tracing.trace_id_of(record.trace_context) == TRACE_ID

    await Worker(store, registry).execute(task_id)
    run = one(exporter, "execute_tool add")
    assert run.kind is SpanKind.INTERNAL
    assert hex_trace(run) == TRACE_ID
    assert run.parent is not None and run.parent.span_id == request.context.span_id
    assert [link.context.span_id for link in run.links] == [request.context.span_id]
    assert run.attributes is not None
    assert run.attributes[tracing.TASK_ID] == task_id
    assert run.attributes[tracing.RUN_ATTEMPT] == 1
    assert [event.name for event in run.events] == [tracing.EVENT_RUN_STARTED, tracing.EVENT_OUTCOME]
    outcome = run.events[-1].attributes
    assert outcome is not None and outcome["ext_tasks.run.outcome"] == "completed"

    # tasks/get in a trace of its own links to the task's.
    await send(engine, "tasks/get", {"taskId": task_id}, meta={"traceparent": HEADER_TRACEPARENT})
    get = one(exporter, "tasks/get")
    assert hex_trace(get) == HEADER_TRACE_ID
    assert get.attributes is not None and get.attributes[tracing.TASK_ID] == task_id
    assert [link.context.span_id for link in get.links] == [request.context.span_id]


async def test_a_reclaimed_attempt_says_so(
    exporter: InMemorySpanExporter, engine: Engine, store: MemoryTaskStore, registry: ToolRegistry
) -> None:
    reply = await send(engine, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    task_id = reply.wire["result"]["taskId"]
    await Worker(store, registry).execute(task_id, attempt=2)
    run = one(exporter, "execute_tool add")
    assert run.attributes is not None and run.attributes[tracing.RUN_ATTEMPT] == 2
    names = [event.name for event in run.events]
    assert names == [tracing.EVENT_RUN_STARTED, tracing.EVENT_RECLAIMED, tracing.EVENT_OUTCOME]
    # Without a client context the request span is a root, and the run is in its trace.
    assert hex_trace(run) == hex_trace(one(exporter, "tools/call add"))


async def test_the_parent_comes_from_meta_else_the_headers(exporter: InMemorySpanExporter, engine: Engine) -> None:
    await send(
        engine, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, headers={"traceparent": HEADER_TRACEPARENT}
    )
    await send(
        engine,
        "tools/call",
        {"name": "echo", "arguments": {"text": "b"}},
        meta={"traceparent": TRACEPARENT},
        headers={"traceparent": HEADER_TRACEPARENT},
    )
    from_headers, from_meta = named(exporter, "tools/call echo")
    assert hex_trace(from_headers) == HEADER_TRACE_ID and not from_headers.links
    assert hex_trace(from_meta) == TRACE_ID
    assert [f"{link.context.trace_id:032x}" for link in from_meta.links] == [HEADER_TRACE_ID]


@pytest.mark.parametrize(
    "hostile",
    [42, ["x"], {"a": 1}, "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "garbage", "00-" + "a" * 9000, None],
)
async def test_a_hostile_traceparent_is_ignored(
    exporter: InMemorySpanExporter, engine: Engine, hostile: object
) -> None:
    reply = await send(
        engine, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, meta={"traceparent": hostile}
    )
    assert reply.status == 200
    span = one(exporter, "tools/call echo")
    assert span.parent is None


async def test_errors_carry_their_json_rpc_code(exporter: InMemorySpanExporter, engine: Engine) -> None:
    await send(engine, "nothing/here", {})
    await send(engine, "tools/call", {"name": "unknown-tool", "arguments": {}})
    missing = one(exporter, "nothing/here")
    assert missing.attributes is not None
    assert missing.attributes["error.type"] == "-32601"
    assert missing.attributes["rpc.response.status_code"] == "-32601"
    assert missing.status.status_code is StatusCode.ERROR
    assert missing.status.description and "Method not found" in missing.status.description
    # An unknown tool's name never becomes a span name (a client could make names unbounded).
    unknown = one(exporter, "tools/call")
    assert unknown.attributes is not None and unknown.attributes["error.type"] == "-32602"


async def test_tracing_off_makes_no_span_and_keeps_no_context(engine: Engine, store: MemoryTaskStore) -> None:
    assert tracing.active() is None
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    trace_api_provider = trace.get_tracer_provider()  # the process's global one is never touched
    reply = await send(
        engine, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, meta={"traceparent": TRACEPARENT}
    )
    record = await store.lookup(reply.wire["result"]["taskId"])
    assert isinstance(record, TaskRecord) and record.trace_context is None
    assert exported.get_finished_spans() == ()
    assert trace.get_tracer_provider() is trace_api_provider


def test_the_valkey_codec_keeps_the_trace_context() -> None:
    record = TaskRecord(
        task_id="t1",
        owner="alice",
        tool="add",
        arguments={},
        status=tracing_status(),
        version=1,
        created_at_ms=1,
        updated_at_ms=1,
        ttl_ms=None,
        poll_interval_ms=100,
        trace_context=TRACEPARENT,
    )
    fields = field_map(record)
    assert fields["trace_context"] == TRACEPARENT
    assert record_from_fields(fields).trace_context == TRACEPARENT
    assert "trace_context" not in field_map(TaskRecord(**{**_fields(record), "trace_context": None}))


def tracing_status() -> Any:
    from ext_tasks.protocol.states import TaskStatus

    return TaskStatus.WORKING


def _fields(record: TaskRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (TRACEPARENT, TRACEPARENT),
        (TRACEPARENT.upper(), None),
        ("01" + TRACEPARENT[2:], None),
        (TRACEPARENT + "-extra", None),
        ("00-" + "0" * 32 + "-" + CLIENT_SPAN + "-01", None),
        (42, None),
        (None, None),
    ],
)
def test_only_a_version_00_traceparent_is_kept(value: object, kept: str | None) -> None:
    assert tracing.valid_traceparent(value) == kept


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_the_otel_variables_turn_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert tracing_setup.wanted(environ) is on


async def test_the_client_sends_the_current_context_in_meta(exporter: InMemorySpanExporter) -> None:
    import httpx

    from ext_tasks.client import Client

    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": {"tools": []}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        client = Client("http://127.0.0.1:1/mcp", http=http)
        tracer = tracing.active()
        assert tracer is not None
        with tracer.start_as_current_span("application") as application:
            await client.list_tools()
    sent = seen[0]["params"]["_meta"]["traceparent"]
    client_span = one(exporter, "tools/list")
    assert client_span.kind is SpanKind.CLIENT
    assert client_span.context is not None
    expected = f"00-{application.get_span_context().trace_id:032x}-{client_span.context.span_id:016x}-"
    assert sent.startswith(expected) and tracing.valid_traceparent(sent) == sent


def test_configure_installs_once_and_refuses_what_it_cannot_export() -> None:
    assert tracing.active() is None
    try:
        assert tracing_setup.configure("t", {"OTEL_TRACES_EXPORTER": "console"}) is True
        assert tracing.active() is not None
        assert tracing_setup.configure("t", {"OTEL_TRACES_EXPORTER": "console"}) is False  # already on
    finally:
        tracing_setup.shutdown()
        tracing.use_provider(None)
    for environ in (
        {"OTEL_TRACES_EXPORTER": "zipkin"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    ):
        with pytest.raises(tracing_setup.TracingUnavailable):
            tracing_setup.configure("t", environ)
        assert tracing.active() is None
    assert tracing_setup.configure("t", {}) is False and tracing.active() is None
