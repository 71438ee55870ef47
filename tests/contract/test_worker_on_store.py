"""The worker on every store: runs taken from several partitions at once all run, once each.

Delivery ids are unique within one partition's stream only: two runs of different partitions queued in
the same millisecond carry the same id. A worker that told runs apart by delivery alone would skip the
second one, and it would wait for a reclaim (a lease later, counted as a second attempt).
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from ext_tasks import ToolRegistry
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.store.base import TaskStore
from ext_tasks.store.ids import PARTITION_TAGS, new_task_id
from ext_tasks.worker import Worker
from tests.contract.test_store import make_record

pytestmark = pytest.mark.anyio

#: Far longer than the test may take: a run skipped by the worker cannot come back within it.
LEASE_S = 60.0
WAIT_S = 10.0


async def test_runs_of_every_partition_queued_at_once_all_run_once(store: TaskStore) -> None:
    registry = ToolRegistry("contract-worker")

    @registry.tool(task="required")
    async def deploy(service: str, ref: str, n: int) -> str:
        return f"{service} {ref}"

    records = [make_record(new_task_id(tag)) for tag in PARTITION_TAGS for _ in range(3)]
    await asyncio.gather(*(store.create(record) for record in records))
    worker = Worker(store, registry, WorkerOptions(lease_s=LEASE_S, block_ms=50, run_concurrency=64))
    await worker.start()
    try:
        with anyio.fail_after(WAIT_S):
            while True:
                found = await asyncio.gather(*(store.lookup(record.task_id) for record in records))
                if all(isinstance(item, TaskRecord) and item.status is TaskStatus.COMPLETED for item in found):
                    break
                await asyncio.sleep(0.02)
    finally:
        await worker.stop(1.0)
    assert {item.attempts for item in found if isinstance(item, TaskRecord)} == {1}
