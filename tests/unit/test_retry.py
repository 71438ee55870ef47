"""Retries with backoff: the schedule a policy gives, which failures retry, and what the worker makes of
them over the in-memory store (one run at a time, ``Worker.execute``, a fixed clock).

What a tool author relies on: a transient failure leaves the task ``working`` with a statusMessage
saying which attempt comes when, the next attempt is kept scheduled in the store (never queued early),
retries are counted in ``_meta`` apart from crash re-runs, a ``ToolError`` is an outcome unless the
policy names it, and past the last attempt the task ends ``failed`` saying how many attempts were made.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from ext_tasks import Backoff, Context, Principal, Retry, ToolError, ToolRegistry
from ext_tasks.context import RetryLater
from ext_tasks.invoke import invoke_tool
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.envelope import Envelope
from ext_tasks.protocol.errors import INTERNAL_ERROR, InvalidParams
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.task_views import attempts_meta
from ext_tasks.protocol.tasks import META_RETRIES, META_RUN_ATTEMPTS, TaskRecord, cancelled
from ext_tasks.protocol.versions import MODERN_2026_07_28
from ext_tasks.retry import GiveUp, RetryPlan, plan_retry
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.worker import Worker
from tests.contract.test_store import make_record
from tests.support.watching import until

pytestmark = pytest.mark.anyio

T0_MS = 1_800_000_000_000
NOW_MS = T0_MS + 1_000
WAIT_S = 5
NO_JITTER = Backoff(base_s=0.5, factor=2.0, cap_s=3.0, jitter=0.0)


class UpstreamDown(Exception):
    """A transient failure of the tool's upstream."""


class QuotaRefused(ToolError):
    """A tool's own failure result that the tool declares transient."""


# --- the schedule (pure) ------------------------------------------------------------------------------


def test_the_backoff_grows_by_its_factor_up_to_its_cap() -> None:
    assert [NO_JITTER.delay_s(failed) for failed in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("rand", [0.0, 0.25, 0.5, 0.999])
def test_jitter_stays_within_its_fraction_of_the_delay(rand: float) -> None:
    backoff = Backoff(base_s=4.0, factor=1.0, cap_s=60.0, jitter=0.25)
    assert 3.0 <= backoff.delay_s(1, lambda: rand) <= 5.0


def test_the_documented_defaults() -> None:
    policy = Retry()
    assert (policy.attempts, policy.on) == (3, (Exception,))
    assert policy.backoff == Backoff(base_s=1.0, factor=2.0, cap_s=60.0, jitter=0.1)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Retry(attempts=0),
        lambda: Retry(on=("UpstreamDown",)),  # type: ignore[arg-type]
        lambda: Backoff(factor=0.5),
        lambda: Backoff(jitter=1.5),
        lambda: Backoff(base_s=-1),
        lambda: RetryLater(-1, "no"),
    ],
)
def test_a_policy_that_makes_no_sense_is_refused_when_declared(bad: Any) -> None:
    with pytest.raises(ValueError):
        bad()


def test_each_attempt_is_planned_until_the_last_then_given_up() -> None:
    policy = Retry(attempts=4, backoff=NO_JITTER)
    failing = RetryLater(None, "UpstreamDown")
    plans = [plan_retry(policy, retries, failing) for retries in range(4)]
    assert plans[:3] == [
        RetryPlan(2, 4, 0.5, "UpstreamDown"),
        RetryPlan(3, 4, 1.0, "UpstreamDown"),
        RetryPlan(4, 4, 2.0, "UpstreamDown"),
    ]
    assert plans[3] == GiveUp(4, "UpstreamDown")
    assert plans[0].status_message == "attempt 2 of 4 in 0.5 s: UpstreamDown"  # type: ignore[union-attr]
    assert GiveUp(4, "UpstreamDown").message == "Gave up after 4 attempts: UpstreamDown"


def test_a_tools_own_delay_replaces_the_backoff_and_the_policy_still_bounds_it() -> None:
    assert plan_retry(Retry(attempts=5, backoff=NO_JITTER), 1, RetryLater(4, "busy")) == RetryPlan(3, 5, 4, "busy")
    assert plan_retry(None, 2, RetryLater(4, "busy")) == GiveUp(3, "busy")  # without a policy: the default's 3


def test_tool_errors_and_protocol_errors_retry_only_when_named() -> None:
    default = Retry()
    assert default.retries(UpstreamDown())
    assert not default.retries(ToolError("refused"))
    assert not default.retries(InvalidParams("bad"))
    named = Retry(on=(QuotaRefused, UpstreamDown))
    assert named.retries(QuotaRefused("quota")) and named.retries(UpstreamDown())
    assert not named.retries(ToolError("another refusal"))
    assert not named.retries(KeyError("not named"))


def test_the_retries_show_in_meta_apart_from_run_attempts_once_there_is_one() -> None:
    record = _record("flaky")
    assert attempts_meta(record) == {META_RUN_ATTEMPTS: 0}
    retried = msgspec.structs.replace(record, retries=2)
    assert attempts_meta(retried) == {META_RUN_ATTEMPTS: 0, META_RETRIES: 2}


# --- the worker ---------------------------------------------------------------------------------------


def _record(tool: str) -> TaskRecord:
    """A working task of ``tool`` created at ``T0_MS`` (the contract suite's record otherwise)."""
    return make_record(tool=tool, arguments={}, created_at_ms=T0_MS, updated_at_ms=T0_MS, ttl_ms=3_600_000)


class Tools:
    """Tools that fail as told, counting their runs."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.registry = ToolRegistry("retry-test", version="1.0.0")
        self._register()

    def ran(self, name: str) -> int:
        self.runs[name] = self.runs.get(name, 0) + 1
        return self.runs[name]

    def _register(self) -> None:
        tools = self.registry

        @tools.tool(task="required", retry=Retry(attempts=3, backoff=NO_JITTER, on=(UpstreamDown,)))
        async def flaky() -> str:
            if self.ran("flaky") <= 2:
                raise UpstreamDown("secret upstream detail")
            return "done"

        @tools.tool(task="required", retry=Retry(attempts=3, backoff=NO_JITTER, on=(UpstreamDown,)))
        async def down() -> str:
            self.ran("down")
            raise UpstreamDown("still down")

        @tools.tool(task="required", retry=Retry(attempts=3, backoff=NO_JITTER))
        async def refuses() -> str:
            self.ran("refuses")
            raise ToolError("Refused: the quota is exhausted")

        @tools.tool(task="required", retry=Retry(attempts=2, backoff=NO_JITTER, on=(QuotaRefused,)))
        async def quota() -> str:
            if self.ran("quota") == 1:
                raise QuotaRefused("quota exhausted for a minute")
            return "within quota"

        @tools.tool(task="required")
        async def polite(ctx: Context) -> str:
            if self.ran("polite") == 1:
                ctx.retry_later(7, "the upstream asked for 7 s")
            return "served"

        @tools.tool(task="optional")
        async def inline_polite(ctx: Context) -> str:
            ctx.retry_later(1, "come back later")


@pytest.fixture
def tools() -> Tools:
    return Tools()


@pytest.fixture
def store() -> MemoryTaskStore:
    return MemoryTaskStore(clock_ms=lambda: NOW_MS)


@pytest.fixture
def worker(store: MemoryTaskStore, tools: Tools) -> Worker:
    return Worker(store, tools.registry, WorkerOptions(max_attempts=3, block_ms=50), clock_ms=lambda: NOW_MS)


async def _created(store: MemoryTaskStore, tool: str) -> str:
    record = _record(tool)
    await store.create(record)
    await store.next_runs("test", 1, 50)  # the first run taken, as a worker would
    return record.task_id


async def _stored(store: MemoryTaskStore, task_id: str) -> TaskRecord:
    found = await store.lookup(task_id)
    assert isinstance(found, TaskRecord)
    return found


async def _promoted(store: MemoryTaskStore, task_id: str) -> None:
    """The scheduled run queued (as due, whatever its delay) and taken, as a worker would."""
    assert await store.promote_due(NOW_MS + 3_600_000) == 1
    (run,) = await store.next_runs("test", 1, 50)
    assert run.task_id == task_id


async def _run(worker: Worker, task_id: str) -> TaskRecord | None:
    with anyio.fail_after(WAIT_S):
        return await worker.execute(task_id)


async def test_a_transient_failure_schedules_the_next_attempt_and_the_task_stays_working(
    worker: Worker, store: MemoryTaskStore, tools: Tools
) -> None:
    task_id = await _created(store, "flaky")
    await _run(worker, task_id)
    waiting = await _stored(store, task_id)
    assert waiting.status is TaskStatus.WORKING
    # Only the exception's class: its text may hold anything, as for any tool exception.
    assert waiting.status_message == "attempt 2 of 3 in 0.5 s: UpstreamDown"
    assert attempts_meta(waiting) == {META_RUN_ATTEMPTS: 0, META_RETRIES: 1}
    assert waiting.retry_at_ms == NOW_MS + 500  # kept for the operator's view: not stuck until then
    # Kept in the store, due at the backoff's instant: not queued a millisecond early.
    assert await store.promote_due(NOW_MS + 499) == 0
    assert await store.next_runs("test", 1, 10) == []
    assert await store.promote_due(NOW_MS + 500) == 1
    (run,) = await store.next_runs("test", 1, 50)
    assert (run.task_id, run.attempt) == (task_id, 1)  # a fresh run: crash re-runs count from one again


async def test_a_tool_that_fails_twice_then_succeeds_completes_on_its_third_attempt(
    worker: Worker, store: MemoryTaskStore, tools: Tools
) -> None:
    task_id = await _created(store, "flaky")
    await _run(worker, task_id)
    for _ in range(2):
        await _promoted(store, task_id)
        await _run(worker, task_id)
    done = await _stored(store, task_id)
    assert done.status is TaskStatus.COMPLETED
    assert done.result is not None and done.result["content"][0]["text"] == "done"
    assert (tools.runs["flaky"], done.retries, done.attempts) == (3, 2, 1)


async def test_past_the_last_attempt_the_task_fails_saying_how_many_were_made(
    worker: Worker, store: MemoryTaskStore, tools: Tools
) -> None:
    task_id = await _created(store, "down")
    await _run(worker, task_id)
    assert (await _stored(store, task_id)).status_message == "attempt 2 of 3 in 0.5 s: UpstreamDown"
    await _promoted(store, task_id)
    await _run(worker, task_id)
    assert (await _stored(store, task_id)).status_message == "attempt 3 of 3 in 1 s: UpstreamDown"
    await _promoted(store, task_id)
    await _run(worker, task_id)
    ended = await _stored(store, task_id)
    assert ended.status is TaskStatus.FAILED
    assert ended.error == {
        "code": INTERNAL_ERROR,
        "message": "Gave up after 3 attempts: UpstreamDown",
        "data": {"attempts": 3},
    }
    assert ended.status_message == "Task failed: Gave up after 3 attempts: UpstreamDown"
    assert tools.runs["down"] == 3
    assert await store.promote_due(NOW_MS + 3_600_000) == 0  # nothing left scheduled


async def test_a_tool_error_is_an_outcome_and_never_retried_unless_named(
    worker: Worker, store: MemoryTaskStore, tools: Tools
) -> None:
    refused = await _created(store, "refuses")
    await _run(worker, refused)
    outcome = await _stored(store, refused)
    assert outcome.status is TaskStatus.COMPLETED and outcome.result is not None and outcome.result["isError"]
    assert (tools.runs["refuses"], outcome.retries) == (1, 0)
    named = await _created(store, "quota")
    await _run(worker, named)
    assert (await _stored(store, named)).status_message == "attempt 2 of 2 in 0.5 s: quota exhausted for a minute"
    await _promoted(store, named)
    await _run(worker, named)
    assert (await _stored(store, named)).result["content"][0]["text"] == "within quota"  # type: ignore[index]


async def test_retry_later_schedules_the_tools_own_delay(worker: Worker, store: MemoryTaskStore, tools: Tools) -> None:
    task_id = await _created(store, "polite")
    await _run(worker, task_id)
    assert (await _stored(store, task_id)).status_message == "attempt 2 of 3 in 7 s: the upstream asked for 7 s"
    assert await store.promote_due(NOW_MS + 6_999) == 0
    await _promoted(store, task_id)
    await _run(worker, task_id)
    assert (await _stored(store, task_id)).status is TaskStatus.COMPLETED


async def test_a_worker_promotes_its_own_retry_when_due_while_its_take_loop_blocks(tools: Tools) -> None:
    """Started, a worker completes a task that failed twice, with delays of 0.5 s and 1 s on the real
    clock: each retry is promoted when due although the take loop waits in a read of 10 s."""
    store = MemoryTaskStore()
    worker = Worker(store, tools.registry, WorkerOptions(block_ms=10_000, lease_s=60))
    record = _record("flaky")
    await store.create(record)
    await worker.start()
    try:
        found = await until(store, record.task_id, lambda seen: seen.terminal)
    finally:
        await worker.stop(1.0)
    assert (found.status, found.retries, tools.runs["flaky"]) == (TaskStatus.COMPLETED, 2, 3)


async def test_inline_there_is_no_later_retry_later_ends_the_call_with_its_reason(tools: Tools) -> None:
    tool = tools.registry.find_tool("inline_polite")
    assert tool is not None
    ctx = Context(principal=Principal(id="alice"), envelope=Envelope(MODERN_2026_07_28, {}, None, None, None))
    result = await invoke_tool(tool, {}, ctx)
    assert (result.is_error, result.content) == (True, [{"type": "text", "text": "come back later"}])


async def test_a_task_cancelled_while_its_retry_waits_is_not_run_again(
    worker: Worker, store: MemoryTaskStore, tools: Tools
) -> None:
    task_id = await _created(store, "down")
    await _run(worker, task_id)
    waiting = await _stored(store, task_id)
    assert await store.commit(waiting, cancelled(waiting, NOW_MS))
    await _promoted(store, task_id)  # the scheduled run still comes due
    assert await _run(worker, task_id) is None
    assert (tools.runs["down"], (await _stored(store, task_id)).status) == (1, TaskStatus.CANCELLED)
