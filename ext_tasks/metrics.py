"""Prometheus metrics (``GET /metrics``), through the official client library.

Each server process exports its own figures (label ``instance`` is the scrape target's business):
requests by method and outcome with their latency, task transitions by status, the run queue's depth,
runs taken over from dead workers, requestState rejections by reason, the notifications dropped because
a client read its stream too slowly, costly requests refused by their principal's budget, and the store's
health (write refusals by reason, whether it accepts writes, primaries that may evict keys, keys evicted),
and OAuth: tokens refused by reason, fetches of authorization servers' keys by outcome.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

REGISTRY: Final = CollectorRegistry()

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
PACING_REFUSALS: Final = Counter(
    "ext_tasks_pacing_refusals_total",
    "Costly requests refused (HTTP 429) because their principal's budget (EXT_TASKS_PACING_RATE) was spent, "
    "by what was charged: body (a large request body) or listen (task ids and URIs named).",
    ["kind"],
    registry=REGISTRY,
)
NOTIFICATIONS_DROPPED: Final = Counter(
    "ext_tasks_notifications_dropped_total",
    "Notifications of inline requests dropped because the client read its stream slower than the tool "
    "reported (the oldest progress first, then the oldest log line), by kind: progress, log, other.",
    ["kind"],
    registry=REGISTRY,
)
STORE_WRITE_REFUSALS: Final = Counter(
    "ext_tasks_store_write_refusals_total",
    "Store commands Valkey refused for now (answered 'retry later'), by reason: oom (maxmemory reached "
    "under noeviction), busy (a script ran too long), loading, masterdown, noreplicas, misconf, readonly, "
    "unblocked.",
    ["reason"],
    registry=REGISTRY,
)
STORE_ACCEPTS_WRITES: Final = Gauge(
    "ext_tasks_store_accepts_writes",
    "1 while the store accepts writes as far as this process knows (no primary at maxmemory, no write "
    "refused in the last seconds), 0 otherwise.",
    registry=REGISTRY,
)
STORE_EVICTING_PRIMARIES: Final = Gauge(
    "ext_tasks_store_evicting_primaries",
    "Store primaries whose maxmemory-policy is not noeviction (they may delete tasks, idempotency keys and "
    "run queues to make room), as last checked.",
    registry=REGISTRY,
)
STORE_EVICTED_KEYS: Final = Gauge(
    "ext_tasks_store_evicted_keys",
    "Keys the store's primaries evicted since they started (INFO stats evicted_keys, summed), as last checked.",
    registry=REGISTRY,
)
AUTH_REFUSALS: Final = Counter(
    "ext_tasks_auth_refusals_total",
    "Requests refused by OAuth authentication, by reason: missing (no bearer token), invalid (a token "
    "refused: 401 invalid_token), scope (403 insufficient_scope, server-wide scopes), unavailable (503: the "
    "authorization server could not be asked).",
    ["reason"],
    registry=REGISTRY,
)
AUTH_KEY_FETCHES: Final = Counter(
    "ext_tasks_auth_key_fetches_total",
    "Fetches of an authorization server's signing keys (discovery included), by outcome: ok or failed.",
    ["outcome"],
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


#: The latency buckets of ``ext_tasks_request_seconds`` (upper bounds, seconds).
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class RequestStats(Collector):
    """``ext_tasks_requests_total{method,outcome}`` and ``ext_tasks_request_seconds{method}``, kept in
    plain numbers and turned into Prometheus families only when scraped. Every request updates them,
    and the client library's labelled children take a lock per counter, sum and bucket (about 2 µs a
    request, measured); the event loop's one thread is the only writer."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        #: Per method: a count per bucket (not cumulative; the one after the last bound is +Inf), then
        #: the sum of the observed seconds.
        self.latency: dict[str, list[float]] = {}

    def observe(self, method: str, outcome: str, seconds: float) -> None:
        key = (method, outcome)
        self.counts[key] = self.counts.get(key, 0) + 1
        row = self.latency.get(method)
        if row is None:
            row = self.latency[method] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        row[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # the first bound >= seconds: Prometheus' `le`
        row[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "ext_tasks_requests",
            "JSON-RPC requests handled, by method and outcome (ok, or the JSON-RPC error code).",
            labels=["method", "outcome"],
        )
        for (method, outcome), count in list(self.counts.items()):
            requests.add_metric([method, outcome], count)
        yield requests
        seconds = HistogramMetricFamily(
            "ext_tasks_request_seconds",
            "Time to answer a request (until the reply or the start of its stream), by method.",
            labels=["method"],
        )
        bounds = [repr(bound) for bound in LATENCY_BUCKETS] + ["+Inf"]  # as the client library writes them
        for method, row in list(self.latency.items()):
            cumulative = list(accumulate(row[:-1]))
            seconds.add_metric([method], list(zip(bounds, cumulative, strict=True)), sum_value=row[-1])
        yield seconds


REQUEST_STATS: Final = RequestStats()
REGISTRY.register(REQUEST_STATS)
#: Count one request: its method (see :func:`method_label`), outcome and seconds to answer.
observe_request: Final = REQUEST_STATS.observe


def notification_dropped(kind: str) -> None:
    NOTIFICATIONS_DROPPED.labels(kind).inc()


def header_tolerated(header: str) -> None:
    HEADERS_TOLERATED.labels(header).inc()


def scrape() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
