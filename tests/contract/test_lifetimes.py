"""Lifetimes on every store (memory, one Valkey, a Valkey Cluster), with a real worker where a run is
involved: a task running past its grant stays readable and completes; a finished task is kept its
retention by outcome, counted from its end, then reported expired; a wait for input past its deadline is
listed as overdue only while it waits, and ends ``failed`` without anyone reading it; a run past its
tool's ``timeout_s`` is stopped and the task ends ``failed``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import anyio
import pytest

from ext_tasks import Context, ToolRegistry
from ext_tasks.lifetimes import Lifetimes
from ext_tasks.options import TaskOptions, WorkerOptions
from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.task_views import reported_ttl
from ext_tasks.protocol.tasks import TaskRecord, answers_merged, cancelled, completed, failed, input_requested
from ext_tasks.store.base import Expired, TaskStore
from ext_tasks.store.ids import PARTITION_TAGS, new_task_id
from ext_tasks.worker import Worker
from tests.contract.test_store import make_record

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
GRANT_MS = 400
ERROR = {"code": INTERNAL_ERROR, "message": "boom"}
QUESTION = {"method": "elicitation/create", "params": {"message": "go?", "requestedSchema": {"type": "object"}}}


def now_ms() -> int:
    return int(time.time() * 1000)


def fresh(lifetimes: Lifetimes, tool: str, grant_ms: int = GRANT_MS, task_id: str | None = None) -> TaskRecord:
    """A record as ``tasks/create`` makes it: kept to its life's bound, granted ``grant_ms``."""
    return make_record(task_id, tool=tool, ttl_ms=lifetimes.kept_while_unfinished(grant_ms), grant_ms=grant_ms)


async def until(check: Callable[[], object], timeout_s: float = WAIT_S, pause_s: float = 0.02) -> None:
    with anyio.fail_after(timeout_s):
        while True:
            outcome = check()
            if asyncio.iscoroutine(outcome):
                outcome = await outcome
            if outcome:
                return
            await asyncio.sleep(pause_s)


def registry_of_tools(seen: dict[str, object]) -> ToolRegistry:
    registry = ToolRegistry("contract-lifetimes")

    @registry.tool(task="required", ttl_ms=GRANT_MS)
    async def slow(service: str, ref: str, n: int) -> str:
        await asyncio.sleep(GRANT_MS * 3 / 1000)  # three times its grant
        return "done"

    @registry.tool(task="required", timeout_s=0.3)
    async def stuck(service: str, ref: str, n: int) -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen["stopped"] = True
            raise
        return "never"

    @registry.tool(task="required", input_timeout_s=0.3)
    async def ask(ctx: Context, service: str, ref: str, n: int) -> str:
        await ctx.elicit("go", "Go ahead?", {"type": "object", "properties": {}})
        return "answered"

    return registry


@pytest.fixture
async def running(store: TaskStore) -> AsyncIterator[tuple[Worker, Lifetimes, dict[str, object]]]:
    seen: dict[str, object] = {}
    registry = registry_of_tools(seen)
    lifetimes = Lifetimes(TaskOptions(), registry.find_tool)
    # A short lease: the sweep of overdue waits runs every half lease.
    worker = Worker(store, registry, WorkerOptions(lease_s=0.4, block_ms=50), lifetimes=lifetimes)
    await worker.start()
    try:
        yield worker, lifetimes, seen
    finally:
        await worker.stop(1.0)


async def test_a_task_running_past_its_grant_stays_readable_and_completes(
    store: TaskStore, running: tuple[Worker, Lifetimes, dict[str, object]]
) -> None:
    _, lifetimes, _ = running
    record = fresh(lifetimes, "slow")
    await store.create(record)
    ends_seen = []
    with anyio.fail_after(WAIT_S):
        while True:
            found = await store.lookup(record.task_id)
            assert isinstance(found, TaskRecord), "an unfinished task must never expire"
            read_at = now_ms()
            ttl = reported_ttl(found, read_at)
            assert ttl is not None
            ends_seen.append(found.created_at_ms + ttl)
            if found.terminal:
                break
            assert found.created_at_ms + ttl > read_at  # every read is promised a lifetime still ahead
            await asyncio.sleep(0.05)
    assert found.status is TaskStatus.COMPLETED
    assert max(ends_seen[:-1]) > record.created_at_ms + GRANT_MS  # it ran past what it was first granted
    # Kept its grant from its end (the default completed retention), then reported expired.
    assert found.expires_at_ms == found.updated_at_ms + GRANT_MS
    await until(lambda: _expired(store, record.task_id), timeout_s=GRANT_MS / 1000 + 3)
    assert now_ms() >= found.updated_at_ms + GRANT_MS - 50


async def _expired(store: TaskStore, task_id: str) -> bool:
    found = await store.lookup(task_id)
    return isinstance(found, Expired) and found.owner == "alice"


async def test_retention_counts_from_the_end_by_outcome(store: TaskStore) -> None:
    options = TaskOptions(retain_completed_ms=600, retain_failed_ms=2_000, retain_cancelled_ms=1_200)
    lifetimes = Lifetimes(options)
    records = {status: fresh(lifetimes, "deploy", grant_ms=300) for status in ("completed", "failed", "cancelled")}
    for record in records.values():
        await store.create(record)
    await asyncio.sleep(0.5)  # past the grant: only the end counts now
    end = now_ms()
    endings = {
        "completed": completed(records["completed"], {"content": []}, end),
        "failed": failed(records["failed"], ERROR, end),
        "cancelled": cancelled(records["cancelled"], end),
    }
    for status, ending in endings.items():
        assert await store.commit(records[status], lifetimes.fit(records[status], ending))
    expected = {"completed": 600, "failed": 2_000, "cancelled": 1_200}
    for status, record in records.items():
        kept = await store.lookup(record.task_id)
        assert isinstance(kept, TaskRecord) and kept.expires_at_ms == end + expected[status]
    await until(lambda: _expired(store, records["completed"].task_id))
    assert now_ms() >= end + 600 - 50
    assert isinstance(await store.lookup(records["cancelled"].task_id), TaskRecord)
    await until(lambda: _expired(store, records["cancelled"].task_id))
    assert now_ms() >= end + 1_200 - 50
    assert isinstance(await store.lookup(records["failed"].task_id), TaskRecord)  # failures are kept longest
    await until(lambda: _expired(store, records["failed"].task_id))
    assert now_ms() >= end + 2_000 - 50


async def _waiting(store: TaskStore, lifetimes: Lifetimes, task_id: str | None = None) -> TaskRecord:
    """A task of the ``ask`` tool waiting for input, its deadline 300 ms after it began to wait."""
    record = fresh(lifetimes, "ask", task_id=task_id)
    await store.create(record)
    asked = lifetimes.fit(record, input_requested(record, {"go": QUESTION}, None, now_ms()))
    assert asked.deadline_ms is not None
    assert await store.commit(record, asked)
    return asked


async def test_a_wait_past_its_deadline_is_overdue_only_while_it_waits(store: TaskStore) -> None:
    registry = registry_of_tools({})
    lifetimes = Lifetimes(TaskOptions(), registry.find_tool)
    first, second, third = [await _waiting(store, lifetimes, new_task_id(tag)) for tag in PARTITION_TAGS[:3]]
    assert first.deadline_ms is not None
    assert await store.overdue(first.deadline_ms - 400, 10) == []  # not before their deadlines
    later = max(w.deadline_ms or 0 for w in (first, second, third)) + 1
    assert {r.task_id for r in await store.overdue(later, 10)} == {first.task_id, second.task_id, third.task_id}
    assert len(await store.overdue(later, 2)) == 2
    # Answered: back to working, off the list; cancelled: likewise.
    answered = answers_merged(first, {"go": {"action": "accept", "content": {}}}, now_ms())
    assert answered is not None
    assert await store.commit(first, lifetimes.fit(first, answered), enqueue=True)
    assert await store.commit(second, lifetimes.fit(second, cancelled(second, now_ms())))
    assert [r.task_id for r in await store.overdue(later, 10)] == [third.task_id]
    # Asked again: the new wait's own deadline counts.
    resumed = await store.lookup(first.task_id)
    assert isinstance(resumed, TaskRecord) and resumed.status is TaskStatus.WORKING
    again = lifetimes.fit(resumed, input_requested(resumed, {"go": QUESTION}, None, later + 1_000))
    assert await store.commit(resumed, again)
    assert again.deadline_ms is not None and again.deadline_ms > later
    assert [r.task_id for r in await store.overdue(later, 10)] == [third.task_id]
    assert first.task_id in {r.task_id for r in await store.overdue(again.deadline_ms, 10)}


async def test_an_input_timeout_ends_the_task_failed_with_nobody_reading_it(
    store: TaskStore, running: tuple[Worker, Lifetimes, dict[str, object]]
) -> None:
    _, lifetimes, _ = running
    record = fresh(lifetimes, "ask")
    await store.create(record)  # the worker runs it: it asks, and waits

    # The store's own read: no check on read here, only the workers' sweep can end it.
    await until(lambda: _terminal(store, record.task_id))
    done = await store.lookup(record.task_id)
    assert isinstance(done, TaskRecord)
    assert done.status is TaskStatus.FAILED
    assert done.status_message == "Task failed: No answer came within the tool's input timeout of 0.3 s"
    assert done.error is not None and done.error["data"] == {"timeout": "input", "limitSeconds": 0.3}
    assert done.input_requests == {}
    assert done.expires_at_ms == done.updated_at_ms + 86_400_000  # a failure is kept a day from its end
    assert await store.overdue(now_ms() + 1_000, 10) == []


async def test_a_run_past_its_timeout_is_stopped_and_the_task_fails(
    store: TaskStore, running: tuple[Worker, Lifetimes, dict[str, object]]
) -> None:
    _, lifetimes, seen = running
    record = fresh(lifetimes, "stuck")
    await store.create(record)
    started = time.monotonic()
    await until(lambda: _terminal(store, record.task_id))
    done = await store.lookup(record.task_id)
    assert isinstance(done, TaskRecord) and done.status is TaskStatus.FAILED
    assert time.monotonic() - started < 5
    assert done.status_message == "Task failed: The tool ran longer than its timeout of 0.3 s; it was stopped"
    assert done.error is not None and done.error["data"]["timeout"] == "run"
    assert seen.get("stopped") is True  # the coroutine itself was cancelled


async def _terminal(store: TaskStore, task_id: str) -> bool:
    found = await store.lookup(task_id)
    return isinstance(found, TaskRecord) and found.terminal
