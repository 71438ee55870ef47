"""The task policy: lifetimes, poll interval growth, sensitive results, retry-safe creation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ext_tasks import Context, ToolRegistry
from ext_tasks.auth import Principal
from ext_tasks.engine import Engine
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.envelope import META_IDEMPOTENCY_KEY
from ext_tasks.protocol.errors import INVALID_PARAMS
from ext_tasks.protocol.jsonrpc import encode
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.task_views import poll_interval
from ext_tasks.protocol.tasks import TaskRecord, completed, delivered
from ext_tasks.replies import JsonReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import META_TASK_POLICY, TaskMethods

pytestmark = pytest.mark.anyio

EXT = "io.modelcontextprotocol/tasks"
ALICE, BOB = Principal("alice"), Principal("bob")


class Clock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def record(**changes: Any) -> TaskRecord:
    base = TaskRecord(
        task_id="t",
        owner="alice",
        tool="migrate",
        arguments={},
        status=TaskStatus.WORKING,
        version=1,
        created_at_ms=0,
        updated_at_ms=0,
        ttl_ms=3_600_000,
        poll_interval_ms=250,
        poll_max_ms=5_000,
    )
    return msgspec.structs.replace(base, **changes)


@pytest.mark.parametrize(
    ("age_ms", "expected"),
    [(0, 250), (1_000, 250), (2_500, 250), (4_000, 400), (20_000, 2_000), (50_000, 5_000), (3_600_000, 5_000)],
)
def test_poll_interval_is_a_tenth_of_the_age_between_start_and_ceiling(age_ms: int, expected: int) -> None:
    assert poll_interval(record(), age_ms) == expected


def test_poll_interval_without_a_ceiling_stays_at_its_start() -> None:
    assert poll_interval(record(poll_max_ms=None), 10_000_000) == 250


def test_a_delivered_sensitive_result_keeps_only_the_grace_period() -> None:
    done = completed(record(sensitive=True), {"content": []}, 10_000)
    shrunk = delivered(done, now_ms=20_000, grace_ms=5_000)
    assert shrunk is not None
    assert shrunk.ttl_ms == 25_000  # counted from createdAt: read at 20 s + 5 s grace
    assert shrunk.status is TaskStatus.COMPLETED
    assert shrunk.version == done.version + 1
    assert delivered(shrunk, now_ms=21_000, grace_ms=5_000) is None  # shrinks once, never grows back


def test_delivery_never_lengthens_a_life_that_is_already_shorter() -> None:
    done = completed(record(sensitive=True, ttl_ms=12_000), {"content": []}, 10_000)
    shrunk = delivered(done, now_ms=11_000, grace_ms=60_000)
    assert shrunk is not None and shrunk.ttl_ms == 12_000


def test_a_task_still_running_is_not_delivered() -> None:
    assert delivered(record(sensitive=True), now_ms=10, grace_ms=5) is None


def test_reading_a_normal_result_records_nothing() -> None:
    done = completed(record(), {"content": []}, 5)
    assert delivered(done, now_ms=10, grace_ms=5) is None  # nothing to write: the read stays a read


def test_a_sensitive_delivery_is_recorded_once() -> None:
    done = completed(record(sensitive=True), {"content": []}, 5)
    marked = delivered(done, now_ms=10, grace_ms=5)
    assert marked is not None and marked.delivered_at_ms == 10
    assert delivered(marked, now_ms=11, grace_ms=5) is None


# --- through the engine -------------------------------------------------------------------------


def build(clock: Clock) -> tuple[Engine, MemoryTaskStore, list[str]]:
    runs: list[str] = []
    registry = ToolRegistry("policy-test")

    @registry.tool(task="optional")
    async def deploy(ctx: Context, service: str) -> str:
        runs.append(ctx.task_id or "inline")
        return f"deployed {service}"

    @registry.tool(task="required", sensitive=True, ttl_ms=600_000)
    async def migrate(database: str) -> dict[str, int]:
        return {"rows": 42}

    @registry.tool(task="required", ttl_ms=10 * 86_400_000)
    async def archive() -> str:
        return "archived"

    store = MemoryTaskStore(clock_ms=clock)
    options = TaskOptions(task_ttl_ms=3_600_000, task_max_ttl_ms=86_400_000, sensitive_grace_ms=5_000)
    tasks = TaskMethods(store, options, clock_ms=clock)
    engine = Engine(registry, ResumeCodec([b"k" * 32], audience="policy-test"), tasks=tasks)
    return engine, store, runs


async def call(
    engine: Engine,
    method: str,
    params: dict[str, Any],
    principal: Principal = ALICE,
    *,
    key: str | None = None,
    header_key: str | None = None,
) -> JsonReply:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}},
    }
    if key is not None:
        meta[META_IDEMPOTENCY_KEY] = key
    headers = {"mcp-protocol-version": ["2026-07-28"], "mcp-method": [method]}
    if "name" in params:
        headers["mcp-name"] = [params["name"]]
    if "taskId" in params:
        headers["mcp-name"] = [params["taskId"]]
    if header_key is not None:
        headers["idempotency-key"] = [header_key]
    body = encode({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta, **params}})
    reply = await engine.handle(body, headers, principal)
    assert isinstance(reply, JsonReply)
    return reply


def result(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "result" in reply.message, reply.message
    value: dict[str, Any] = reply.wire["result"]
    return value


def error(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "error" in reply.message, reply.message
    value: dict[str, Any] = reply.wire["error"]
    return value


async def test_the_same_key_and_call_answers_the_same_task_and_queues_one_run() -> None:
    engine, store, _ = build(Clock())
    deploy = {"name": "deploy", "arguments": {"service": "billing"}}
    first = result(await call(engine, "tools/call", deploy, key="deploy-billing-1"))
    again = result(await call(engine, "tools/call", deploy, header_key="deploy-billing-1"))
    assert first["resultType"] == again["resultType"] == "task"
    assert again["taskId"] == first["taskId"]
    runs = await store.next_runs("w", 10, 50)
    assert [run.task_id for run in runs] == [first["taskId"]]


async def test_the_same_key_with_other_arguments_is_refused() -> None:
    engine, _, _ = build(Clock())
    await call(engine, "tools/call", {"name": "deploy", "arguments": {"service": "billing"}}, key="k1")
    refused = error(await call(engine, "tools/call", {"name": "deploy", "arguments": {"service": "auth"}}, key="k1"))
    assert refused["code"] == INVALID_PARAMS
    assert "different tool or different arguments" in refused["message"]


async def test_another_principal_with_the_same_key_gets_its_own_task() -> None:
    engine, _, _ = build(Clock())
    deploy = {"name": "deploy", "arguments": {"service": "billing"}}
    alices = result(await call(engine, "tools/call", deploy, ALICE, key="shared"))
    bobs = result(await call(engine, "tools/call", deploy, BOB, key="shared"))
    assert alices["taskId"] != bobs["taskId"]


async def test_without_a_key_every_call_is_a_new_task() -> None:
    engine, _, _ = build(Clock())
    deploy = {"name": "deploy", "arguments": {"service": "billing"}}
    first = result(await call(engine, "tools/call", deploy))
    second = result(await call(engine, "tools/call", deploy))
    assert first["taskId"] != second["taskId"]


@pytest.mark.parametrize(("key", "header"), [("a", "b"), ("x" * 256, None), ("bad\nkey", None), ("", None)])
async def test_malformed_or_conflicting_keys_are_refused(key: str, header: str | None) -> None:
    engine, _, _ = build(Clock())
    deploy = {"name": "deploy", "arguments": {"service": "billing"}}
    assert error(await call(engine, "tools/call", deploy, key=key, header_key=header))["code"] == INVALID_PARAMS


async def test_ttl_is_the_tools_own_capped_by_the_maximum() -> None:
    engine, _, _ = build(Clock())
    assert (
        result(await call(engine, "tools/call", {"name": "deploy", "arguments": {"service": "s"}}))["ttlMs"]
        == 3_600_000
    )
    assert (
        result(await call(engine, "tools/call", {"name": "migrate", "arguments": {"database": "d"}}))["ttlMs"]
        == 600_000
    )
    assert result(await call(engine, "tools/call", {"name": "archive", "arguments": {}}))["ttlMs"] == 86_400_000


async def test_a_sensitive_result_expires_a_grace_period_after_it_was_read() -> None:
    clock = Clock()
    engine, store, _ = build(clock)
    created = result(await call(engine, "tools/call", {"name": "migrate", "arguments": {"database": "d"}}))
    task_id = created["taskId"]
    record_now = await store.lookup(task_id)
    assert isinstance(record_now, TaskRecord)
    assert await store.commit(record_now, completed(record_now, {"content": []}, clock()))
    clock.now_ms += 60_000
    read = result(await call(engine, "tasks/get", {"taskId": task_id}))
    assert read["status"] == "completed"
    assert read["ttlMs"] == 60_000 + 5_000  # the truth: created + ttlMs = read time + grace
    clock.now_ms += 4_999
    assert result(await call(engine, "tasks/get", {"taskId": task_id}))["ttlMs"] == 65_000
    clock.now_ms += 2
    assert error(await call(engine, "tasks/get", {"taskId": task_id}))["message"].endswith("Task has expired")


async def test_a_non_sensitive_result_stays_for_its_whole_ttl() -> None:
    clock = Clock()
    engine, store, _ = build(clock)
    task_id = result(await call(engine, "tools/call", {"name": "deploy", "arguments": {"service": "s"}}))["taskId"]
    current = await store.lookup(task_id)
    assert isinstance(current, TaskRecord)
    assert engine.tasks is not None
    ended = engine.tasks.lifetimes.fit(current, completed(current, {"content": []}, clock()))
    assert await store.commit(current, ended)
    result(await call(engine, "tasks/get", {"taskId": task_id}))
    clock.now_ms += 3_600_000 - 1
    assert result(await call(engine, "tasks/get", {"taskId": task_id}))["ttlMs"] == 3_600_000


async def test_poll_interval_grows_on_the_wire_as_the_task_ages() -> None:
    clock = Clock()
    engine, _, _ = build(clock)
    task_id = result(await call(engine, "tools/call", {"name": "deploy", "arguments": {"service": "s"}}))["taskId"]
    seen = []
    for _ in range(4):
        seen.append(result(await call(engine, "tasks/get", {"taskId": task_id}))["pollIntervalMs"])
        clock.now_ms += 20_000
    assert seen == [250, 2_000, 4_000, 5_000]


async def test_discover_publishes_the_task_policy() -> None:
    engine, _, _ = build(Clock())
    policy = result(await call(engine, "server/discover", {}))["_meta"][META_TASK_POLICY]
    assert policy == {
        "defaultTtlMs": 3_600_000,
        "maxTtlMs": 86_400_000,
        "pollIntervalMs": 250,
        "maxPollIntervalMs": 5_000,
        "sensitiveGraceMs": 5_000,
        "retainCompletedMs": 0,
        "retainFailedMs": 86_400_000,
        "retainCancelledMs": 0,
        "idempotencyWindowMs": 86_400_000,
        "maxTaskArgumentBytes": 262_144,
        "maxAnswerBytes": 262_144,
    }
