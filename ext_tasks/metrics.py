"""Prometheus metrics (``GET /metrics``), through the official client library.

Each server process exports its own figures (label ``instance`` is the scrape target's business):
requests by method and outcome with their latency, task transitions by status, the run queue's depth,
runs taken over from dead workers, and requestState rejections by reason.
"""

from __future__ import annotations

from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY: Final = CollectorRegistry()

REQUESTS: Final = Counter(
    "ext_tasks_requests_total",
    "JSON-RPC requests handled, by method and outcome (ok, or the JSON-RPC error code).",
    ["method", "outcome"],
    registry=REGISTRY,
)
REQUEST_SECONDS: Final = Histogram(
    "ext_tasks_request_seconds",
    "Time to answer a request (until the reply or the start of its stream), by method.",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
TASK_TRANSITIONS: Final = Counter(
    "ext_tasks_task_transitions_total",
    "Tasks entering each status (created tasks enter working).",
    ["status"],
    registry=REGISTRY,
)
QUEUE_DEPTH: Final = Gauge(
    "ext_tasks_run_queue_depth",
    "Task runs queued or in flight, as last seen by this process's worker.",
    registry=REGISTRY,
)
LEASE_RECLAIMS: Final = Counter(
    "ext_tasks_lease_reclaims_total", "Task runs taken over after their worker stopped heartbeating.", registry=REGISTRY
)
STATE_REJECTIONS: Final = Counter(
    "ext_tasks_request_state_rejections_total",
    "requestState verification failures, by reason (the client only ever sees one fixed error).",
    ["reason"],
    registry=REGISTRY,
)
HEADERS_TOLERATED: Final = Counter(
    "ext_tasks_header_tolerated_total",
    "Requests served although they left out a header the transport asks for (EXT_TASKS_STRICT_HEADERS "
    "refuses them), by header: which clients would break in strict mode.",
    ["header"],
    registry=REGISTRY,
)
OPEN_WAITS: Final = Gauge(
    "ext_tasks_open_waits",
    "Long waits open in this process (subscriptions/listen, legacy GET streams and tasks/result).",
    registry=REGISTRY,
)
STORE_FAILOVERS: Final = Counter(
    "ext_tasks_store_failovers_total",
    "Times this process saw the store's primary change: the sentinels named another primary, or a cluster "
    "replica took over a primary's slots.",
    registry=REGISTRY,
)
STORE_RETRIES: Final = Counter(
    "ext_tasks_store_retries_total",
    "Store commands sent again after a broken connection, a redirection or a 'try again' (cluster), "
    "before the request was answered.",
    registry=REGISTRY,
)
STORE_ACK_TIMEOUTS: Final = Counter(
    "ext_tasks_store_ack_timeouts_total",
    "Writes the replicas did not confirm within EXT_TASKS_VALKEY_ACK_TIMEOUT_MS (answered 'retry later').",
    registry=REGISTRY,
)
KNOWN_METHODS: Final = frozenset(
    {
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
    }
)


def method_label(method: str) -> str:
    """Unknown method names are client-chosen text: one label for all, so they cannot grow the series."""
    return method if method in KNOWN_METHODS else "other"


_request_children: dict[tuple[str, str], Any] = {}
_latency_children: dict[str, Any] = {}


def observe_request(method: str, outcome: str, seconds: float) -> None:
    """Count one request. The labelled children are kept: ``labels()`` takes a lock and builds a key on
    every call, which costs measurable time on the hot path."""
    counter = _request_children.get((method, outcome))
    if counter is None:
        counter = _request_children[(method, outcome)] = REQUESTS.labels(method, outcome)
    latency = _latency_children.get(method)
    if latency is None:
        latency = _latency_children[method] = REQUEST_SECONDS.labels(method)
    counter.inc()
    latency.observe(seconds)


def header_tolerated(header: str) -> None:
    HEADERS_TOLERATED.labels(header).inc()


def scrape() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
