"""The task worker over the in-memory store, in-process.

Most tests call ``Worker.execute(task_id)`` directly (burst style: one run to its next resting point,
no background loop). The cancellation and shutdown tests start the worker's loops with ``start()`` and
always ``stop()`` them. Nothing sleeps: tools wait on events the test sets, and the test waits for the
store to commit a status (``WatchedStore.wait_for``), each wait bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from ext_tasks import Context, InputRequired, Principal, ProtocolError, ToolError, ToolRegistry, elicit
from ext_tasks import compose as server_module
from ext_tasks.config import Settings
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.envelope import Envelope
from ext_tasks.protocol.errors import INTERNAL_ERROR, MISSING_REQUIRED_CLIENT_CAPABILITY, Busy
from ext_tasks.protocol.requests import PARSERS, Call
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.task_views import detailed_task_wire
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.protocol.versions import MODERN_2026_07_28
from ext_tasks.runs import run_envelope
from ext_tasks.store.base import Run, WatchItem
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker

pytestmark = pytest.mark.anyio

EXTENSION = "io.modelcontextprotocol/tasks"
T0_MS = 1_800_000_000_000
WAIT_S = 5
ALICE = Principal(id="alice")
DECLARING: dict[str, Any] = {"extensions": {EXTENSION: {}}, "elicitation": {}}
EXTENSION_ONLY: dict[str, Any] = {"extensions": {EXTENSION: {}}}
CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
REPLY_SCHEMA = {"type": "object", "properties": {"reply": {"type": "string"}}, "required": ["reply"]}
SECRET = "secret-path /srv/keys/prod.pem"


class UpstreamError(ProtocolError):
    """A JSON-RPC-level failure raised by a tool: the task must end ``failed`` with it."""

    code = INTERNAL_ERROR


class WatchedStore(MemoryTaskStore):
    """The memory store, plus a way to wait (without sleeping) until a task reaches a status."""

    def __init__(self) -> None:
        super().__init__(clock_ms=lambda: T0_MS)
        self._waiters: list[anyio.Event] = []

    def _changed(self) -> None:
        for waiter in self._waiters:
            waiter.set()

    async def commit(self, *args: Any, **kwargs: Any) -> bool:
        committed = await super().commit(*args, **kwargs)
        if committed:
            self._changed()
        return committed

    async def record(self, task_id: str) -> TaskRecord:
        found = await self.lookup(task_id)
        assert isinstance(found, TaskRecord), found
        return found

    async def wait_for(self, task_id: str, *statuses: TaskStatus) -> TaskRecord:
        with anyio.fail_after(WAIT_S):
            while True:
                changed = anyio.Event()
                self._waiters.append(changed)
                try:
                    found = await self.lookup(task_id)
                    if isinstance(found, TaskRecord) and found.status in statuses:
                        return found
                    await changed.wait()
                finally:
                    self._waiters.remove(changed)


class Probe:
    """What the tools did, and the events tests use to pace them."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.task_ids: list[str | None] = []
        self.principals: list[str] = []
        self.started = anyio.Event()
        self.saw_cancel = anyio.Event()
        self.release = anyio.Event()
        self.paused = [anyio.Event(), anyio.Event()]
        self.resume = [anyio.Event(), anyio.Event()]

    def ran(self, name: str) -> int:
        self.runs[name] = self.runs.get(name, 0) + 1
        return self.runs[name]

    def count(self, name: str) -> int:
        return self.runs.get(name, 0)


def make_registry(probe: Probe) -> ToolRegistry:
    registry = ToolRegistry("worker-test", version="1.0.0")
    register_outcome_tools(registry, probe)
    register_paced_tools(registry, probe)
    return registry


def register_outcome_tools(registry: ToolRegistry, probe: Probe) -> None:
    """Tools that end one way or another as soon as they run (or ask a question)."""

    @registry.tool(task="required")
    async def add(a: int, b: int) -> int:
        probe.ran("add")
        return a + b

    @registry.tool(task="required")
    async def refuse() -> str:
        probe.ran("refuse")
        raise ToolError("Refused: the quota is exhausted")

    @registry.tool(task="required")
    async def crash() -> str:
        probe.ran("crash")
        raise RuntimeError(SECRET)

    @registry.tool(task="required")
    async def upstream() -> str:
        probe.ran("upstream")
        raise UpstreamError("Upstream API rate limit exceeded", data={"retryAfterS": 30})

    @registry.tool(task="required")
    async def confirm(ctx: Context, target: str) -> str:
        probe.ran("confirm")
        probe.task_ids.append(ctx.task_id)
        probe.principals.append(ctx.principal.id)
        if "confirm" not in ctx.answers:
            raise InputRequired({"confirm": elicit(f"Delete {target}?", CONFIRM_SCHEMA)}, state={"asked_for": target})
        answer = ctx.ask({"confirm": elicit(f"Delete {target}?", CONFIRM_SCHEMA)})["confirm"]
        verdict = "deleted" if answer.action == "accept" and answer.content["confirm"] else "kept"
        return f"{ctx.state['asked_for']}: {verdict}"

    @registry.tool(task="required")
    async def interview(ctx: Context) -> str:
        """Asks four questions one after the other: five runs, none of them interrupted."""
        probe.ran("interview")
        replies = []
        for key in ("q1", "q2", "q3", "q4"):
            reply = await ctx.elicit(key, f"Question {key}?", REPLY_SCHEMA)
            replies.append(str((reply.content or {}).get("reply")))
        return " ".join(replies)

    @registry.tool(task="required")
    async def shed(ctx: Context) -> str:
        """Sheds load once with a state-only input_required (no question), then finishes."""
        probe.ran("shed")
        if ctx.state is None:
            raise InputRequired(state={"shed": True})
        return f"shed={ctx.state['shed']}"

    @registry.tool(task="required")
    async def vanishing() -> str:
        probe.ran("vanishing")
        return "still here"


def register_paced_tools(registry: ToolRegistry, probe: Probe) -> None:
    """Tools that wait on the probe's events, so a test can act while they run."""

    @registry.tool(task="required")
    async def paced(ctx: Context) -> str:
        probe.ran("paced")
        await ctx.set_status("Reading the input")
        probe.paused[0].set()
        await probe.resume[0].wait()
        await ctx.report_progress(1, 2, message="Half way there")
        probe.paused[1].set()
        await probe.resume[1].wait()
        return "paced"

    @registry.tool(task="required")
    async def hold() -> str:
        """Runs until cancelled, and notes the cancellation."""
        probe.ran("hold")
        probe.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            probe.saw_cancel.set()
            raise
        return "never"

    @registry.tool(task="required")
    async def stubborn() -> str:
        """Ignores cancellation (none reaches it without the worker loops) and returns late."""
        probe.ran("stubborn")
        probe.started.set()
        await probe.release.wait()
        return "late result"

    @registry.tool(task="required")
    async def resumable() -> str:
        """The first run is interrupted (it waits forever); a later run finishes."""
        run = probe.ran("resumable")
        if run == 1:
            probe.started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                probe.saw_cancel.set()
                raise
        return f"finished on run {run}"


@pytest.fixture
async def probe() -> Probe:
    return Probe()


@pytest.fixture
def registry(probe: Probe) -> ToolRegistry:
    return make_registry(probe)


@pytest.fixture
def store() -> WatchedStore:
    return WatchedStore()


@pytest.fixture
def worker(store: WatchedStore, registry: ToolRegistry) -> Worker:
    return Worker(store, registry, WorkerOptions(max_attempts=3, block_ms=50), clock_ms=lambda: T0_MS + 1_000)


@pytest.fixture
def task_methods(store: WatchedStore) -> TaskMethods:
    return TaskMethods(store, clock_ms=lambda: T0_MS + 2_000)


# --- helpers ----------------------------------------------------------------------------------------

_ids = itertools.count(1)


async def add_task(
    store: WatchedStore,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
    attempts: int = 0,
) -> str:
    """A working task as ``TaskMethods.create`` stores it (its first run queued)."""
    record = TaskRecord(
        task_id=f"task-{next(_ids)}",
        owner=ALICE.id,
        tool=tool,
        arguments=dict(arguments or {}),
        status=TaskStatus.WORKING,
        version=1,
        created_at_ms=T0_MS,
        updated_at_ms=T0_MS,
        ttl_ms=3_600_000,
        poll_interval_ms=500,
        client_capabilities=dict(DECLARING if capabilities is None else capabilities),
        attempts=attempts,
    )
    await store.create(record)
    return record.task_id


def envelope() -> Envelope:
    return Envelope("2026-07-28", DECLARING, None, None, None)


def checked(method: str, params: dict[str, Any]) -> Call[Any]:
    """A tasks/* request as the engine hands it to TaskMethods: decoded and checked."""
    return Call("req", method, PARSERS[method](params, envelope()), envelope())


async def drop(method: str, params: dict[str, Any]) -> None:
    """Where the notifications of a call go when nobody listens."""


async def execute(worker: Worker, task_id: str, *, attempt: int = 1) -> TaskRecord | None:
    with anyio.fail_after(WAIT_S):
        return await worker.execute(task_id, attempt=attempt)


def texts(result: dict[str, Any] | None) -> list[str]:
    assert result is not None
    return [block["text"] for block in result["content"] if block.get("type") == "text"]


@asynccontextmanager
async def running(worker: Worker, grace_s: float = 1.0) -> AsyncIterator[Worker]:
    await worker.start()
    try:
        yield worker
    finally:
        with anyio.fail_after(WAIT_S + grace_s):
            await worker.stop(grace_s)


# --- outcomes ---------------------------------------------------------------------------------------


async def test_a_run_completes_with_the_tools_result(worker: Worker, store: WatchedStore) -> None:
    task_id = await add_task(store, "add", {"a": 2, "b": 3})
    committed = await execute(worker, task_id)
    stored = await store.record(task_id)
    assert committed == stored
    assert stored.status is TaskStatus.COMPLETED
    assert stored.result is not None
    assert texts(stored.result) == ["5"]
    assert stored.result["isError"] is False
    assert stored.error is None
    assert stored.attempts == 1
    wire = detailed_task_wire(stored)
    assert wire["result"]["content"] == [{"type": "text", "text": "5"}]


async def test_a_tool_error_completes_with_an_is_error_result(worker: Worker, store: WatchedStore) -> None:
    task_id = await add_task(store, "refuse")
    await execute(worker, task_id)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.COMPLETED  # isError is a result, not a failure (protocol.md §3.10)
    assert stored.result is not None
    assert stored.result["isError"] is True
    assert texts(stored.result) == ["Refused: the quota is exhausted"]
    assert stored.error is None


async def test_a_crashing_tool_completes_with_a_generic_is_error_result(worker: Worker, store: WatchedStore) -> None:
    task_id = await add_task(store, "crash")
    await execute(worker, task_id)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.COMPLETED
    assert stored.result is not None
    assert stored.result["isError"] is True
    assert SECRET not in str(stored.result)


async def test_a_protocol_error_fails_the_task_with_that_error(worker: Worker, store: WatchedStore) -> None:
    task_id = await add_task(store, "upstream")
    await execute(worker, task_id)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.FAILED
    assert stored.error == {
        "code": INTERNAL_ERROR,
        "message": "Upstream API rate limit exceeded",
        "data": {"retryAfterS": 30},
    }
    assert stored.status_message is not None
    assert "Upstream API rate limit exceeded" in stored.status_message
    assert stored.result is None
    wire = detailed_task_wire(stored)
    assert wire["error"]["code"] == INTERNAL_ERROR
    assert "result" not in wire
    assert "statusMessage" in wire


# --- input inside a task ----------------------------------------------------------------------------


async def test_a_question_puts_the_task_in_input_required_and_the_answer_completes_it(
    worker: Worker, store: WatchedStore, task_methods: TaskMethods, probe: Probe
) -> None:
    task_id = await add_task(store, "confirm", {"target": "report.pdf"})
    await execute(worker, task_id)
    waiting = await store.record(task_id)
    assert waiting.status is TaskStatus.INPUT_REQUIRED
    assert set(waiting.input_requests) == {"confirm"}
    request = waiting.input_requests["confirm"]
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Delete report.pdf?"
    assert request["params"]["requestedSchema"] == CONFIRM_SCHEMA
    assert waiting.state == {"asked_for": "report.pdf"}
    assert detailed_task_wire(waiting)["inputRequests"] == waiting.input_requests

    # A run of a task that waits for input does nothing.
    assert await execute(worker, task_id) is None
    assert probe.count("confirm") == 1

    params = {"taskId": task_id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}}}
    ack = await task_methods.update(checked("tasks/update", params), ALICE, drop)
    assert msgspec.to_builtins(ack) == {"resultType": "complete"}
    resumed = await store.record(task_id)
    assert resumed.status is TaskStatus.WORKING
    assert resumed.input_requests == {}
    runs = await store.next_runs("probe", 10, block_ms=50)
    assert task_id in [run.task_id for run in runs]  # the answer queued the next run

    await execute(worker, task_id)
    done = await store.record(task_id)
    assert done.status is TaskStatus.COMPLETED
    assert texts(done.result) == ["report.pdf: deleted"]
    assert probe.count("confirm") == 2


async def test_ctx_task_id_and_principal_are_stable_across_re_runs(
    worker: Worker, store: WatchedStore, task_methods: TaskMethods, probe: Probe
) -> None:
    task_id = await add_task(store, "confirm", {"target": "a.txt"})
    await execute(worker, task_id)
    params = {"taskId": task_id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": False}}}}
    await task_methods.update(checked("tasks/update", params), ALICE, drop)
    await execute(worker, task_id)
    assert texts((await store.record(task_id)).result) == ["a.txt: kept"]
    assert probe.task_ids == [task_id, task_id]
    assert probe.principals == [ALICE.id, ALICE.id]


async def test_a_question_the_tasks_client_cannot_answer_fails_with_32021(
    worker: Worker, store: WatchedStore, probe: Probe
) -> None:
    task_id = await add_task(store, "confirm", {"target": "a.txt"}, capabilities=EXTENSION_ONLY)
    await execute(worker, task_id)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.FAILED
    assert stored.error is not None
    assert stored.error["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert stored.error["data"]["requiredCapabilities"] == {"elicitation": {}}
    assert stored.input_requests == {}


async def test_an_ill_fitting_answer_is_asked_again_under_a_new_key(
    worker: Worker, store: WatchedStore, task_methods: TaskMethods
) -> None:
    # protocol.md §3.7: keys are unique for the task's whole life; one MUST NOT be reused after its
    # response arrived. An accepted answer without the required field is asked again, so under another key.
    task_id = await add_task(store, "confirm", {"target": "a.txt"})
    await execute(worker, task_id)
    params = {"taskId": task_id, "inputResponses": {"confirm": {"action": "accept", "content": {}}}}
    await task_methods.update(checked("tasks/update", params), ALICE, drop)
    await execute(worker, task_id)
    again = await store.record(task_id)
    assert again.status is TaskStatus.INPUT_REQUIRED
    assert again.input_requests, "the question must be asked again"
    assert "confirm" not in again.input_requests, f"answered key reused: {sorted(again.input_requests)}"


async def test_a_state_only_input_required_inside_a_task_does_not_wait_for_nothing(
    worker: Worker, store: WatchedStore, probe: Probe
) -> None:
    # Outside a task a state-only input_required asks the client to retry at once. A task has no
    # retry: waiting in input_required with no inputRequests would wait forever (tasks/update has no
    # key to answer), so the task must run again with its state instead.
    task_id = await add_task(store, "shed")
    await execute(worker, task_id)
    first = await store.record(task_id)
    assert not (first.status is TaskStatus.INPUT_REQUIRED and not first.input_requests), (
        "the task waits for input with nothing to answer"
    )
    if first.status is TaskStatus.WORKING:
        await execute(worker, task_id)
    done = await store.record(task_id)
    assert done.status is TaskStatus.COMPLETED
    assert texts(done.result) == ["shed=True"]


# --- attempts ---------------------------------------------------------------------------------------


async def test_a_task_may_ask_more_rounds_of_questions_than_the_attempt_limit(
    worker: Worker, store: WatchedStore, task_methods: TaskMethods, probe: Probe
) -> None:
    # Attempts limit *interrupted* runs (a worker that died or stopped); a run that ends asking for
    # input was not interrupted, so answering questions must never use the attempts up.
    task_id = await add_task(store, "interview")
    for key in ("q1", "q2", "q3", "q4"):
        await execute(worker, task_id)
        waiting = await store.record(task_id)
        assert waiting.status is TaskStatus.INPUT_REQUIRED, (key, waiting.status, waiting.error)
        assert list(waiting.input_requests) == [key]
        params = {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"reply": key.upper()}}}}
        await task_methods.update(checked("tasks/update", params), ALICE, drop)
    await execute(worker, task_id)
    done = await store.record(task_id)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert texts(done.result) == ["Q1 Q2 Q3 Q4"]
    assert probe.count("interview") == 5


async def test_a_task_whose_attempts_reached_the_limit_fails_without_running(
    worker: Worker, store: WatchedStore, probe: Probe
) -> None:
    # The run comes back a fourth time (three deliveries were interrupted): it is not run again.
    task_id = await add_task(store, "add", {"a": 1, "b": 1})
    await execute(worker, task_id, attempt=worker.options.max_attempts + 1)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.FAILED
    assert stored.attempts == worker.options.max_attempts
    assert stored.error is not None
    assert stored.error["code"] == INTERNAL_ERROR
    assert "giving up" in stored.error["message"]
    assert stored.status_message is not None
    assert probe.count("add") == 0


async def test_a_task_below_the_attempt_limit_still_runs(worker: Worker, store: WatchedStore) -> None:
    task_id = await add_task(store, "add", {"a": 1, "b": 1})
    await execute(worker, task_id, attempt=worker.options.max_attempts)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.COMPLETED
    assert stored.attempts == worker.options.max_attempts


# --- status messages --------------------------------------------------------------------------------


async def test_set_status_and_progress_messages_become_the_status_message(
    worker: Worker, store: WatchedStore, probe: Probe
) -> None:
    task_id = await add_task(store, "paced")
    async with anyio.create_task_group() as group:
        group.start_soon(execute, worker, task_id)
        with anyio.fail_after(WAIT_S):
            await probe.paused[0].wait()
        first = await store.record(task_id)
        assert first.status is TaskStatus.WORKING
        assert first.status_message == "Reading the input"
        assert detailed_task_wire(first)["statusMessage"] == "Reading the input"
        probe.resume[0].set()
        with anyio.fail_after(WAIT_S):
            await probe.paused[1].wait()
        second = await store.record(task_id)
        assert second.status_message == "Half way there"
        assert second.version > first.version
        probe.resume[1].set()
    done = await store.record(task_id)
    assert done.status is TaskStatus.COMPLETED  # the status updates did not make the final commit lose
    assert texts(done.result) == ["paced"]


# --- lost tools -------------------------------------------------------------------------------------


async def test_a_tool_removed_from_the_registry_fails_the_task(
    worker: Worker, store: WatchedStore, registry: ToolRegistry, probe: Probe
) -> None:
    task_id = await add_task(store, "vanishing")
    registry.remove_tool("vanishing")
    await execute(worker, task_id)
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.FAILED
    assert stored.error is not None
    assert "vanishing" in stored.error["message"]
    assert probe.count("vanishing") == 0


async def test_a_run_of_an_unknown_task_is_skipped(worker: Worker) -> None:
    assert await execute(worker, "no-such-task") is None


# --- cancellation -----------------------------------------------------------------------------------


async def test_a_late_outcome_does_not_overwrite_a_cancellation(
    worker: Worker, store: WatchedStore, task_methods: TaskMethods, probe: Probe
) -> None:
    task_id = await add_task(store, "stubborn")
    outcome: list[TaskRecord | None] = []

    async def run() -> None:
        outcome.append(await execute(worker, task_id))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        with anyio.fail_after(WAIT_S):
            await probe.started.wait()
        ack = await task_methods.cancel(checked("tasks/cancel", {"taskId": task_id}), ALICE, drop)
        assert msgspec.to_builtins(ack) == {"resultType": "complete"}
        probe.release.set()
    assert outcome == [None]  # the worker's commit lost the compare-and-set
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.result is None


async def test_cancel_stops_a_running_tool_promptly_and_the_task_stays_cancelled(
    worker: Worker, store: WatchedStore, task_methods: TaskMethods, probe: Probe
) -> None:
    async with running(worker):
        task_id = await add_task(store, "hold")
        with anyio.fail_after(WAIT_S):
            await probe.started.wait()
        ack = await task_methods.cancel(checked("tasks/cancel", {"taskId": task_id}), ALICE, drop)
        assert msgspec.to_builtins(ack) == {"resultType": "complete"}
        with anyio.fail_after(WAIT_S):
            await probe.saw_cancel.wait()  # the coroutine saw CancelledError, long before any timeout
        assert (await store.record(task_id)).status is TaskStatus.CANCELLED
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.result is None
    assert stored.error is None
    assert probe.count("hold") == 1


async def test_a_started_worker_runs_queued_tasks_to_completion(worker: Worker, store: WatchedStore) -> None:
    async with running(worker):
        first = await add_task(store, "add", {"a": 20, "b": 22})
        second = await add_task(store, "refuse")
        done = await store.wait_for(first, TaskStatus.COMPLETED, TaskStatus.FAILED)
        refused = await store.wait_for(second, TaskStatus.COMPLETED, TaskStatus.FAILED)
    assert texts(done.result) == ["42"]
    assert refused.result is not None
    assert refused.result["isError"] is True


async def test_stop_gives_an_unfinished_run_back_to_the_queue(
    store: WatchedStore, registry: ToolRegistry, probe: Probe
) -> None:
    first_worker = Worker(store, registry, WorkerOptions(block_ms=50), consumer="first")
    async with running(first_worker, grace_s=0.05):
        task_id = await add_task(store, "resumable")
        with anyio.fail_after(WAIT_S):
            await probe.started.wait()
    # The grace period ran out: the run was cancelled, and the task is neither failed nor cancelled.
    assert probe.saw_cancel.is_set()
    interrupted = await store.record(task_id)
    assert interrupted.status is TaskStatus.WORKING

    # It comes back as the second attempt (the interrupted one counts).
    runs = await store.next_runs("second", 10, block_ms=1_000)
    assert [(run.task_id, run.attempt) for run in runs] == [(task_id, 2)]

    second_worker = Worker(store, registry, consumer="second")
    await execute(second_worker, task_id, attempt=runs[0].attempt)
    finished = await store.record(task_id)
    assert finished.status is TaskStatus.COMPLETED
    assert texts(finished.result) == ["finished on run 2"]
    assert finished.attempts == 2


async def test_stop_lets_a_run_finish_within_the_grace_period(
    store: WatchedStore, registry: ToolRegistry, probe: Probe
) -> None:
    worker = Worker(store, registry, WorkerOptions(block_ms=50))
    await worker.start()
    task_id = await add_task(store, "stubborn")
    with anyio.fail_after(WAIT_S):
        await probe.started.wait()
    async with anyio.create_task_group() as group:
        group.start_soon(worker.stop, float(WAIT_S))
        probe.release.set()
    stored = await store.record(task_id)
    assert stored.status is TaskStatus.COMPLETED
    assert texts(stored.result) == ["late result"]
    assert await store.next_runs("probe", 10, block_ms=50) == []  # nothing was given back


# --- supervision: a loop that dies is started again, and the process is not ready meanwhile ----------


class BrokenOnceStore(WatchedStore):
    """``next_runs`` raises once, an exception the worker does not expect (a bug, not an outage), then
    works again; the events tell when it broke and when the loop called it again."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.broke = anyio.Event()
        self.called_again = anyio.Event()

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        self.calls += 1
        if self.calls == 1:
            self.broke.set()
            raise RuntimeError("injected: next_runs broke")
        self.called_again.set()
        return await super().next_runs(consumer, count, block_ms)


def healthy(worker: Worker) -> bool:
    """``worker.healthy`` read afresh (a plain attribute read would be narrowed by the asserts before it)."""
    return worker.healthy


async def test_a_worker_loop_that_dies_is_logged_and_started_again(
    registry: ToolRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    store = BrokenOnceStore()
    worker = Worker(store, registry, WorkerOptions(block_ms=50, restart_pause_s=0.2))
    assert not healthy(worker)  # not started yet
    caplog.set_level(logging.ERROR, logger="ext_tasks.worker")
    async with running(worker):
        with anyio.fail_after(WAIT_S):
            await store.broke.wait()
        assert not healthy(worker)  # the loop that takes runs is down, waiting to be started again
        with anyio.fail_after(WAIT_S):
            await store.called_again.wait()
        assert healthy(worker)
        # The restarted loop really takes runs.
        task_id = await add_task(store, "add", {"a": 40, "b": 2})
        done = await store.wait_for(task_id, TaskStatus.COMPLETED, TaskStatus.FAILED)
    assert texts(done.result) == ["42"]
    deaths = [record for record in caplog.records if record.name == "ext_tasks.worker" and "died" in record.message]
    assert len(deaths) == 1, [record.message for record in caplog.records]
    assert "take-runs" in deaths[0].message
    assert deaths[0].exc_info is not None
    assert "injected: next_runs broke" in str(deaths[0].exc_info[1])


async def test_the_runtime_is_not_ready_while_a_worker_loop_is_down(
    registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BrokenOnceStore()
    monkeypatch.setattr(server_module, "build_store", lambda settings, shared=None: store)
    runtime = server_module.Runtime(registry, Settings())
    assert runtime.store is store
    with pytest.raises(Busy):
        await runtime.ready()  # its workers have not started
    await runtime.start()
    try:
        with anyio.fail_after(WAIT_S):
            await store.broke.wait()
        with pytest.raises(Busy):
            await runtime.ready()
        with anyio.fail_after(WAIT_S):
            await store.called_again.wait()  # started again after the restart pause
        await runtime.ready()
    finally:
        with anyio.fail_after(WAIT_S):
            await runtime.stop()


class TakenOverStore(WatchedStore):
    """A store whose queue says, at the first heartbeat, that every run went to another worker."""

    def __init__(self) -> None:
        super().__init__()
        self.acknowledged: list[Run] = []

    async def heartbeat(self, consumer: str, runs: list[Run]) -> list[Run]:
        return list(runs)

    async def ack(self, run: Run) -> None:
        self.acknowledged.append(run)


async def test_a_run_the_queue_gave_to_another_worker_stops_unacknowledged(
    registry: ToolRegistry, probe: Probe
) -> None:
    store = TakenOverStore()
    worker = Worker(store, registry, WorkerOptions(block_ms=50, lease_s=0.15))
    async with running(worker):
        task_id = await add_task(store, "hold")
        with anyio.fail_after(WAIT_S):
            await probe.started.wait()
            await probe.saw_cancel.wait()  # stopped at the heartbeat that found the run gone
    assert store.acknowledged == []  # the new holder acknowledges it, not this worker
    assert (await store.record(task_id)).status is TaskStatus.WORKING  # nothing committed either


async def test_a_run_sees_the_capabilities_its_record_stored_and_no_stream() -> None:
    store = WatchedStore()
    task_id = await add_task(store, "deploy", capabilities={"elicitation": {"form": {}}})
    envelope = run_envelope(await store.record(task_id))
    assert envelope.client_capabilities == {"elicitation": {"form": {}}}
    assert envelope.protocol_version == MODERN_2026_07_28
    assert not envelope.wants_stream()


class CancellationLosingStore(WatchedStore):
    """Loses the cancellation a run's end sends its watcher while the watcher subscribes, as a
    Sentinel-acknowledged Valkey store did, rarely, under load (the watcher then waited for changes
    forever, and the event loop's shutdown with it)."""

    def __init__(self) -> None:
        super().__init__()
        self.subscribing = anyio.Event()
        self.lost = 0

    @asynccontextmanager
    async def watch(self, task_id: str) -> AsyncIterator[asyncio.Queue[WatchItem]]:
        async with super().watch(task_id) as changes:
            self.subscribing.set()
            try:
                await asyncio.Event().wait()  # until the run's end cancels the watcher
            except asyncio.CancelledError:
                self.lost += 1  # and not raised again: lost
            yield changes


async def test_a_watcher_ends_with_its_run_even_when_its_cancellation_was_lost(
    registry: ToolRegistry, probe: Probe
) -> None:
    store = CancellationLosingStore()
    worker = Worker(store, registry, WorkerOptions(block_ms=50), clock_ms=lambda: T0_MS + 1_000)
    async with running(worker):
        task_id = await add_task(store, "stubborn")
        with anyio.fail_after(WAIT_S):
            await store.subscribing.wait()
        (watcher,) = [task for task in asyncio.all_tasks() if task.get_name() == f"ext-tasks-watch-{task_id}"]
        probe.release.set()
        await store.wait_for(task_id, TaskStatus.COMPLETED)
        ended, _ = await asyncio.wait({watcher}, timeout=WAIT_S)
    assert store.lost == 1
    assert ended == {watcher}
