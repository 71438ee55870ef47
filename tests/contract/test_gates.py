"""Flow control's gates and token buckets on every store: in memory, on one Valkey, on a Valkey Cluster
(and with replica acknowledgement).

A gate bounds how many runs hold a place at once, across every instance sharing the store; the runs
that find it full wait in line in the order they came, and leaving names the ones that may enter now.
Holds and waits lapse on their own (a dead worker, a task that is gone), and so does every key the
store keeps for them. A token bucket lets a burst through, then refuses with how long until the next
token, refilled at its rate.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from ext_tasks.store.base import ENTERED, Gate, TaskStore
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.contract.conftest import opened, shared_url

pytestmark = pytest.mark.anyio

HOLD_MS = 60_000
WAIT_MS = 60_000
WAIT_S = 30.0


def _now() -> int:
    return int(time.time() * 1000)


def _gate(limit: int) -> Gate:
    return Gate(f"tool:deploy:key:{uuid.uuid4().hex[:8]}", limit)


@pytest.fixture(params=["memory", "valkey", "cluster"])
async def instances(request: pytest.FixtureRequest) -> AsyncIterator[tuple[TaskStore, TaskStore]]:
    """Two store objects on the same keys, as two server instances have (in memory: the one store)."""
    if request.param == "memory":
        async with opened(MemoryTaskStore()) as only:
            yield only, only
        return
    url, prefix = shared_url(request), f"contract-gates-{uuid.uuid4().hex[:8]}"
    async with (
        opened(ValkeyTaskStore(url, prefix=prefix)) as first,
        opened(ValkeyTaskStore(url, prefix=prefix)) as second,
    ):
        yield first, second


async def test_fifty_runs_entering_at_once_through_two_instances_never_exceed_the_limit(
    instances: tuple[TaskStore, TaskStore],
) -> None:
    gate, now = _gate(3), _now()
    answers = await asyncio.gather(
        *(
            instances[n % 2].gates.enter(gate, f"task-{n}", now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS)
            for n in range(50)
        )
    )
    assert answers.count(ENTERED) == 3
    # Each of the others was told its own place in line: 0 to 46, once each.
    assert sorted(answer for answer in answers if answer != ENTERED) == list(range(47))


async def test_runs_taking_turns_through_two_instances_never_hold_more_places_than_the_limit(
    instances: tuple[TaskStore, TaskStore],
) -> None:
    """Fifty runs each enter, hold the place a moment, leave and wake the ones leaving named, as the
    workers of two instances would: never more than the limit at once, and every run gets through."""
    gate = _gate(4)
    woken = {f"task-{n}": asyncio.Event() for n in range(50)}
    inside, most_inside, done = 0, 0, []

    async def run(task_id: str, gates_of: TaskStore) -> None:
        nonlocal inside, most_inside
        gates = gates_of.gates
        while True:
            woken[task_id].clear()
            if await gates.enter(gate, task_id, now_ms=_now(), hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED:
                break
            with anyio.move_on_after(5.0):  # only a missed wake would wait this long: then it tries again
                await woken[task_id].wait()
        inside += 1
        most_inside = max(most_inside, inside)
        await asyncio.sleep(0.005)
        inside -= 1
        for named in await gates.leave(gate, task_id, now_ms=_now()):
            woken[named].set()
        done.append(task_id)

    with anyio.fail_after(WAIT_S):
        await asyncio.gather(*(run(task_id, instances[n % 2]) for n, task_id in enumerate(woken)))
    assert sorted(done) == sorted(woken)
    assert 1 < most_inside <= gate.limit


async def test_the_line_is_first_come_first_in_and_each_run_is_told_how_many_are_ahead(store: TaskStore) -> None:
    gate, now = _gate(1), _now()
    enter = store.gates.enter
    assert await enter(gate, "first", now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED
    assert [await enter(gate, task, now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS) for task in "abc"] == [0, 1, 2]
    # Trying again keeps the place in line it had.
    assert await enter(gate, "b", now_ms=now + 1, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 1
    assert await store.gates.leave(gate, "first", now_ms=now + 2) == ["a"]
    # The place is kept for the first in line: "b" still waits behind "a" until "a" came in.
    assert await enter(gate, "b", now_ms=now + 3, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 1
    assert await enter(gate, "late", now_ms=now + 3, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 3
    assert await enter(gate, "a", now_ms=now + 4, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED
    assert await enter(gate, "c", now_ms=now + 5, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 1
    # A holder entering again only renews its place.
    assert await enter(gate, "a", now_ms=now + 6, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED


async def test_leaving_names_as_many_of_the_first_in_line_as_there_are_free_places(store: TaskStore) -> None:
    gate, now = _gate(2), _now()
    for task in ("a", "b", "c", "d", "e"):
        await store.gates.enter(gate, task, now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS)
    assert await store.gates.leave(gate, "a", now_ms=now + 1) == ["c"]
    assert await store.gates.leave(gate, "b", now_ms=now + 2) == ["c", "d"]
    # A wait given up (the task cancelled) names the next one in its stead.
    assert await store.gates.leave(gate, "c", now_ms=now + 3) == ["d", "e"]
    assert await store.gates.leave(gate, "nobody", now_ms=now + 4) == ["d", "e"]


async def test_a_hold_that_lapsed_gives_its_place_back(store: TaskStore) -> None:
    """The worker holding the place died: its hold is not renewed, and the place comes back with it."""
    gate, now = _gate(1), _now()
    assert await store.gates.enter(gate, "dead", now_ms=now, hold_ms=1_000, wait_ms=WAIT_MS) == ENTERED
    assert await store.gates.enter(gate, "next", now_ms=now + 999, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 0
    assert await store.gates.enter(gate, "next", now_ms=now + 1_000, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED
    # The dead worker's run, back after all, holds nothing to renew: its place is another's.
    assert not await store.gates.renew(gate, "dead", until_ms=now + HOLD_MS)
    assert await store.gates.enter(gate, "dead", now_ms=now + 1_001, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 0


async def test_renewing_keeps_a_place_and_a_lapsed_one_is_not_renewed(store: TaskStore) -> None:
    gate, now = _gate(1), _now()
    assert await store.gates.enter(gate, "alive", now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED
    assert await store.gates.renew(gate, "alive", until_ms=now + 2 * HOLD_MS)
    # Renewed past its first hold: still held then.
    assert await store.gates.enter(gate, "other", now_ms=now + HOLD_MS + 1, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 0
    assert not await store.gates.renew(gate, "never-entered", until_ms=now + HOLD_MS)
    lapsed = _gate(1)
    assert await store.gates.enter(lapsed, "late", now_ms=now - 10_000, hold_ms=1, wait_ms=WAIT_MS) == ENTERED
    assert not await store.gates.renew(lapsed, "late", until_ms=now + HOLD_MS)


async def test_a_wait_that_lapsed_leaves_the_line(store: TaskStore) -> None:
    """A task that is gone (cancelled, expired) stops trying: its wait lapses and the line moves up."""
    gate, now = _gate(1), _now()
    await store.gates.enter(gate, "holder", now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS)
    assert await store.gates.enter(gate, "gone", now_ms=now, hold_ms=HOLD_MS, wait_ms=1_000) == 0
    assert await store.gates.enter(gate, "patient", now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 1
    assert await store.gates.enter(gate, "patient", now_ms=now + 1_000, hold_ms=HOLD_MS, wait_ms=WAIT_MS) == 0
    assert await store.gates.leave(gate, "holder", now_ms=now + 1_001) == ["patient"]


async def test_a_token_bucket_lets_a_burst_through_then_refuses_until_it_refills(store: TaskStore) -> None:
    bucket, now = f"principal:{uuid.uuid4().hex[:8]}", _now()

    async def take(at_ms: int) -> int:
        return await store.gates.take_token(bucket, rate_per_s=2.0, burst=3, now_ms=at_ms)

    assert [await take(now) for _ in range(3)] == [0, 0, 0]
    refused = await take(now)
    assert 0 < refused <= 500  # one token every 500 ms
    assert 0 < await take(now + 400) <= 100
    assert await take(now + 500) == 0
    assert 0 < await take(now + 500) <= 500
    # Refilled at the rate, never beyond the burst.
    later = now + 500 + 60_000
    assert [await take(later) for _ in range(4)][:3] == [0, 0, 0]
    assert await take(later) > 0
    # Buckets are apart.
    assert await store.gates.take_token(f"{bucket}-other", rate_per_s=2.0, burst=3, now_ms=later) == 0


async def test_every_key_a_gate_or_a_bucket_keeps_lapses_on_its_own(shared_store: ValkeyTaskStore) -> None:
    """Nothing flow control stores is unbounded: held keys expire with their latest hold or wait, a
    gate everyone left keeps no key at all, a bucket expires when it would be full again."""
    gates, client, keys = shared_store.gates, shared_store.topology.client, shared_store.keys
    gate, now = _gate(1), _now()
    held, line, waits = keys.gate_holders(gate.name), keys.gate_line(gate.name), keys.gate_waits(gate.name)
    await gates.enter(gate, "a", now_ms=now, hold_ms=HOLD_MS, wait_ms=WAIT_MS)
    await gates.enter(gate, "b", now_ms=now, hold_ms=HOLD_MS, wait_ms=2 * WAIT_MS)
    assert 0 < await client.pttl(held) <= HOLD_MS
    for key in (line, waits):
        assert HOLD_MS < await client.pttl(key) <= 2 * WAIT_MS
    assert await gates.renew(gate, "a", until_ms=_now() + 3 * HOLD_MS)
    assert 2 * HOLD_MS < await client.pttl(held) <= 3 * HOLD_MS
    assert await gates.leave(gate, "a", now_ms=_now()) == ["b"]
    assert await gates.enter(gate, "b", now_ms=_now(), hold_ms=HOLD_MS, wait_ms=WAIT_MS) == ENTERED
    assert await gates.leave(gate, "b", now_ms=_now()) == []
    assert [await client.exists(key) for key in (held, line, waits)] == [0, 0, 0]

    bucket = f"principal:{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        await gates.take_token(bucket, rate_per_s=2.0, burst=3, now_ms=_now())
    assert 500 < await client.pttl(keys.bucket(bucket)) <= 1_000  # two tokens to refill at 2 a second
