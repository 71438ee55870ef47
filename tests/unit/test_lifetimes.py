"""The lifetime rules, on a clock the test moves: what a task is granted, what a reader is told while it
is unfinished, retention by outcome from its end (per tool, floored by the grant, capped by the maximum),
the deadlines of waits for input, and the ends past a limit, through ``tasks/*`` too (the check on read)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ext_tasks import Context, Retention, ToolRegistry
from ext_tasks.config import ConfigError, settings_from_env
from ext_tasks.engine import Engine
from ext_tasks.lifetimes import Lifetimes
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.task_views import reported_ttl
from ext_tasks.protocol.tasks import TaskRecord, cancelled, completed, failed, input_requested
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from tests.unit.test_task_policy import ALICE, Clock, call, result

pytestmark = pytest.mark.anyio

HOUR, DAY = 3_600_000, 86_400_000
QUESTION = {"method": "elicitation/create", "params": {"message": "go?", "requestedSchema": {"type": "object"}}}


def tools() -> ToolRegistry:
    registry = ToolRegistry("lifetimes-test")

    @registry.tool(task="required")
    async def plain() -> str:
        return "ok"

    @registry.tool(task="required", ttl_ms=2 * HOUR, retention=Retention(failed_ms=3 * DAY, completed_ms=60_000))
    async def audited() -> str:
        return "ok"

    @registry.tool(task="required", input_timeout_s=90)
    async def ask(ctx: Context) -> str:
        await ctx.elicit("go", "Go?", {"type": "object", "properties": {}})
        return "ok"

    return registry


def lifetimes(**options: Any) -> Lifetimes:
    return Lifetimes(TaskOptions(task_max_ttl_ms=7 * DAY, **options), tools().find_tool)


def created(life: Lifetimes, tool: str, grant_ms: int, at_ms: int = 0) -> TaskRecord:
    return TaskRecord(
        task_id="t",
        owner="alice",
        tool=tool,
        arguments={},
        status=TaskStatus.WORKING,
        version=1,
        created_at_ms=at_ms,
        updated_at_ms=at_ms,
        ttl_ms=life.kept_while_unfinished(grant_ms),
        grant_ms=grant_ms,
        poll_interval_ms=250,
    )


def test_the_grant_is_the_hint_else_the_tool_else_the_default_never_past_the_maximum() -> None:
    life, registry = lifetimes(), tools()
    plain, audited = registry.tools["plain"], registry.tools["audited"]
    assert life.grant(plain) == HOUR
    assert life.grant(audited) == 2 * HOUR
    assert life.grant(audited, hint_ms=90_000) == 90_000
    assert life.grant(plain, hint_ms=30 * DAY) == 7 * DAY


def test_an_unfinished_task_is_told_its_grant_from_now_and_never_past_what_is_kept() -> None:
    life = lifetimes()
    record = created(life, "plain", HOUR)
    assert reported_ttl(record, 0) == HOUR  # CreateTaskResult: the grant
    assert reported_ttl(record, 5 * HOUR) == 6 * HOUR  # long past the grant: still an hour ahead
    assert reported_ttl(record, 7 * DAY + 10 * HOUR) == 7 * DAY + HOUR  # never past the record's bound
    assert reported_ttl(record, None) == HOUR  # as of its last update
    old = msgspec.structs.replace(record, grant_ms=None, ttl_ms=HOUR)  # a record of an earlier version
    assert reported_ttl(old, 5 * HOUR) == HOUR


@pytest.mark.parametrize(
    ("tool", "end", "expected"),
    [
        ("plain", "completed", HOUR),  # the default: its grant
        ("plain", "failed", DAY),  # failures are kept a day by default
        ("plain", "cancelled", HOUR),
        ("audited", "failed", 3 * DAY),  # the tool's own
        ("audited", "completed", 2 * HOUR),  # under the grant counts as the grant: a reader was promised it
        ("audited", "cancelled", 2 * HOUR),
    ],
)
def test_retention_counts_from_the_end_by_outcome_and_tool(tool: str, end: str, expected: int) -> None:
    life = lifetimes()
    record = created(life, tool, life.grant(tools().tools[tool]))
    at = 10 * HOUR  # ended long after its grant ran out
    ending = {
        "completed": completed(record, {"content": []}, at),
        "failed": failed(record, {"code": INTERNAL_ERROR, "message": "x"}, at),
        "cancelled": cancelled(record, at),
    }[end]
    kept = life.fit(record, ending)
    assert kept.expires_at_ms == at + expected
    assert reported_ttl(kept, at + 1) == kept.ttl_ms  # a finished task is told the truth as stored


def test_server_retention_settings_and_the_maximum_cap() -> None:
    life = Lifetimes(TaskOptions(retain_completed_ms=5 * HOUR, retain_failed_ms=30 * DAY, task_max_ttl_ms=DAY))
    record = created(life, "plain", HOUR)
    assert life.fit(record, completed(record, {"content": []}, 0)).ttl_ms == 5 * HOUR
    assert life.fit(record, failed(record, {"code": 1, "message": "x"}, 0)).ttl_ms == DAY  # capped


def test_a_wait_for_input_gets_its_deadline_and_loses_it_when_answered() -> None:
    life = lifetimes()
    record = created(life, "ask", HOUR)
    asked = life.fit(record, input_requested(record, {"go": QUESTION}, None, 1_000))
    assert asked.deadline_ms == 91_000  # input_timeout_s=90 from when it began to wait
    assert life.overdue(asked, 90_999) is None
    ended = life.overdue(asked, 91_000)
    assert ended is not None and ended.status is TaskStatus.FAILED
    assert ended.status_message == "Task failed: No answer came within the tool's input timeout of 90 s"
    assert ended.ttl_ms == 91_000 + DAY
    # A tool without an input timeout waits at most until the task's life's bound.
    plain = created(life, "plain", HOUR)
    waiting = life.fit(plain, input_requested(plain, {"go": QUESTION}, None, 5))
    assert waiting.deadline_ms == 7 * DAY
    bound = life.overdue(waiting, 7 * DAY)
    assert bound is not None and bound.error is not None and bound.error["data"]["timeout"] == "life"


def test_a_working_task_past_its_life_bound_is_overdue() -> None:
    life = lifetimes()
    record = created(life, "plain", HOUR)
    assert life.overdue(record, 7 * DAY - 1) is None
    ended = life.overdue(record, 7 * DAY)
    assert ended is not None and "EXT_TASKS_TASK_MAX_TTL_MS" in (ended.status_message or "")


def test_a_run_is_limited_by_its_tool_timeout_or_the_life_bound() -> None:
    registry = ToolRegistry("timeouts")

    @registry.tool(task="required", timeout_s=1.5)
    async def quick() -> str:
        return "ok"

    life = Lifetimes(TaskOptions(task_max_ttl_ms=DAY), registry.find_tool)
    record = created(life, "quick", HOUR)
    deadline, error = life.run_limit(record, registry.tools["quick"], 10_000)
    assert deadline == 11_500 and error["data"] == {"timeout": "run", "limitSeconds": 1.5}
    assert life.run_limit(record, registry.tools["quick"], DAY - 1_000)[0] == DAY  # the bound comes first
    assert life.run_limit(record, None, 10)[0] == DAY


@pytest.mark.parametrize("bad", [0, -1, True, "5"])
def test_timeouts_must_be_positive_seconds(bad: object) -> None:
    registry = ToolRegistry("bad")
    with pytest.raises(ValueError, match="timeout_s must be a positive number of seconds"):
        registry.tool(timeout_s=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Retention\.failed_ms"):
        Retention(failed_ms=0)


def test_retention_variables_are_read_and_checked() -> None:
    read = settings_from_env({"EXT_TASKS_RETAIN_COMPLETED_MS": "5000", "EXT_TASKS_RETAIN_CANCELLED_MS": "7000"})
    assert (read.tasks.retain_completed_ms, read.tasks.retain_failed_ms, read.tasks.retain_cancelled_ms) == (
        5_000,
        DAY,
        7_000,
    )
    with pytest.raises(ConfigError, match="EXT_TASKS_RETAIN_FAILED_MS must be positive"):
        settings_from_env({"EXT_TASKS_RETAIN_FAILED_MS": "0"})


async def test_a_reader_finds_an_overdue_wait_ended_failed() -> None:
    """The check on read: ``tasks/get`` past a wait's deadline ends it before answering (the workers'
    sweep does the same for the tasks nobody reads)."""
    clock = Clock()
    registry = tools()
    store = MemoryTaskStore(clock_ms=clock)
    options = TaskOptions(task_max_ttl_ms=7 * DAY)
    methods = TaskMethods(store, options, clock_ms=clock, lifetimes=Lifetimes(options, registry.find_tool))
    engine = Engine(registry, ResumeCodec([b"k" * 32], audience="lifetimes-test"), tasks=methods)
    created_task = result(await call(engine, "tools/call", {"name": "plain", "arguments": {}}))
    assert created_task["ttlMs"] == HOUR
    record = await store.lookup(created_task["taskId"])
    assert isinstance(record, TaskRecord)
    clock.now_ms += 2 * HOUR  # past its grant: still there, still an hour ahead
    seen = result(await call(engine, "tasks/get", {"taskId": record.task_id}))
    assert (seen["status"], seen["ttlMs"]) == ("working", 3 * HOUR)
    asked = await _ask(store, methods.lifetimes, record, clock.now_ms)
    clock.now_ms = (asked.deadline_ms or 0) + 1
    seen = result(await call(engine, "tasks/get", {"taskId": record.task_id}, ALICE))
    assert seen["status"] == "failed" and "life" in str(seen["error"]["data"])


async def _ask(store: MemoryTaskStore, life: Lifetimes, record: TaskRecord, at_ms: int) -> TaskRecord:
    asked = life.fit(record, input_requested(record, {"go": QUESTION}, None, at_ms))
    assert await store.commit(record, asked)
    return asked
