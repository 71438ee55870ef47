"""A small OTLP/HTTP trace receiver on loopback, for tests whose processes export spans.

It answers ``POST /v1/traces`` (protobuf, as the SDK's OTLP/HTTP exporter sends it, gzip or not),
decodes each ``ExportTraceServiceRequest`` with ``opentelemetry-proto`` and keeps the spans, flattened
into :class:`ReceivedSpan` (ids as hex, attributes as plain values, the resource's attributes beside).

::

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        ...
        span = receiver.wait_for_span(lambda s: s.name == "tools/call sleepy", timeout_s=10)
        print(receiver.tree(span.trace_id))
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUSES = {0: "UNSET", 1: "OK", 2: "ERROR"}


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    links: list[ReceivedLink]
    status: str
    status_message: str
    resource: dict[str, Any]

    @property
    def service(self) -> str:
        return str(self.resource.get("service.name", "?"))

    @property
    def pid(self) -> int | None:
        pid = self.resource.get("process.pid")
        return int(pid) if pid is not None else None


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        kind=KINDS.get(span.kind, str(span.kind)),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_attributes(span.attributes),
                        events=[ReceivedEvent(event.name, _attributes(event.attributes)) for event in span.events],
                        links=[
                            ReceivedLink(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                            for link in span.links
                        ],
                        status=STATUSES.get(span.status.code, str(span.status.code)),
                        status_message=span.status.message,
                        resource=resource,
                    )
                )
    return spans


class OtlpReceiver:
    """``POST /v1/traces`` on a free loopback port, in a thread; started and stopped as a context manager."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                received = decode(body)
                with receiver._lock:
                    receiver._spans.extend(received)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds ``/v1/traces``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def in_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [span for span in self.spans() if span.trace_id == trace_id]

    def wait_for_span(self, predicate: Callable[[ReceivedSpan], bool], timeout_s: float) -> ReceivedSpan:
        """The first received span ``predicate`` accepts, waiting up to ``timeout_s`` for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            for span in self.spans():
                if predicate(span):
                    return span
            if time.monotonic() >= deadline:
                names = sorted({span.name for span in self.spans()})
                raise TimeoutError(f"no such span within {timeout_s}s; received: {names}")
            time.sleep(0.05)

    def tree(self, trace_id: str, *, linked: bool = True) -> str:
        """The trace as an indented tree (children under parents, in start order), each span with its
        service and pid, kind, status, attributes, events and links; with ``linked``, the spans of other
        traces that link into this one follow, under a heading."""
        spans = sorted(self.in_trace(trace_id), key=lambda span: span.start_ns)
        ids = {span.span_id for span in spans}
        children: dict[str | None, list[ReceivedSpan]] = {}
        for span in spans:
            parent = span.parent_span_id if span.parent_span_id in ids else None
            children.setdefault(parent, []).append(span)
        lines: list[str] = []
        start = spans[0].start_ns if spans else 0

        def draw(span: ReceivedSpan, depth: int) -> None:
            pad = "    " * depth
            took_ms = (span.end_ns - span.start_ns) / 1e6
            at_ms = (span.start_ns - start) / 1e6
            remote = f" (remote parent {span.parent_span_id})" if depth == 0 and span.parent_span_id else ""
            lines.append(
                f"{pad}{span.name}  [{span.kind}, {span.service} pid {span.pid}, +{at_ms:.0f} ms, {took_ms:.1f} ms, "
                f"{span.status}{': ' + span.status_message if span.status_message else ''}] span {span.span_id}{remote}"
            )
            for key, value in sorted(span.attributes.items()):
                lines.append(f"{pad}    · {key} = {value!r}")
            for event in span.events:
                lines.append(f"{pad}    ! event {event.name} {event.attributes}")
            for link in span.links:
                lines.append(f"{pad}    ~ link to {link.trace_id}/{link.span_id} {link.attributes}")
            for child in children.get(span.span_id, []):
                draw(child, depth + 1)

        lines.append(f"trace {trace_id}")
        for root in children.get(None, []):
            draw(root, 1)
        if linked:
            linking = [
                span
                for span in self.spans()
                if span.trace_id != trace_id and any(link.trace_id == trace_id for link in span.links)
            ]
            if linking:
                # Summed up by name (polls are many), one of each drawn in full.
                lines.append(f"spans of other traces linking into {trace_id}:")
                by_name: dict[str, list[ReceivedSpan]] = {}
                for span in sorted(linking, key=lambda span: span.start_ns):
                    by_name.setdefault(span.name, []).append(span)
                for name, group in by_name.items():
                    pids = sorted({span.pid for span in group if span.pid is not None})
                    lines.append(f"    {len(group)} x {name} (pids {pids}, traces of their own); the last one:")
                    draw(group[-1], 2)
        return "\n".join(lines)
