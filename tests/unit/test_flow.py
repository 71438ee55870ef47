"""Flow control on the in-memory store, through the engine and a running worker: what a tool author and
an operator rely on.

* ``concurrency_key``: never two runs of one key at once (the tool itself records what overlaps);
  the others wait ``working``, saying what they wait for, and start in the order they came.
* ``concurrency=N``: never more than N at once.
* ``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL``: one principal's runs past the cap wait in its own line while
  another principal's run starts at once.
* The creation rate: 429 with ``Retry-After`` past the burst, allowed again once the rate refills.
* A waiting task cancelled gives its turn up; a place whose holder died comes back when its hold lapses.
* With nothing configured, flow control takes no gate at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from ext_tasks import Principal, ToolRegistry
from ext_tasks.clock import now_ms
from ext_tasks.engine import Engine
from ext_tasks.flow import FlowControl
from ext_tasks.lifetimes import Lifetimes
from ext_tasks.options import TaskOptions, WorkerOptions
from ext_tasks.protocol.errors import INVALID_PARAMS, LIMIT_EXCEEDED
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import META_RUN_ATTEMPTS, TaskRecord
from ext_tasks.store.base import Gate
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from tests.support.watching import until
from tests.unit.test_task_policy import ALICE, BOB, Clock, call, error, result

pytestmark = pytest.mark.anyio

WAIT_S = 10
CAROL = Principal("carol")


class Overlaps:
    """What the tools record: how many runs of each key are running now, the most ever seen, the
    order runs started in, and a gate the test opens to let runs finish."""

    def __init__(self) -> None:
        self.running: dict[str, int] = defaultdict(int)
        self.most: dict[str, int] = defaultdict(int)
        self.started: list[str] = []
        self.release = anyio.Event()
        #: Runs the test lets finish one by one, by label.
        self.finish: dict[str, anyio.Event] = defaultdict(anyio.Event)
        #: Set (and replaced) each time a run starts.
        self.changed = anyio.Event()

    async def run(self, key: str, label: str) -> str:
        self.running[key] += 1
        self.most[key] = max(self.most[key], self.running[key])
        self.started.append(label)
        self.changed.set()
        self.changed = anyio.Event()
        try:
            async with anyio.create_task_group() as either:

                async def until_set(event: anyio.Event) -> None:
                    await event.wait()
                    either.cancel_scope.cancel()

                either.start_soon(until_set, self.release)
                either.start_soon(until_set, self.finish[label])
        finally:
            self.running[key] -= 1
        return label


def tools(seen: Overlaps) -> ToolRegistry:
    registry = ToolRegistry("flow-test")

    @registry.tool(task="required", concurrency_key=lambda args: args["service"])
    async def deploy(service: str, label: str = "") -> str:
        return await seen.run(service, label)

    @registry.tool(task="required", concurrency=2)
    async def render(label: str = "") -> str:
        return await seen.run("render", label)

    @registry.tool(task="required")
    async def plain(label: str = "") -> str:
        return await seen.run("plain", label)

    @registry.tool(task="required", concurrency_key=lambda args: args["missing"])
    async def broken_key() -> str:
        return "never"

    return registry


class World:
    def __init__(
        self, store: MemoryTaskStore, engine: Engine, flow: FlowControl, seen: Overlaps, worker: Worker
    ) -> None:
        self.store, self.engine, self.flow, self.seen, self.worker = store, engine, flow, seen, worker

    async def create(self, tool: str, arguments: dict[str, Any], principal: Principal = ALICE) -> dict[str, Any]:
        reply = await call(self.engine, "tools/call", {"name": tool, "arguments": arguments}, principal)
        return result(reply)

    async def status(self, task_id: str, principal: Principal = ALICE) -> dict[str, Any]:
        return result(await call(self.engine, "tasks/get", {"taskId": task_id}, principal))

    async def until(self, task_id: str, status: str) -> None:
        await until(self.store, task_id, lambda record: record.status.value == status, WAIT_S)

    async def started(self, count: int) -> None:
        with anyio.fail_after(WAIT_S):
            while len(self.seen.started) < count:
                await self.seen.changed.wait()


async def world(options: TaskOptions, *, clock_ms: Any = None, hold_ms: int = 3_000) -> AsyncIterator[World]:
    seen = Overlaps()
    registry = tools(seen)
    store = MemoryTaskStore() if clock_ms is None else MemoryTaskStore(clock_ms=clock_ms)
    clock = {} if clock_ms is None else {"clock_ms": clock_ms}
    flow = FlowControl(store.gates, store, options, registry.find_tool, hold_ms=hold_ms, **clock)
    lifetimes = Lifetimes(options, registry.find_tool)
    methods = TaskMethods(store, options, lifetimes=lifetimes, flow=flow, **clock)
    engine = Engine(registry, ResumeCodec([b"k" * 32], audience="flow-test"), tasks=methods)
    worker = Worker(
        store,
        registry,
        WorkerOptions(lease_s=1.0, block_ms=50, run_concurrency=16),
        lifetimes=lifetimes,
        flow=flow,
        **clock,
    )
    await store.open()
    await worker.start()
    try:
        yield World(store, engine, flow, seen, worker)
    finally:
        seen.release.set()
        await worker.stop(grace_s=2)
        await store.close()


@pytest.fixture
async def plain_world() -> AsyncIterator[World]:
    async for made in world(TaskOptions()):
        yield made


@pytest.fixture
async def capped_world() -> AsyncIterator[World]:
    async for made in world(TaskOptions(max_running_per_principal=1)):
        yield made


async def test_one_run_per_key_at_once_the_others_wait_saying_why_and_start_in_order(plain_world: World) -> None:
    w = plain_world
    first = await w.create("deploy", {"service": "billing", "label": "billing-1"})
    await w.started(1)
    second = await w.create("deploy", {"service": "billing", "label": "billing-2"})
    third = await w.create("deploy", {"service": "billing", "label": "billing-3"})
    other = await w.create("deploy", {"service": "search", "label": "search-1"})
    await w.started(2)  # another key is not held up

    assert (second["status"], second["statusMessage"]) == ("working", "waiting for another deploy of billing")
    assert third["statusMessage"] == "waiting for another deploy of billing (1 ahead)"
    assert "statusMessage" not in first and "statusMessage" not in other
    w.seen.release.set()
    for task in (first, second, third, other):
        await w.until(task["taskId"], "completed")

    assert w.seen.most == {"billing": 1, "search": 1}
    billing = [label for label in w.seen.started if label.startswith("billing")]
    assert billing == ["billing-1", "billing-2", "billing-3"]


async def test_a_tool_with_concurrency_n_never_runs_more_than_n_at_once(plain_world: World) -> None:
    w = plain_world
    tasks = [await w.create("render", {"label": f"r{index}"}) for index in range(5)]
    await w.started(2)
    waiting = [task for task in tasks if task.get("statusMessage", "").startswith("waiting: 2 render runs")]
    assert len(waiting) == 3
    w.seen.release.set()
    for task in tasks:
        await w.until(task["taskId"], "completed")
    assert w.seen.most["render"] == 2
    assert w.seen.started == [f"r{index}" for index in range(5)]


async def test_a_principal_past_its_running_cap_waits_in_its_own_line_and_others_start_at_once(
    capped_world: World,
) -> None:
    w = capped_world
    alice = [await w.create("plain", {"label": f"alice-{index}"}) for index in range(3)]
    await w.create("plain", {"label": "bob-0"}, BOB)
    await w.started(2)

    assert w.seen.started == ["alice-0", "bob-0"]  # bob is not behind alice's queue
    assert [task.get("statusMessage") for task in alice[1:]] == [
        "waiting: 1 task of this caller already running",
        "waiting: 1 task of this caller already running (1 ahead)",
    ]
    w.seen.release.set()
    for task in alice:
        await w.until(task["taskId"], "completed")
    assert w.seen.started == ["alice-0", "bob-0", "alice-1", "alice-2"]


async def test_a_waiting_task_cancelled_gives_up_its_turn(plain_world: World) -> None:
    w = plain_world
    first = await w.create("deploy", {"service": "billing", "label": "first"})
    await w.started(1)
    cancelled = await w.create("deploy", {"service": "billing", "label": "cancelled"})
    last = await w.create("deploy", {"service": "billing", "label": "last"})
    assert last["statusMessage"] == "waiting for another deploy of billing (1 ahead)"
    result(await call(w.engine, "tasks/cancel", {"taskId": cancelled["taskId"]}))
    w.seen.release.set()

    await w.until(first["taskId"], "completed")
    await w.until(last["taskId"], "completed")
    assert w.seen.started == ["first", "last"]
    assert (await w.status(cancelled["taskId"]))["status"] == "cancelled"


async def test_a_place_whose_holder_died_comes_back_when_its_hold_lapses() -> None:
    async for w in world(TaskOptions(), hold_ms=500):
        # A worker that took the place and died: nobody gives it back or renews it.
        gate = Gate("tool:deploy:key:billing", 1)
        assert await w.store.gates.enter(gate, "ghost", now_ms=now_ms(), hold_ms=500, wait_ms=60_000) == -1
        task = await w.create("deploy", {"service": "billing", "label": "after-ghost"})
        assert task["statusMessage"] == "waiting for another deploy of billing"
        w.seen.release.set()
        await w.until(task["taskId"], "completed")  # the worker's sweep tries it again once the hold lapsed


async def test_a_run_interrupted_before_it_was_deferred_keeps_its_crash_count(plain_world: World) -> None:
    """A run reclaimed from a worker that died finds its gate full and waits in line; the run it gets
    later is a fresh delivery of the queue (counted from 1), yet the count of interrupted runs goes on:
    in ``runAttempts``, and against ``EXT_TASKS_MAX_ATTEMPTS`` (3 here), so a run that kills its worker
    cannot escape the limit by waiting in a gate's line between its crashes."""
    w = plain_world
    gate = Gate("tool:deploy:key:billing", 1)
    assert await w.store.gates.enter(gate, "holder", now_ms=now_ms(), hold_ms=60_000, wait_ms=60_000) == -1
    task_id = (await w.create("deploy", {"service": "billing", "label": "crashes"}))["taskId"]
    await w.worker.execute(task_id, attempt=2)  # its first run interrupted: deferred, the gate full
    assert (await w.status(task_id))["_meta"][META_RUN_ATTEMPTS] == 1  # one interrupted so far
    await w.worker.execute(task_id, attempt=2)  # the fresh delivery it got later, interrupted too
    assert (await w.status(task_id))["_meta"][META_RUN_ATTEMPTS] == 2
    await w.worker.execute(task_id, attempt=2)  # and once more: the third interrupted run, the limit
    ended = await w.status(task_id)
    assert ended["status"] == "failed", ended
    assert ended["error"]["message"] == "The task's run was interrupted 3 times; giving up", ended


async def test_creations_past_the_rate_are_refused_with_retry_after_until_it_refills() -> None:
    clock = Clock(1_800_000_000_000)
    options = TaskOptions(create_rate_per_principal=1.0, create_burst_per_principal=2)
    async for w in world(options, clock_ms=clock):
        await w.create("plain", {})
        await w.create("plain", {})
        refused = await call(w.engine, "tools/call", {"name": "plain", "arguments": {}})
        assert refused.status == 429 and refused.headers["Retry-After"] == "1"
        assert error(refused)["code"] == LIMIT_EXCEEDED
        assert error(refused)["data"] == {"limit": "create_rate", "retryAfterSeconds": 1}
        await w.create("plain", {}, CAROL)  # the rate is each principal's own
        clock.now_ms += 1_000
        await w.create("plain", {})
        w.seen.release.set()


async def test_a_concurrency_key_that_cannot_be_taken_from_the_arguments_is_invalid_params(plain_world: World) -> None:
    refused = error(await call(plain_world.engine, "tools/call", {"name": "broken_key", "arguments": {}}))
    assert refused["code"] == INVALID_PARAMS
    assert "concurrency key of broken_key" in refused["message"]


async def test_with_nothing_configured_a_run_passes_no_gate(plain_world: World) -> None:
    task = await plain_world.create("plain", {})
    record = await plain_world.store.lookup(task["taskId"])
    assert plain_world.flow.passages(record) == []  # type: ignore[arg-type]


async def test_a_run_that_must_wait_at_its_principal_keeps_no_turn_in_its_tools_line(capped_world: World) -> None:
    """Woken by the key's gate, alice's deploy finds her cap taken: it waits in her line, and does not
    hold the key's line up for carol meanwhile."""
    w = capped_world
    bob = await w.create("deploy", {"service": "billing", "label": "bob"}, BOB)
    await w.started(1)
    alice = await w.create("deploy", {"service": "billing", "label": "alice"})
    assert alice["statusMessage"] == "waiting for another deploy of billing"
    other = await w.create("plain", {"label": "alice-plain"})  # takes alice's one place meanwhile
    await w.started(2)
    w.seen.finish["bob"].set()  # the key's place comes free: alice's deploy is woken, and must wait
    await w.until(bob["taskId"], "completed")
    seen = await until(w.store, alice["taskId"], lambda record: "this caller" in (record.status_message or ""))
    assert seen.status_message == "waiting: 1 task of this caller already running"
    carol = await w.create("deploy", {"service": "billing", "label": "carol"}, CAROL)
    await w.started(3)
    assert w.seen.started[-1] == "carol" and "statusMessage" not in carol
    w.seen.release.set()
    for task in (alice, other, carol):
        await w.until(task["taskId"], "completed")


@pytest.mark.parametrize(
    "declaration",
    [{"concurrency": 0}, {"concurrency": True}, {"concurrency": 1.5}, {"concurrency_key": "service"}],
)
def test_a_declaration_that_makes_no_sense_is_refused_when_declared(declaration: dict[str, Any]) -> None:
    registry = ToolRegistry("flow-test")
    with pytest.raises(ValueError):
        registry.tool(task="required", **declaration)


def test_a_key_without_a_number_means_one_run_per_key() -> None:
    registry = ToolRegistry("flow-test")

    @registry.tool(task="required", concurrency_key=lambda args: args["service"])
    async def deploy(service: str) -> str:
        return service

    assert registry.tools["deploy"].concurrency == 1


async def test_the_memory_store_forgets_gates_whose_places_all_lapsed_past_its_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ext_tasks.store import gates as memory_gates

    monkeypatch.setattr(memory_gates, "CEILING", 10)
    ledger = memory_gates.MemoryGates()
    for key in range(25):  # one deploy per service, each worker gone without leaving
        gate = Gate(f"tool:deploy:key:{key}", 1)
        assert await ledger.enter(gate, f"t{key}", now_ms=1_000 + key * 1_000, hold_ms=500, wait_ms=500) == -1
    assert len(ledger._gates) <= 10


async def test_a_running_run_whose_place_lapsed_into_a_full_gate_takes_no_turn_in_its_line() -> None:
    """A worker paused past its lease finds its place taken: its run goes on, but others in line are not
    made to wait behind a turn it will never use."""
    clock = Clock(1_000_000)
    registry = tools(Overlaps())
    store = MemoryTaskStore(clock_ms=clock)
    flow = FlowControl(store.gates, store, TaskOptions(), registry.find_tool, hold_ms=1_000, clock_ms=clock)
    gate = Gate("tool:deploy:key:billing", 1)
    running = TaskRecord(
        task_id="running",
        owner="alice",
        tool="deploy",
        arguments={"service": "billing"},
        status=TaskStatus.WORKING,
        version=1,
        created_at_ms=clock.now_ms,
        updated_at_ms=clock.now_ms,
        ttl_ms=60_000,
        poll_interval_ms=250,
    )
    assert await flow.enter(running) is None
    clock.now_ms += 2_000  # the worker paused past its hold: another deploy took the place
    assert await store.gates.enter(gate, "other", now_ms=clock.now_ms, hold_ms=1_000, wait_ms=60_000) == -1
    await flow.renew([running])
    assert await store.gates.enter(gate, "late", now_ms=clock.now_ms, hold_ms=1_000, wait_ms=60_000) == 0
