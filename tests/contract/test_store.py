"""One contract, both stores: what the engine and the workers rely on from a TaskStore."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord, cancelled, completed
from ext_tasks.store.base import (
    ActiveLimit,
    ExistingTask,
    Expired,
    IdempotencyClaim,
    TaskStore,
    TooManyActiveTasks,
    TooManyStoredTasks,
)
from ext_tasks.store.plumbing import TrimmedPool, connect
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.support.valkey import ValkeyServer, running_valkey

pytestmark = pytest.mark.anyio


def make_record(task_id: str = "task-1", **changes: object) -> TaskRecord:
    now = int(time.time() * 1000)
    record = TaskRecord(
        task_id=task_id,
        owner="alice",
        tool="deploy",
        arguments={"service": "billing", "ref": "v1.2", "n": 3},
        status=TaskStatus.WORKING,
        version=1,
        created_at_ms=now,
        updated_at_ms=now,
        ttl_ms=60_000,
        poll_interval_ms=500,
        client_capabilities={"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
    )
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


async def test_created_task_reads_back_identically(store: TaskStore) -> None:
    record = make_record(answers={"confirm": {"action": "accept", "content": {"ok": True}}}, state={"step": "é"})
    await store.create(record)
    assert await store.lookup(record.task_id) == record


async def test_unknown_task_is_not_found(store: TaskStore) -> None:
    assert await store.lookup("never-created") is None


async def test_creating_the_same_id_twice_is_refused(store: TaskStore) -> None:
    await store.create(make_record())
    with pytest.raises(ValueError, match="exists"):
        await store.create(make_record())


async def test_commit_applies_only_on_the_expected_version(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    done = completed(record, {"content": [], "isError": False}, record.created_at_ms + 5)
    assert await store.commit(done, expect_version=record.version)
    assert await store.lookup(record.task_id) == done
    stale = cancelled(record, record.created_at_ms + 6)
    assert not await store.commit(stale, expect_version=record.version)
    assert await store.lookup(record.task_id) == done


async def test_concurrent_commits_of_one_version_have_exactly_one_winner(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    outcomes = [
        completed(record, {"content": [{"type": "text", "text": str(i)}], "isError": False}, record.created_at_ms + i)
        for i in range(8)
    ]
    wins = await asyncio.gather(*(store.commit(outcome, expect_version=record.version) for outcome in outcomes))
    assert sum(wins) == 1
    stored = await store.lookup(record.task_id)
    assert stored == outcomes[wins.index(True)]


async def test_commit_on_an_unknown_task_fails(store: TaskStore) -> None:
    assert not await store.commit(make_record("ghost", version=2), expect_version=1)


async def test_creation_queues_exactly_one_run(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    with anyio.fail_after(5):
        runs = await store.next_runs("consumer-a", 10, 1000)
    assert [run.task_id for run in runs] == [record.task_id]
    assert await store.next_runs("consumer-a", 10, 50) == []


async def test_commit_can_queue_a_run_in_the_same_step(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    first = await store.next_runs("consumer-a", 10, 1000)
    await store.ack(first[0])
    resumed = dataclasses.replace(record, version=2)
    assert await store.commit(resumed, expect_version=1, enqueue=True)
    with anyio.fail_after(5):
        again = await store.next_runs("consumer-b", 10, 1000)
    assert [run.task_id for run in again] == [record.task_id]


async def test_a_requeued_run_is_delivered_again(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    (run,) = await store.next_runs("consumer-a", 10, 1000)
    await store.requeue(run)
    with anyio.fail_after(5):
        again = await store.next_runs("consumer-b", 10, 1000)
    assert [item.task_id for item in again] == [record.task_id]


async def test_cancelling_commit_is_announced_to_listeners(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    received: list[str] = []
    listening = anyio.Event()

    async def listen() -> None:
        iterator = store.cancellations()
        waiter = asyncio.ensure_future(iterator.__anext__())
        await asyncio.sleep(0)  # let the subscription register before the commit is made
        listening.set()
        received.append(await waiter)
        await iterator.aclose()  # type: ignore[attr-defined]

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(listen)
            await listening.wait()
            # A pub/sub subscription is confirmed asynchronously; commit until the listener hears it.
            version = record.version
            while not received:
                current = dataclasses.replace(record, version=version + 1)
                assert await store.commit(current, expect_version=version, cancel=True)
                version += 1
                await anyio.sleep(0.05)
    assert received == [record.task_id]


async def test_a_task_past_its_ttl_is_reported_expired_with_its_owner(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    record = make_record("old-task", created_at_ms=now - 10_000, updated_at_ms=now - 10_000, ttl_ms=5_000)
    await store.create(record)
    found = await store.lookup("old-task")
    assert isinstance(found, Expired)
    assert found.owner == "alice"


async def test_a_task_without_ttl_never_expires(store: TaskStore) -> None:
    record = make_record("forever", created_at_ms=0, updated_at_ms=0, ttl_ms=None)
    await store.create(record)
    assert await store.lookup("forever") == record


async def test_runs_of_a_worker_that_stopped_heartbeating_are_reclaimed(valkey_server: ValkeyServer) -> None:
    # Valkey only: in the single-process memory store a run cannot outlive its worker.
    store = ValkeyTaskStore(valkey_server.url, prefix="contract-reclaim")
    await store.open()
    try:
        record = make_record()
        await store.create(record)
        taken = await store.next_runs("crashed-worker", 10, 1000)
        assert [run.task_id for run in taken] == [record.task_id]
        assert await store.reclaim("survivor", 60_000, 10) == []
        reclaimed = await store.reclaim("survivor", 0, 10)
        assert [item.task_id for item in reclaimed] == [record.task_id]
    finally:
        await store.close()


async def test_heartbeats_keep_a_run_from_being_reclaimed(valkey_server: ValkeyServer) -> None:
    store = ValkeyTaskStore(valkey_server.url, prefix="contract-heartbeat")
    await store.open()
    try:
        await store.create(make_record())
        taken = await store.next_runs("busy-worker", 10, 1000)
        await anyio.sleep(0.3)  # let the run go idle, then prove a heartbeat resets its idle time
        await store.heartbeat("busy-worker", taken)
        assert await store.reclaim("other", 250, 10) == []
    finally:
        await store.close()


async def test_an_idempotency_key_names_the_first_task_and_creates_nothing_more(store: TaskStore) -> None:
    claim = IdempotencyClaim(key="principal-and-key", fingerprint="deploy+args", window_ms=60_000)
    first = make_record("first")
    assert await store.create(first, claim) is None
    again = await store.create(make_record("second"), claim)
    assert again == ExistingTask(task_id="first", fingerprint="deploy+args")
    assert await store.lookup("second") is None
    runs = await store.next_runs("consumer-a", 10, 1000)
    assert [run.task_id for run in runs] == ["first"]


async def test_concurrent_creations_under_one_key_create_exactly_one_task(store: TaskStore) -> None:
    claim = IdempotencyClaim(key="racing-key", fingerprint="f", window_ms=60_000)
    outcomes = await asyncio.gather(*(store.create(make_record(f"race-{i}"), claim) for i in range(10)))
    created = [i for i, outcome in enumerate(outcomes) if outcome is None]
    assert len(created) == 1
    winner = f"race-{created[0]}"
    assert all(outcome == ExistingTask(winner, "f") for outcome in outcomes if outcome is not None)


async def test_different_idempotency_keys_create_different_tasks(store: TaskStore) -> None:
    assert await store.create(make_record("a"), IdempotencyClaim("key-a", "f", 60_000)) is None
    assert await store.create(make_record("b"), IdempotencyClaim("key-b", "f", 60_000)) is None
    assert isinstance(await store.lookup("b"), TaskRecord)


async def test_every_creation_and_commit_is_announced_in_order(store: TaskStore) -> None:
    events: list[dict[str, object]] = []
    iterator = store.task_events()
    with anyio.fail_after(5):
        assert await iterator.__anext__() == {}  # the subscription is live
    first = asyncio.ensure_future(iterator.__anext__())
    record = make_record("announced")
    await store.create(record)
    done = completed(record, {"content": [], "isError": False}, record.created_at_ms + 1)
    assert await store.commit(done, expect_version=record.version)
    assert not await store.commit(done, expect_version=record.version)  # a lost commit announces nothing
    with anyio.fail_after(5):
        events.append(await first)
        events.append(await iterator.__anext__())
    await iterator.aclose()  # type: ignore[attr-defined]
    assert [(event["taskId"], event["version"], event["owner"]) for event in events] == [
        ("announced", 1, "alice"),
        ("announced", 2, "alice"),
    ]
    statuses = [event["task"]["status"] for event in events]  # type: ignore[index]
    assert statuses == ["working", "completed"]


async def test_a_claim_is_granted_once_until_it_lapses(store: TaskStore) -> None:
    assert await store.claim("state:abc", 60_000)
    assert not await store.claim("state:abc", 60_000)
    assert await store.claim("state:other", 60_000)


async def test_the_active_task_cap_counts_unfinished_tasks_of_one_owner(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    limit = ActiveLimit(cap=2, now_ms=now)
    first, second = make_record("cap-1"), make_record("cap-2")
    assert await store.create(first, limit=limit) is None
    assert await store.create(second, limit=limit) is None
    with pytest.raises(TooManyActiveTasks):
        await store.create(make_record("cap-3"), limit=limit)
    assert await store.lookup("cap-3") is None
    # Another owner has its own count; a finished task frees its place.
    assert await store.create(make_record("cap-bob", owner="bob"), limit=limit) is None
    assert await store.commit(completed(first, {"content": []}, now + 1), expect_version=1)
    assert await store.create(make_record("cap-4"), limit=limit) is None


async def test_the_stored_task_cap_counts_tasks_in_any_status_until_they_expire(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    limit = ActiveLimit(cap=0, now_ms=now, stored_cap=2)
    first = make_record("kept-1")
    assert await store.create(first, limit=limit) is None
    assert await store.create(make_record("kept-2"), limit=limit) is None
    # Finishing a task does not free its place: it is still kept (and readable) until it expires.
    assert await store.commit(completed(first, {"content": []}, now + 1), expect_version=1)
    with pytest.raises(TooManyStoredTasks):
        await store.create(make_record("kept-3"), limit=limit)
    assert await store.lookup("kept-3") is None
    assert await store.create(make_record("kept-bob", owner="bob"), limit=limit) is None
    # A task that has expired no longer counts.
    later = ActiveLimit(cap=0, now_ms=now + 61_000, stored_cap=2)
    assert await store.create(make_record("kept-4", created_at_ms=now + 61_000), limit=later) is None


async def test_owners_of_many_tasks_in_one_call(store: TaskStore) -> None:
    await store.create(make_record("own-a"))
    await store.create(make_record("own-b", owner="bob"))
    found = await store.owners(["own-a", "own-b", "never-created", "own-a"])
    assert found == {"own-a": "alice", "own-b": "bob"}
    assert await store.owners([]) == {}


async def test_connections_left_idle_by_a_burst_are_closed(tmp_path: Path) -> None:
    """The pool is bounded, and what a burst opened is closed once it has been idle (Valkey's own count,
    on a Valkey of this test's own, so no other test's connections come and go meanwhile)."""
    with running_valkey(tmp_path) as valkey:
        await _burst_then_idle(valkey)


async def _burst_then_idle(valkey: ValkeyServer) -> None:
    client = connect(valkey.url, max_connections=8, idle_s=0.5)
    assert isinstance(client.connection_pool, TrimmedPool)
    probe = connect(valkey.url, max_connections=1)

    async def clients_until(done: Callable[[int], bool]) -> int:
        """Poll Valkey's own count of clients (another process's state: no event to wait on)."""
        with anyio.fail_after(5):
            while not done(count := len(await probe.client_list())):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        return count

    try:
        baseline = len(await probe.client_list())
        # Ten blocking commands at once on a pool of eight: two wait (within the pool's 2 s) for a turn.
        burst = [asyncio.ensure_future(cast(Awaitable[Any], client.blpop([f"b{n}"], timeout=1))) for n in range(10)]
        during = await clients_until(lambda count: count >= baseline + 8)
        await asyncio.gather(*burst)
        assert during - baseline == 8  # never more than the pool's eight
        # ... and what the burst opened is closed once it has been idle (one may stay for the next use).
        await clients_until(lambda count: count <= baseline + 1)
    finally:
        await client.aclose()
        await probe.aclose()
