"""One contract, every store (memory, one Valkey, a Valkey Cluster): what the engine and the workers
rely on from a TaskStore."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import msgspec
import pytest

from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord, cancelled, completed, status_reported
from ext_tasks.store.base import (
    ActiveLimit,
    ExistingTask,
    Expired,
    IdempotencyClaim,
    TaskStore,
    TooManyActiveTasks,
    TooManyStoredTasks,
    WatchItem,
)
from ext_tasks.store.connection.pool import PoolSettings, TrimmedPool
from ext_tasks.store.connection.single import connect_single
from ext_tasks.store.ids import PARTITION_TAGS, new_task_id, partition_of
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.support.valkey import ValkeyServer, running_valkey

pytestmark = pytest.mark.anyio

WAIT_S = 5


def make_record(task_id: str | None = None, **changes: object) -> TaskRecord:
    now = int(time.time() * 1000)
    record = TaskRecord(
        task_id=task_id or new_task_id(),
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
    return msgspec.structs.replace(record, **changes)


def under(claim: IdempotencyClaim, **changes: object) -> TaskRecord:
    """A record created under ``claim``: its id takes the claim's partition, as the engine's do."""
    return make_record(new_task_id(claim.partition), **changes)


async def next_item(queue: asyncio.Queue[WatchItem]) -> WatchItem:
    with anyio.fail_after(WAIT_S):
        return await queue.get()


# --- records ------------------------------------------------------------------------------------------


async def test_created_task_reads_back_identically(store: TaskStore) -> None:
    record = make_record(answers={"confirm": {"action": "accept", "content": {"ok": True}}}, state={"step": "é"})
    await store.create(record)
    assert await store.lookup(record.task_id) == record


async def test_unknown_task_is_not_found(store: TaskStore) -> None:
    assert await store.lookup(new_task_id()) is None
    assert await store.lookup("made-up-by-a-client") is None


async def test_commit_applies_only_on_the_expected_version(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    done = completed(record, {"content": [], "isError": False}, record.created_at_ms + 5)
    assert await store.commit(record, done)
    assert await store.lookup(record.task_id) == done
    stale = cancelled(record, record.created_at_ms + 6)
    assert not await store.commit(record, stale)
    assert await store.lookup(record.task_id) == done


async def test_a_commit_that_clears_fields_reads_back_without_them(store: TaskStore) -> None:
    record = make_record(status_message="halfway", state={"step": 1})
    await store.create(record)
    cleared = msgspec.structs.replace(record, version=2, status_message=None, state=None)
    assert await store.commit(record, cleared)
    assert await store.lookup(record.task_id) == cleared


async def test_concurrent_commits_of_one_version_have_exactly_one_winner(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    outcomes = [
        completed(record, {"content": [{"type": "text", "text": str(i)}], "isError": False}, record.created_at_ms + i)
        for i in range(8)
    ]
    wins = await asyncio.gather(*(store.commit(record, outcome) for outcome in outcomes))
    assert sum(wins) == 1
    assert await store.lookup(record.task_id) == outcomes[wins.index(True)]


async def test_commit_on_an_unknown_task_fails(store: TaskStore) -> None:
    ghost = make_record()
    assert not await store.commit(ghost, msgspec.structs.replace(ghost, version=2))
    assert await store.lookup(ghost.task_id) is None


async def test_a_task_past_its_ttl_is_reported_expired_with_its_owner(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    record = make_record(created_at_ms=now - 10_000, updated_at_ms=now - 10_000, ttl_ms=5_000)
    await store.create(record)
    found = await store.lookup(record.task_id)
    assert isinstance(found, Expired)
    assert found.owner == "alice"


async def test_a_task_without_ttl_never_expires(store: TaskStore) -> None:
    record = make_record(created_at_ms=0, updated_at_ms=0, ttl_ms=None)
    await store.create(record)
    assert await store.lookup(record.task_id) == record


async def test_owners_of_many_tasks_in_one_call(store: TaskStore) -> None:
    mine, bobs, ghost = make_record(), make_record(owner="bob"), new_task_id()
    await store.create(mine)
    await store.create(bobs)
    found = await store.owners([mine.task_id, bobs.task_id, ghost, mine.task_id, "made-up"])
    assert found == {mine.task_id: "alice", bobs.task_id: "bob"}
    assert await store.owners([]) == {}


# --- the run queue --------------------------------------------------------------------------------------


async def test_creation_queues_exactly_one_run_as_the_first_attempt(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    with anyio.fail_after(WAIT_S):
        runs = await store.next_runs("consumer-a", 10, 1000)
    assert [(run.task_id, run.attempt) for run in runs] == [(record.task_id, 1)]
    assert await store.next_runs("consumer-a", 10, 50) == []


async def test_runs_of_every_partition_reach_a_worker_that_asks_for_few_at_a_time(store: TaskStore) -> None:
    records = [make_record(new_task_id(tag)) for tag in PARTITION_TAGS for _ in range(2)]
    for record in records:
        await store.create(record)
    taken: list[str] = []
    with anyio.fail_after(WAIT_S * 2):
        while len(taken) < len(records):
            batch = await store.next_runs("consumer-a", 3, 1000)
            assert len(batch) <= 3
            taken += [run.task_id for run in batch]
    assert sorted(taken) == sorted(record.task_id for record in records)  # each exactly once
    assert await store.next_runs("consumer-a", 10, 50) == []


async def test_commit_can_queue_a_run_in_the_same_step(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    (first,) = await store.next_runs("consumer-a", 10, 1000)
    await store.ack(first)
    resumed = msgspec.structs.replace(record, version=2)
    assert await store.commit(record, resumed, enqueue=True)
    with anyio.fail_after(WAIT_S):
        again = await store.next_runs("consumer-b", 10, 1000)
    assert [(run.task_id, run.attempt) for run in again] == [(record.task_id, 1)]  # a new run, not a retry


async def test_a_requeued_run_is_delivered_again_as_the_next_attempt(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    (run,) = await store.next_runs("consumer-a", 10, 1000)
    await store.requeue(run)
    with anyio.fail_after(WAIT_S):
        again = await store.next_runs("consumer-b", 10, 1000)
    assert [(item.task_id, item.attempt) for item in again] == [(record.task_id, 2)]


async def test_runs_of_a_worker_that_stopped_heartbeating_are_reclaimed_as_the_next_attempt(
    shared_store: ValkeyTaskStore,
) -> None:
    # A shared store only: in the single-process memory store a run cannot outlive its worker.
    record = make_record()
    await shared_store.create(record)
    taken = await shared_store.next_runs("crashed-worker", 10, 1000)
    assert [run.task_id for run in taken] == [record.task_id]
    assert await shared_store.reclaim("survivor", 60_000, 10) == []
    reclaimed = await shared_store.reclaim("survivor", 0, 10)
    assert [(item.task_id, item.attempt) for item in reclaimed] == [(record.task_id, 2)]


async def test_a_reclaim_takes_no_more_runs_than_asked_for_whatever_their_partitions(
    shared_store: ValkeyTaskStore,
) -> None:
    # A run claimed counts as a delivery: one claimed beyond the room asked for would not run, and be
    # reclaimed again later as yet another attempt.
    records = [make_record(new_task_id(tag)) for tag in PARTITION_TAGS]
    await asyncio.gather(*(shared_store.create(record) for record in records))
    taken: list[Any] = []
    with anyio.fail_after(WAIT_S):
        while len(taken) < len(records):
            taken += await shared_store.next_runs("crashed-worker", len(records), 200)
    reclaimed: list[Any] = []
    for _ in records:
        batch = await shared_store.reclaim("survivor", 0, 1)
        assert len(batch) == 1, batch
        reclaimed += batch
    assert sorted(run.task_id for run in reclaimed) == sorted(record.task_id for record in records)
    assert {run.attempt for run in reclaimed} == {2}  # each claimed exactly once more


async def test_heartbeats_keep_a_run_from_being_reclaimed(shared_store: ValkeyTaskStore) -> None:
    await shared_store.create(make_record())
    taken = await shared_store.next_runs("busy-worker", 10, 1000)
    await anyio.sleep(0.3)  # let the run go idle, then prove a heartbeat resets its idle time
    assert await shared_store.heartbeat("busy-worker", taken) == []  # still its own
    assert await shared_store.reclaim("other", 250, 10) == []


async def test_a_heartbeat_does_not_take_back_a_run_another_worker_took_over(shared_store: ValkeyTaskStore) -> None:
    """A worker that paused longer than the lease finds at its next heartbeat that the run is another's:
    the run is reported lost (to be stopped), and stays with the worker that took it over."""
    await shared_store.create(make_record())
    (run,) = await shared_store.next_runs("paused-worker", 10, 1000)
    (taken_over,) = await shared_store.reclaim("survivor", 0, 10)
    assert taken_over.delivery == run.delivery
    assert await shared_store.heartbeat("paused-worker", [run]) == [run]
    await anyio.sleep(0.3)
    assert await shared_store.heartbeat("survivor", [taken_over]) == []
    assert await shared_store.reclaim("paused-worker", 250, 10) == []  # the survivor's heartbeat kept it


async def test_an_outcome_committed_with_its_run_acknowledges_it(shared_store: ValkeyTaskStore) -> None:
    record = make_record()
    await shared_store.create(record)
    (run,) = await shared_store.next_runs("worker", 10, 1000)
    done = completed(record, {"content": []}, record.created_at_ms + 1)
    assert await shared_store.commit(record, done, finishing=run)
    assert await shared_store.reclaim("other", 0, 10) == []  # nothing left to take over
    assert await shared_store.queue_depth() == 0


async def test_a_lost_commit_leaves_its_run_to_be_acknowledged(shared_store: ValkeyTaskStore) -> None:
    record = make_record()
    await shared_store.create(record)
    (run,) = await shared_store.next_runs("worker", 10, 1000)
    assert await shared_store.commit(record, cancelled(record, record.created_at_ms + 1))
    assert not await shared_store.commit(record, completed(record, {"content": []}, 2), finishing=run)
    assert [item.task_id for item in await shared_store.reclaim("other", 0, 10)] == [record.task_id]


# --- broadcast ---------------------------------------------------------------------------------------------


async def test_a_watcher_gets_every_commit_of_its_task_in_order_and_nothing_else(store: TaskStore) -> None:
    record, other = make_record(), make_record()
    await store.create(record)
    await store.create(other)
    async with store.watch(record.task_id) as changes:
        assert await next_item(changes) is None  # live: nothing committed from here on is missed
        halfway = status_reported(record, "halfway", record.created_at_ms + 1)
        assert await store.commit(record, halfway)
        assert await store.commit(other, completed(other, {"content": []}, other.created_at_ms + 1))
        done = completed(halfway, {"content": []}, record.created_at_ms + 2)
        assert await store.commit(halfway, done)
        assert not await store.commit(halfway, done)  # a lost commit announces nothing
        first, second = await next_item(changes), await next_item(changes)
        assert changes.empty()
    seen = [cast(TaskRecord, item) for item in (first, second)]
    assert [(event.task_id, event.version, event.owner) for event in seen] == [
        (record.task_id, 2, "alice"),
        (record.task_id, 3, "alice"),
    ]
    assert [event.status.value for event in seen] == ["working", "completed"]
    assert seen[0].status_message == "halfway"
    assert seen == [halfway, done]  # the record as each commit left it, every field


async def test_a_cancellation_reaches_the_watcher_of_the_task(store: TaskStore) -> None:
    record = make_record()
    await store.create(record)
    async with store.watch(record.task_id) as changes:
        assert await next_item(changes) is None
        assert await store.commit(record, cancelled(record, record.created_at_ms + 1))
        event = cast(TaskRecord, await next_item(changes))
    assert event.status.value == "cancelled"


# --- idempotency ------------------------------------------------------------------------------------------


async def test_an_idempotency_key_names_the_first_task_and_creates_nothing_more(store: TaskStore) -> None:
    claim = IdempotencyClaim(key="principal-and-key", fingerprint="deploy+args", window_ms=60_000)
    first, second = under(claim), under(claim)
    assert await store.create(first, claim) is None
    assert await store.create(second, claim) == ExistingTask(task_id=first.task_id, fingerprint="deploy+args")
    assert await store.lookup(second.task_id) is None
    runs = await store.next_runs("consumer-a", 10, 1000)
    assert [run.task_id for run in runs] == [first.task_id]


async def test_concurrent_creations_under_one_key_create_exactly_one_task(store: TaskStore) -> None:
    claim = IdempotencyClaim(key="racing-key", fingerprint="f", window_ms=60_000)
    records = [under(claim) for _ in range(10)]
    outcomes = await asyncio.gather(*(store.create(record, claim) for record in records))
    created = [record for record, outcome in zip(records, outcomes, strict=True) if outcome is None]
    assert len(created) == 1
    assert all(outcome == ExistingTask(created[0].task_id, "f") for outcome in outcomes if outcome is not None)


async def test_different_idempotency_keys_create_different_tasks(store: TaskStore) -> None:
    key_a, key_b = IdempotencyClaim("key-a", "f", 60_000), IdempotencyClaim("key-b", "f", 60_000)
    assert await store.create(under(key_a), key_a) is None
    second = under(key_b)
    assert await store.create(second, key_b) is None
    assert isinstance(await store.lookup(second.task_id), TaskRecord)


async def test_a_task_under_an_idempotency_key_must_take_the_keys_partition(shared_store: ValkeyTaskStore) -> None:
    claim = IdempotencyClaim("some-key", "f", 60_000)
    elsewhere = next(tag for tag in PARTITION_TAGS if tag != claim.partition)
    record = make_record(new_task_id(elsewhere))
    assert partition_of(record.task_id) != claim.partition
    with pytest.raises(ValueError, match="partition"):
        await shared_store.create(record, claim)


# --- claims ------------------------------------------------------------------------------------------------


async def test_a_claim_is_granted_once_until_it_lapses(store: TaskStore) -> None:
    assert await store.claim("state:abc", 60_000)
    assert not await store.claim("state:abc", 60_000)
    assert await store.claim("state:other", 60_000)


# --- per-owner caps ------------------------------------------------------------------------------------------


async def test_the_active_task_cap_counts_unfinished_tasks_of_one_owner(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    limit = ActiveLimit(cap=2, now_ms=now)
    first, second, refused = make_record(), make_record(), make_record()
    assert await store.create(first, limit=limit) is None
    assert await store.create(second, limit=limit) is None
    with pytest.raises(TooManyActiveTasks):
        await store.create(refused, limit=limit)
    assert await store.lookup(refused.task_id) is None
    # Another owner has its own count; a finished task frees its place.
    assert await store.create(make_record(owner="bob"), limit=limit) is None
    assert await store.commit(first, completed(first, {"content": []}, now + 1))
    assert await store.create(make_record(), limit=limit) is None


async def test_the_stored_task_cap_counts_tasks_in_any_status_until_they_expire(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    limit = ActiveLimit(cap=0, now_ms=now, stored_cap=2)
    first, refused = make_record(), make_record()
    assert await store.create(first, limit=limit) is None
    assert await store.create(make_record(), limit=limit) is None
    # Finishing a task does not free its place: it is still kept (and readable) until it expires.
    assert await store.commit(first, completed(first, {"content": []}, now + 1))
    with pytest.raises(TooManyStoredTasks):
        await store.create(refused, limit=limit)
    assert await store.lookup(refused.task_id) is None
    assert await store.create(make_record(owner="bob"), limit=limit) is None
    # A task that has expired no longer counts.
    later = ActiveLimit(cap=0, now_ms=now + 61_000, stored_cap=2)
    assert await store.create(make_record(created_at_ms=now + 61_000), limit=later) is None


async def test_the_caps_are_exact_under_concurrent_creation(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    limit = ActiveLimit(cap=5, now_ms=now, stored_cap=8)
    records = [make_record() for _ in range(40)]
    outcomes = await asyncio.gather(*(store.create(record, limit=limit) for record in records), return_exceptions=True)
    created = [record for record, outcome in zip(records, outcomes, strict=True) if outcome is None]
    assert len(created) == 5, outcomes
    assert all(isinstance(outcome, TooManyActiveTasks) for outcome in outcomes if outcome is not None)
    for record in records:
        found = await store.lookup(record.task_id)
        assert (found is not None) == (record in created)
    # Finish them all: the stored cap (8) now bounds the next burst at three more.
    for record in created:
        assert await store.commit(record, completed(record, {"content": []}, now + 1))
    burst = [make_record() for _ in range(20)]
    outcomes = await asyncio.gather(*(store.create(record, limit=limit) for record in burst), return_exceptions=True)
    assert sum(outcome is None for outcome in outcomes) == 3
    assert all(isinstance(outcome, TooManyStoredTasks) for outcome in outcomes if outcome is not None)


async def test_a_resend_at_the_cap_still_names_its_task(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    limit = ActiveLimit(cap=1, now_ms=now)
    claim = IdempotencyClaim("resent-key", "f", 60_000)
    first = under(claim)
    assert await store.create(first, claim, limit) is None
    assert await store.create(under(claim), claim, limit) == ExistingTask(first.task_id, "f")
    with pytest.raises(TooManyActiveTasks):
        await store.create(make_record(), limit=limit)  # the resend took no second place


# --- connections ---------------------------------------------------------------------------------------------


async def test_connections_left_idle_by_a_burst_are_closed(tmp_path: Path) -> None:
    """The pool is bounded, and what a burst opened is closed once it has been idle (Valkey's own count,
    on a Valkey of this test's own, so no other test's connections come and go meanwhile)."""
    with running_valkey(tmp_path) as valkey:
        await _burst_then_idle(valkey)


async def _burst_then_idle(valkey: ValkeyServer) -> None:
    client = connect_single(valkey.url, PoolSettings(max_connections=8, idle_s=0.5))
    assert isinstance(client.connection_pool, TrimmedPool)
    probe = connect_single(valkey.url, PoolSettings(max_connections=1))

    async def clients_until(done: Callable[[int], bool]) -> int:
        """Poll Valkey's own count of clients (another process's state: no event to wait on)."""
        with anyio.fail_after(WAIT_S):
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


async def test_idle_connections_closed_while_commands_run_are_never_handed_out(valkey_server: ValkeyServer) -> None:
    """A promotion (the sentinels name a new primary) closes the pool's idle connections while other
    callers keep taking connections: none of them may get one being closed (valkey-py's own
    ``disconnect(inuse_connections=False)`` hands those out, and the caller fails inside the client)."""
    client = connect_single(valkey_server.url, PoolSettings(max_connections=16))
    pool = client.connection_pool
    assert isinstance(pool, TrimmedPool)
    failed: list[Exception] = []
    retired = 0

    async def commands() -> None:
        for _ in range(80):
            try:
                await client.incr("contract-retire:count")
            except Exception as exc:  # noqa: BLE001 - counted: there must be none
                failed.append(exc)
            await asyncio.sleep(0.0005)  # its connection waits in the pool meanwhile

    async def promotions() -> None:
        nonlocal retired
        for _ in range(150):
            retired += await pool.retire_idle()
            await asyncio.sleep(0.0003)

    try:
        with anyio.fail_after(WAIT_S):
            await asyncio.gather(*(commands() for _ in range(16)), promotions())
        assert failed == []
        assert retired > 0  # the promotions did close connections under the callers' feet
        assert int(await client.get("contract-retire:count") or 0) == 16 * 80
    finally:
        await client.delete("contract-retire:count")
        await client.aclose()
