"""The operator's listing (``ext_tasks.store.listing``) on memory, one Valkey and the Valkey Cluster:
every task of every partition is listed with its fields, each run a worker holds with its holder and
attempt (until it is acknowledged), and only a finished task can be removed (its owner's place given
back)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import msgspec
import pytest

from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import completed, failed
from ext_tasks.store.base import ActiveLimit, Run, TaskStore
from ext_tasks.store.ids import PARTITION_TAGS, new_task_id
from ext_tasks.store.memory import MemoryTaskStore
from tests.contract.conftest import on_shared_server, opened
from tests.contract.test_store import make_record

pytestmark = pytest.mark.anyio
WAIT_S = 5


@pytest.fixture(params=["memory", "valkey", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    instance: TaskStore = MemoryTaskStore() if request.param == "memory" else on_shared_server(request)
    async with opened(instance):
        yield instance


async def test_every_task_of_every_partition_is_listed_with_its_fields(store: TaskStore) -> None:
    records = [
        make_record(new_task_id(tag), owner=f"owner-{i % 3}", tool=f"tool-{i % 2}")
        for i, tag in enumerate(PARTITION_TAGS)
    ]
    for record in records:
        await store.create(record)
    broken = records[0]
    outcome = failed(broken, {"code": INTERNAL_ERROR, "message": "disk full"}, int(time.time() * 1000))
    assert await store.commit(broken, msgspec.structs.replace(outcome, attempts=2))

    rows = {row.task_id: row for row in await store.listing.rows()}
    assert set(rows) == {record.task_id for record in records}
    for record in records[1:]:
        row = rows[record.task_id]
        assert (row.owner, row.tool, row.status, row.attempts) == (record.owner, record.tool, TaskStatus.WORKING, 0)
        assert (row.created_at_ms, row.expires_at_ms, row.error) == (record.created_at_ms, record.expires_at_ms, None)
        assert row.traceparent is None
    failed_row = rows[broken.task_id]
    assert failed_row.status is TaskStatus.FAILED and failed_row.attempts == 2
    assert failed_row.error is not None and failed_row.error["message"] == "disk full"


async def test_a_run_held_shows_its_holder_until_acknowledged(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    with anyio.fail_after(WAIT_S):
        runs: list[Run] = []
        while not runs:
            runs = await store.next_runs("worker-a", 1, 500)
    (run,) = runs
    lease = (await store.listing.leases())[record.task_id]
    assert (lease.holder, lease.attempt) == ("worker-a", 1)
    assert 0 <= lease.idle_ms < 5_000
    done = completed(record, {"content": []}, int(time.time() * 1000))
    assert await store.commit(record, done, finishing=run)
    assert record.task_id not in await store.listing.leases()


async def test_only_a_finished_task_is_removed_and_its_place_given_back(store: TaskStore) -> None:
    limit = ActiveLimit(cap=10, now_ms=int(time.time() * 1000), stored_cap=10, max_bytes=1 << 20)
    running, finished = make_record(owner="carol"), make_record(owner="carol")
    await store.create(running, limit=limit)
    await store.create(finished, limit=limit)
    assert await store.commit(finished, completed(finished, {"content": []}, int(time.time() * 1000)))
    charged = await store.places.charged("carol")

    assert await store.listing.remove(running.task_id) is False
    assert await store.listing.remove(finished.task_id) is True
    assert await store.listing.remove(finished.task_id) is False  # gone already
    assert await store.lookup(finished.task_id) is None  # not even "expired": forgotten
    assert {row.task_id for row in await store.listing.rows()} == {running.task_id}
    assert 0 < await store.places.charged("carol") < charged


async def test_the_creating_requests_traceparent_is_listed_with_its_task(store: TaskStore) -> None:
    """Tracing keeps it in the record (``trace_context``); the listing shows it, and nothing without one."""
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = msgspec.structs.replace(make_record(), trace_context=traceparent)
    untraced = make_record()
    for record in (traced, untraced):
        await store.create(record)
    rows = {row.task_id: row for row in await store.listing.rows()}
    assert rows[traced.task_id].traceparent == traceparent
    assert rows[untraced.task_id].traceparent is None
