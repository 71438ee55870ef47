"""Scheduled runs (retries with backoff) on every store: memory, one Valkey, a Valkey Cluster.

A commit that schedules a run keeps it in the store, due at an instant, in the same step as the record
it commits; ``promote_due`` queues it once due (never before, and once however many workers promote
at once). A worker that scheduled a retry and died loses nothing: another promotes and runs it.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import anyio
import msgspec
import pytest

from ext_tasks import Retry, ToolRegistry
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.retry import Backoff
from ext_tasks.store.base import TaskStore
from ext_tasks.store.ids import PARTITION_TAGS, new_task_id
from ext_tasks.store.valkey import ValkeyTaskStore
from ext_tasks.worker import Worker
from tests.contract.conftest import opened, shared_url
from tests.contract.test_store import make_record
from tests.support.watching import until

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
DELAY_MS = 60_000


async def _taken(store: TaskStore, task_id: str) -> None:
    """The task's queued run, taken and acknowledged, as a worker would before it commits a retry."""
    with anyio.fail_after(WAIT_S):
        (run,) = await store.next_runs("worker-a", 1, 1000)
    assert run.task_id == task_id
    await store.ack(run)


async def _scheduled(store: TaskStore, partition: str | None = None) -> tuple[TaskRecord, int]:
    """A task whose commit scheduled its next run ``DELAY_MS`` from now; the record and the due instant."""
    record = make_record(new_task_id(partition) if partition else None)
    await store.create(record)
    await _taken(store, record.task_id)
    due_at = int(time.time() * 1000) + DELAY_MS
    waiting = msgspec.structs.replace(
        record, version=2, retries=1, retry_at_ms=due_at, status_message="attempt 2 of 3 in 60 s: down"
    )
    assert await store.commit(record, waiting, retry_at_ms=due_at)
    return waiting, due_at


async def test_a_scheduled_run_is_queued_once_due_and_never_before(store: TaskStore) -> None:
    waiting, due_at = await _scheduled(store)
    assert await store.lookup(waiting.task_id) == waiting  # the record committed in the same step
    assert await store.next_runs("worker-a", 10, 50) == []
    assert await store.promote_due(due_at - 1) == 0
    assert await store.next_runs("worker-a", 10, 50) == []
    assert await store.promote_due(due_at, [waiting.task_id]) == 1
    with anyio.fail_after(WAIT_S):
        runs = await store.next_runs("worker-b", 10, 1000)
    assert [(run.task_id, run.attempt) for run in runs] == [(waiting.task_id, 1)]
    assert await store.promote_due(due_at + DELAY_MS) == 0  # promoted once: nothing left


async def test_a_lost_commit_schedules_nothing(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    await _taken(store, record.task_id)
    stale = msgspec.structs.replace(record, version=7)
    assert not await store.commit(stale, msgspec.structs.replace(record, version=8), retry_at_ms=1)
    assert await store.promote_due(int(time.time() * 1000)) == 0


async def test_concurrent_promotions_of_every_partition_queue_each_run_exactly_once(store: TaskStore) -> None:
    scheduled = [await _scheduled(store, tag) for tag in PARTITION_TAGS]
    later = max(due_at for _, due_at in scheduled)
    promoted = await asyncio.gather(*(store.promote_due(later) for _ in range(4)))
    assert sum(promoted) == len(PARTITION_TAGS)
    taken: list[str] = []
    with anyio.fail_after(WAIT_S * 2):
        while len(taken) < len(scheduled):
            taken += [run.task_id for run in await store.next_runs("worker-a", 16, 500)]
    assert sorted(taken) == sorted(record.task_id for record, _ in scheduled)
    assert await store.next_runs("worker-a", 16, 50) == []


async def test_a_task_created_to_start_later_is_not_delivered_before_its_instant_and_is_after(
    store: TaskStore,
) -> None:
    """A run that waits in a gate's line is created scheduled, not queued: no worker takes it before
    ``promote_due`` at its instant (or a wake)."""
    record, start_at = make_record(), int(time.time() * 1000) + DELAY_MS
    assert await store.create(record, start_at_ms=start_at) is None
    assert await store.lookup(record.task_id) == record
    assert await store.next_runs("worker-a", 10, 50) == []
    assert await store.promote_due(start_at - 1) == 0
    assert await store.next_runs("worker-a", 10, 50) == []
    assert await store.promote_due(start_at) == 1
    with anyio.fail_after(WAIT_S):
        runs = await store.next_runs("worker-a", 10, 1000)
    assert [(run.task_id, run.attempt) for run in runs] == [(record.task_id, 1)]


async def test_waking_queues_each_scheduled_run_exactly_once_and_leaves_other_tasks_alone(store: TaskStore) -> None:
    """Four callers (the instances whose runs left a gate) wake the same tasks at once, a task of
    each partition: each scheduled run is queued once; a task with none, or none known, is left alone."""
    start_at = int(time.time() * 1000) + DELAY_MS
    scheduled = [make_record(new_task_id(tag)) for tag in PARTITION_TAGS]
    for record in scheduled:
        await store.create(record, start_at_ms=start_at)
    running = make_record()
    await store.create(running)
    await _taken(store, running.task_id)  # its run is a worker's now: nothing to wake
    named = [record.task_id for record in scheduled] + [running.task_id, new_task_id()]
    woken = await asyncio.gather(*(store.wake(named) for _ in range(4)))
    assert sum(woken) == len(scheduled)
    taken: list[str] = []
    with anyio.fail_after(WAIT_S * 2):
        while len(taken) < len(scheduled):
            taken += [run.task_id for run in await store.next_runs("worker-b", 16, 500)]
    assert sorted(taken) == sorted(record.task_id for record in scheduled)
    assert await store.next_runs("worker-b", 16, 50) == []
    assert await store.promote_due(start_at) == 0  # woken: no longer scheduled
    assert await store.wake(named) == 0


@pytest.fixture(params=["valkey", "cluster"])
def store_url(request: pytest.FixtureRequest) -> str:
    return shared_url(request)


async def test_a_retry_scheduled_by_a_process_that_went_away_is_promoted_by_another(store_url: str) -> None:
    """The scheduling process goes away (its connections closed, nothing handed over) between the
    schedule and the due instant; another process's client of the same store promotes the run."""
    prefix = f"contract-scheduled-{uuid.uuid4().hex[:8]}"
    async with opened(ValkeyTaskStore(store_url, prefix=prefix)) as scheduling:
        waiting, due_at = await _scheduled(scheduling)
    async with opened(ValkeyTaskStore(store_url, prefix=prefix)) as survivor:
        assert await survivor.promote_due(due_at) == 1
        with anyio.fail_after(WAIT_S):
            runs = await survivor.next_runs("survivor", 10, 1000)
        assert [run.task_id for run in runs] == [waiting.task_id]
        assert await survivor.lookup(waiting.task_id) == waiting


async def test_a_worker_that_dies_waiting_for_a_retry_loses_nothing_another_worker_runs_it(store: TaskStore) -> None:
    """Worker A's tool fails transiently and A schedules the retry, then A is gone (stopped, as a
    killed process would be: it knew the due instant, nobody else did). Worker B, started after, finds
    the due run on its sweep and completes the task on its second attempt."""
    runs: list[str] = []
    registry = ToolRegistry("contract-retries")

    class Down(Exception):
        pass

    @registry.tool(task="required", retry=Retry(attempts=3, backoff=Backoff(base_s=0.3, jitter=0.0), on=(Down,)))
    async def deploy(service: str, ref: str, n: int) -> str:
        runs.append("run")
        if len(runs) == 1:
            raise Down
        return f"{service} {ref}"

    record = make_record()
    await store.create(record)
    first = Worker(store, registry, WorkerOptions(lease_s=60.0, block_ms=50), consumer="worker-a")
    await first.start()
    try:
        found = await until(store, record.task_id, lambda seen: seen.retries == 1)
    finally:
        await first.stop(0.0)
    assert found.status is TaskStatus.WORKING
    assert found.status_message == "attempt 2 of 3 in 0.3 s: Down"
    second = Worker(store, registry, WorkerOptions(lease_s=0.5, block_ms=50), consumer="worker-b")
    await second.start()
    try:
        found = await until(store, record.task_id, lambda seen: seen.terminal)
    finally:
        await second.stop(1.0)
    assert (found.status, found.retries, len(runs)) == (TaskStatus.COMPLETED, 1, 2)
