"""The bytes an owner's tasks keep, on every store (memory, one Valkey, a Valkey Cluster, and through
Sentinel): the budget at its edge, exact under concurrency, lapsed bytes given back, answers charged
before they are merged, results when the task finishes, and the legacy shim's own tasks counted."""

from __future__ import annotations

import asyncio
import time

import pytest

from ext_tasks.protocol.tasks import completed, stored_bytes
from ext_tasks.store.base import (
    ActiveLimit,
    ExistingTask,
    IdempotencyClaim,
    Place,
    TaskStore,
    TooManyStoredBytes,
    TooManyStoredTasks,
)
from tests.contract.test_store import make_record, under

pytestmark = pytest.mark.anyio


def budget(max_bytes: int, now_ms: int | None = None, **caps: int) -> ActiveLimit:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return ActiveLimit(caps.get("cap", 0), now, caps.get("stored_cap", 0), max_bytes)


async def test_a_task_that_fills_the_budget_exactly_is_kept_and_one_byte_more_is_refused(store: TaskStore) -> None:
    first, second, third = make_record(), make_record(), make_record()
    size = stored_bytes(first)
    assert size == stored_bytes(second) == stored_bytes(third)
    exactly = budget(2 * size)
    assert await store.create(first, limit=exactly) is None
    assert await store.create(second, limit=exactly) is None  # the total is now exactly the budget
    with pytest.raises(TooManyStoredBytes):
        await store.create(third, limit=exactly)
    assert await store.lookup(third.task_id) is None
    assert await store.places.charged("alice") == 2 * size

    # One byte short of two tasks: the second is refused, and charged nothing.
    bobs, refused = make_record(owner="bob"), make_record(owner="bob")
    short = budget(2 * stored_bytes(bobs) - 1)
    assert await store.create(bobs, limit=short) is None
    with pytest.raises(TooManyStoredBytes):
        await store.create(refused, limit=short)
    assert await store.lookup(refused.task_id) is None
    assert await store.places.charged("bob") == stored_bytes(bobs)


async def test_the_budget_is_exact_under_concurrent_creation(store: TaskStore) -> None:
    records = [make_record() for _ in range(40)]
    size = stored_bytes(records[0])
    limit = budget(5 * size + size // 2)
    outcomes = await asyncio.gather(*(store.create(record, limit=limit) for record in records), return_exceptions=True)
    assert sum(outcome is None for outcome in outcomes) == 5, outcomes
    assert all(isinstance(outcome, TooManyStoredBytes) for outcome in outcomes if outcome is not None)
    kept = [record for record in records if await store.lookup(record.task_id) is not None]
    assert len(kept) == 5
    assert await store.places.charged("alice") == 5 * size


@pytest.mark.parametrize("stored_cap", [0, 1], ids=["found-by-the-budget", "found-by-the-count-cap"])
async def test_the_bytes_of_a_lapsed_task_are_given_back(store: TaskStore, stored_cap: int) -> None:
    now = int(time.time() * 1000)
    first = make_record(created_at_ms=now, ttl_ms=60_000)
    size = stored_bytes(first)
    assert await store.create(first, limit=budget(size + size // 2, now, stored_cap=stored_cap)) is None
    with pytest.raises((TooManyStoredBytes, TooManyStoredTasks)):
        await store.create(make_record(), limit=budget(size + size // 2, now, stored_cap=stored_cap))
    # A minute later the first task has expired: its place lapses and its bytes no longer count.
    later = now + 61_000
    second = make_record(created_at_ms=later, ttl_ms=60_000)
    assert await store.create(second, limit=budget(size + size // 2, later, stored_cap=stored_cap)) is None
    assert await store.places.charged("alice") == stored_bytes(second)


async def test_answers_are_charged_before_they_are_merged_and_refused_past_the_budget(store: TaskStore) -> None:
    record = make_record()
    size = stored_bytes(record)
    limit = budget(size + 100)
    assert await store.create(record, limit=limit) is None
    await store.places.grow(Place("alice", record.task_id, record.expires_at_ms, size + 100), limit)
    assert await store.places.charged("alice") == size + 100  # growing to exactly the budget
    with pytest.raises(TooManyStoredBytes):
        await store.places.grow(Place("alice", record.task_id, record.expires_at_ms, size + 101), limit)
    assert await store.places.charged("alice") == size + 100
    # Growing to less than what is charged already changes nothing (a retried merge is not charged twice).
    await store.places.grow(Place("alice", record.task_id, record.expires_at_ms, size + 50), limit)
    assert await store.places.charged("alice") == size + 100


async def test_a_finished_task_is_charged_its_result_and_then_keeps_its_owner_from_creating(
    store: TaskStore,
) -> None:
    record = make_record()
    size = stored_bytes(record)
    limit = budget(3 * size)
    assert await store.create(record, limit=limit) is None
    result = {"content": [{"type": "text", "text": "r" * (3 * size)}], "isError": False}
    done = completed(record, result, record.created_at_ms + 5)
    assert await store.commit(record, done)
    # The tool's work is kept even past the budget (refusing it would throw the work away) ...
    assert await store.places.charged("alice") == stored_bytes(done) > 3 * size
    # ... and the owner is refused more until it lapses.
    with pytest.raises(TooManyStoredBytes):
        await store.create(make_record(), limit=limit)


async def test_a_resend_under_an_idempotency_key_is_charged_once(store: TaskStore) -> None:
    claim = IdempotencyClaim("charged-once", "f", 60_000)
    first = under(claim)
    size = stored_bytes(first)
    assert await store.create(first, claim, budget(10 * size)) is None
    assert await store.create(under(claim), claim, budget(10 * size)) == ExistingTask(first.task_id, "f")
    assert await store.places.charged("alice") == size
    # At the budget, a resend still names its task.
    assert await store.create(under(claim), claim, budget(size)) == ExistingTask(first.task_id, "f")


async def test_a_place_kept_for_the_shim_counts_with_the_owners_tasks(store: TaskStore) -> None:
    now = int(time.time() * 1000)
    record = make_record()
    size = stored_bytes(record)
    kept = Place("alice", "shim-inline-x", now + 60_000, 4 * size, finished=True)
    await store.places.take(kept, budget(5 * size, now, stored_cap=2))
    assert await store.create(record, limit=budget(5 * size, now, stored_cap=2)) is None
    # Two places (one a shim task): the count cap refuses a third, then the byte budget would too.
    with pytest.raises(TooManyStoredTasks):
        await store.create(make_record(), limit=budget(5 * size, now, stored_cap=2))
    with pytest.raises(TooManyStoredBytes):
        await store.create(make_record(), limit=budget(5 * size, now, stored_cap=3))
    # A finished place never counts as unfinished: one task is, and the active cap of two takes another.
    assert await store.create(make_record(), limit=budget(6 * size, now, cap=2)) is None
    assert await store.places.charged("alice") == 6 * size


async def test_a_task_given_back_gives_back_its_bytes(store: TaskStore) -> None:
    record = make_record()
    assert await store.create(record, limit=budget(10 * stored_bytes(record))) is None
    await store.places.give_back("alice", record.task_id)
    assert await store.places.charged("alice") == 0
