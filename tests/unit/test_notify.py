"""The change hub (``ext_tasks.notify``) on its own: fan-out of list changes to every open stream, a
bounded queue per listener that drops its oldest events, the graceful end on close, and task changes,
followed one task at a time only while some stream watches that task (one follower per task, shared by
its watchers), handed only to the streams watching it, never handed on twice, and caught up after the
task's subscription broke and came back.

The store's ``watch`` is a fake the test drives: each subscription is a queue the test pushes changes
into (or a reconnection's ``None``), and breaks by making the hub's read raise. The store's read of a
task as it is now is a dict the test fills. Nothing sleeps in the tests; only the hub's own backoff
before it subscribes again after a break (0.1 s) is waited for, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Final

import anyio
import pytest

from ext_tasks.notify import _QUEUE_SIZE, ChangeEvent, ChangeHub
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.store.base import TaskStoreUnavailable

pytestmark = pytest.mark.anyio

WAIT_S = 5
#: The hub's first pause before it subscribes again after a break (a little less: clock resolution).
BACKOFF_S = 0.09


def task_event(task_id: str, version: int) -> TaskRecord:
    """A record as the store publishes a commit."""
    return TaskRecord(
        task_id=task_id,
        owner="alice",
        tool="survey",
        arguments={},
        status=TaskStatus.WORKING,
        version=version,
        created_at_ms=1_000,
        updated_at_ms=1_000 + version,
        ttl_ms=60_000,
        poll_interval_ms=500,
    )


def changed(task_id: str, version: int) -> ChangeEvent:
    return ChangeEvent(kind="task", task=task_event(task_id, version))


async def next_event(queue: asyncio.Queue[ChangeEvent]) -> ChangeEvent:
    with anyio.fail_after(WAIT_S):
        return await queue.get()


async def next_events(queue: asyncio.Queue[ChangeEvent], count: int) -> list[ChangeEvent]:
    return [await next_event(queue) for _ in range(count)]


#: What :meth:`Subscription.break_with` queues: the hub's read of it raises the error.
_BREAK: Final = task_event("break", 0)


class Subscription(asyncio.Queue[TaskRecord | None]):
    """One subscription's queue as the store hands it to the hub: changes, ``None`` when live (again),
    and a break the test asks for, raised by the hub's read once everything queued before it was read."""

    def __init__(self) -> None:
        super().__init__()
        self._errors: collections.deque[Exception] = collections.deque()

    def break_with(self, error: Exception) -> None:
        self._errors.append(error)
        self.put_nowait(_BREAK)

    async def get(self) -> TaskRecord | None:
        item = await super().get()
        if item is _BREAK:
            raise self._errors.popleft()
        return item


class FakeWatch:
    """The store's ``watch``, scripted by the test. Each call is one subscription to one task: unless
    ``live_at_once`` is off, it is live at once (its queue starts with ``None``); the test then
    :meth:`push`\\ es changes into the task's open subscription or :meth:`break_`\\ s it. A task in
    ``refuse`` fails its next subscription before it is live."""

    def __init__(self, *, live_at_once: bool = True) -> None:
        self.live_at_once = live_at_once
        self.refuse: dict[str, Exception] = {}
        #: Subscriptions asked for per task, refused ones included; and those that opened.
        self.attempts: collections.Counter[str] = collections.Counter()
        self.opened: collections.Counter[str] = collections.Counter()
        self._open: dict[str, list[Subscription]] = collections.defaultdict(list)
        self._changed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def __call__(self, task_id: str) -> AsyncIterator[Subscription]:
        self.attempts[task_id] += 1
        self._changed.set()
        refused = self.refuse.pop(task_id, None)
        if refused is not None:
            raise refused
        subscription = Subscription()
        if self.live_at_once:
            subscription.put_nowait(None)
        self._open[task_id].append(subscription)
        self.opened[task_id] += 1
        self._changed.set()
        try:
            yield subscription
        finally:
            self._open[task_id].remove(subscription)
            self._changed.set()

    def open(self, task_id: str | None = None) -> int:
        """Subscriptions open now, to ``task_id`` or to any task."""
        if task_id is None:
            return sum(len(subscriptions) for subscriptions in self._open.values())
        return len(self._open[task_id])

    def subscription(self, task_id: str) -> Subscription:
        (only,) = self._open[task_id]  # the hub never holds two subscriptions to one task
        return only

    def push(self, task_id: str, item: TaskRecord | None) -> None:
        self.subscription(task_id).put_nowait(item)

    def break_(self, task_id: str, error: Exception) -> None:
        self.subscription(task_id).break_with(error)

    async def until(self, condition: Callable[[], bool]) -> None:
        with anyio.fail_after(WAIT_S):
            while not condition():
                self._changed.clear()
                await self._changed.wait()


class FakeCurrent:
    """The store's read of a task as it is now (``None``: gone), recording what was read. A task in
    ``fail`` makes its next read raise."""

    def __init__(self) -> None:
        self.now: dict[str, TaskRecord | None] = {}
        self.fail: dict[str, Exception] = {}
        self.reads: list[str] = []

    async def __call__(self, task_id: str) -> TaskRecord | None:
        self.reads.append(task_id)
        failed = self.fail.pop(task_id, None)
        if failed is not None:
            raise failed
        return self.now[task_id]


# --- list changes ---------------------------------------------------------------------------------------


async def test_a_change_reaches_every_open_subscription_and_none_that_left() -> None:
    hub = ChangeHub()
    async with hub.subscribe() as first:
        async with hub.subscribe() as second:
            hub.publish(ChangeEvent(kind="tools"))
            assert await next_event(first) == ChangeEvent(kind="tools")
            assert await next_event(second) == ChangeEvent(kind="tools")
        hub.publish(ChangeEvent(kind="resource", uri="file:///a"))
        assert await next_event(first) == ChangeEvent(kind="resource", uri="file:///a")
        assert second.empty()


async def test_a_listener_too_slow_loses_its_oldest_events_and_never_holds_up_the_publisher() -> None:
    hub = ChangeHub()
    async with hub.subscribe() as slow:
        for n in range(_QUEUE_SIZE + 44):
            hub.publish(ChangeEvent(kind="resource", uri=f"file:///{n}"))

        assert slow.qsize() == _QUEUE_SIZE
        assert (await next_event(slow)).uri == "file:///44"
        kept = [slow.get_nowait().uri for _ in range(_QUEUE_SIZE - 1)]
        assert kept[-1] == f"file:///{_QUEUE_SIZE + 43}"


async def test_close_ends_every_subscription_even_a_full_one_and_a_later_one_at_once() -> None:
    hub = ChangeHub()
    async with hub.subscribe() as idle, hub.subscribe() as full:
        for n in range(_QUEUE_SIZE):
            hub.publish(ChangeEvent(kind="resource", uri=f"file:///{n}"))
        while not idle.empty():
            idle.get_nowait()

        hub.close()

        assert ChangeHub.is_closing(await next_event(idle))
        drained = [full.get_nowait() for _ in range(full.qsize())]
        assert ChangeHub.is_closing(drained[-1])
        assert not ChangeHub.is_closing(drained[0])
    async with hub.subscribe() as late:
        assert ChangeHub.is_closing(await next_event(late))


# --- task events ----------------------------------------------------------------------------------------


async def test_a_task_is_followed_only_while_some_stream_watches_it_and_its_watchers_share_one_follower() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        hub = ChangeHub(watch)

        async with hub.subscribe():
            assert (sum(watch.attempts.values()), hub.followed()) == (0, 0)  # lists only: no task followed
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(hub.subscribe(frozenset({"t1"})))
                assert (watch.open("t1"), hub.followed()) == (1, 1)  # live once subscribe returns
                async with hub.subscribe(frozenset({"t1", "t2"})):
                    assert (watch.opened["t1"], watch.open("t1"), watch.open("t2"), hub.followed()) == (1, 1, 1, 2)
                # t2's last watcher left; t1 is still watched by the first stream.
                assert hub.followed() == 1
                await watch.until(lambda: watch.open("t2") == 0)
                assert (watch.opened["t1"], watch.open("t1")) == (1, 1)
            assert hub.followed() == 0
            await watch.until(lambda: watch.open() == 0)

        async with hub.subscribe(frozenset({"t1"})):  # watched again: a new subscription
            assert (watch.opened["t1"], watch.open("t1"), hub.followed()) == (2, 1, 1)


async def test_subscribe_returns_only_once_the_task_subscription_is_live() -> None:
    with anyio.fail_after(WAIT_S):
        watch = FakeWatch(live_at_once=False)
        hub = ChangeHub(watch)
        entered, leave = asyncio.Event(), asyncio.Event()

        async def stream() -> None:
            async with hub.subscribe(frozenset({"t1"})):
                entered.set()
                await leave.wait()

        async with anyio.create_task_group() as group:
            group.start_soon(stream)
            await watch.until(lambda: watch.open("t1") == 1)
            assert not entered.is_set()  # subscribed, but not live yet: a change could still be missed

            watch.push("t1", None)
            await entered.wait()
            leave.set()
        await watch.until(lambda: watch.open() == 0)


async def test_a_task_event_reaches_only_the_streams_watching_that_task() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        hub = ChangeHub(watch)
        async with (
            hub.subscribe(frozenset({"t1"})) as one,
            hub.subscribe(frozenset({"t2", "t3"})) as other,
            hub.subscribe() as lists_only,
        ):
            assert sorted(watch.opened) == ["t1", "t2", "t3"]
            watch.push("t1", task_event("t1", 1))
            watch.push("t2", task_event("t2", 4))

            assert await next_event(one) == changed("t1", 1)
            assert await next_event(other) == changed("t2", 4)
            # Both changes were handed on; a list change now comes next wherever nothing else was handed.
            hub.publish(ChangeEvent(kind="tools"))
            assert await next_event(one) == ChangeEvent(kind="tools")
            assert await next_event(other) == ChangeEvent(kind="tools")
            assert await next_event(lists_only) == ChangeEvent(kind="tools")


async def test_a_watch_that_cannot_subscribe_fails_subscribe_and_the_next_subscribe_tries_again() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        hub = ChangeHub(watch)

        watch.refuse["t1"] = TaskStoreUnavailable("valkey is down")
        with pytest.raises(TaskStoreUnavailable):
            async with hub.subscribe(frozenset({"t1"})):
                pytest.fail("subscribed to a store that refused")
        assert (watch.attempts["t1"], hub.followed()) == (1, 0)

        async with hub.subscribe(frozenset({"t1"})) as watching:
            assert (watch.attempts["t1"], watch.open("t1"), hub.followed()) == (2, 1, 1)
            watch.push("t1", task_event("t1", 1))
            assert await next_event(watching) == changed("t1", 1)
        await watch.until(lambda: watch.open() == 0)

        # One task of several refused: the subscription fails and leaves none of them followed.
        watch.refuse["t2"] = TaskStoreUnavailable("valkey is down")
        with pytest.raises(TaskStoreUnavailable):
            async with hub.subscribe(frozenset({"t1", "t2"})):
                pytest.fail("subscribed to a store that refused")
        assert hub.followed() == 0
        await watch.until(lambda: watch.open() == 0)

        async with hub.subscribe(frozenset({"t1", "t2"})) as both:
            assert (watch.open("t1"), watch.open("t2"), hub.followed()) == (1, 1, 2)
            watch.push("t2", task_event("t2", 1))
            assert await next_event(both) == changed("t2", 1)


async def test_after_a_break_and_reconnection_the_hub_hands_on_what_was_missed() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        store = FakeCurrent()
        hub = ChangeHub(watch, store)
        async with (
            hub.subscribe(frozenset({"t1"})) as one,
            hub.subscribe(frozenset({"t2"})) as two,
            hub.subscribe(frozenset({"t3"})) as three,
            hub.subscribe(frozenset({"t1", "t2", "t3"})) as many,
        ):
            for task_id, stream in (("t1", one), ("t2", two), ("t3", three)):
                watch.push(task_id, task_event(task_id, 1))
                assert await next_event(stream) == changed(task_id, 1)
                assert await next_event(many) == changed(task_id, 1)
            # While the subscriptions are down: t1 does not move, t2 moves on, t3 is lost with the store.
            store.now.update({"t1": task_event("t1", 1), "t2": task_event("t2", 2), "t3": None})

            broke_at = anyio.current_time()
            for task_id in ("t1", "t2", "t3"):
                watch.break_(task_id, ConnectionError("subscription broke"))
            await watch.until(lambda: all(watch.opened[task_id] == 2 for task_id in ("t1", "t2", "t3")))
            assert anyio.current_time() - broke_at >= BACKOFF_S  # the hub paused before subscribing again
            assert (watch.open(), hub.followed()) == (3, 3)  # the broken subscriptions are closed

            assert await next_event(two) == changed("t2", 2)
            # A stream watching a task that is gone ends: the client subscribes again and learns what is left.
            assert ChangeHub.is_closing(await next_event(three))
            missed = await next_events(many, 2)  # t2's and t3's followers catch up side by side
            assert [event for event in missed if not ChangeHub.is_closing(event)] == [changed("t2", 2)]
            assert sum(ChangeHub.is_closing(event) for event in missed) == 1
            assert sorted(store.reads) == ["t1", "t2", "t3"]  # each task read once on its reconnection

            # t1 did not move, so nothing was handed on for it: its next live change comes next.
            watch.push("t1", task_event("t1", 3))
            assert await next_event(one) == changed("t1", 3)
            # t2's change missed during the gap, arriving late, is not handed on a second time.
            watch.push("t2", task_event("t2", 2))
            watch.push("t2", task_event("t2", 3))
            assert await next_event(two) == changed("t2", 3)
            assert three.empty()


async def test_a_reconnection_the_store_announces_on_the_same_subscription_catches_up_too() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        store = FakeCurrent()
        hub = ChangeHub(watch, store)
        async with hub.subscribe(frozenset({"t1"})) as stream:
            watch.push("t1", task_event("t1", 1))
            assert await next_event(stream) == changed("t1", 1)
            assert store.reads == []  # the first live moment reads nothing

            store.now["t1"] = task_event("t1", 2)
            watch.push("t1", None)  # the store subscribed again by itself: live again
            assert await next_event(stream) == changed("t1", 2)
            assert (store.reads, watch.opened["t1"]) == (["t1"], 1)

            watch.push("t1", None)  # again, and t1 did not move this time: nothing handed on
            watch.push("t1", task_event("t1", 3))
            assert await next_event(stream) == changed("t1", 3)
            assert store.reads == ["t1", "t1"]

            # A read that fails during a catch-up is tried again at the next live moment.
            store.now["t1"] = task_event("t1", 4)
            store.fail["t1"] = TaskStoreUnavailable("valkey is down")
            watch.push("t1", None)
            watch.push("t1", None)
            assert await next_event(stream) == changed("t1", 4)
            assert (store.reads, watch.opened["t1"]) == (["t1"] * 4, 1)  # and the subscription stayed


async def test_a_change_not_newer_than_the_last_one_handed_on_is_not_handed_on_again() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        store = FakeCurrent()
        hub = ChangeHub(watch, store)
        async with hub.subscribe(frozenset({"t1"})) as first, hub.subscribe(frozenset({"t1"})) as second:
            for version in (2, 2, 1, 3):  # a duplicate and an older change between two new ones
                watch.push("t1", task_event("t1", version))
            for stream in (first, second):
                assert await next_events(stream, 2) == [changed("t1", 2), changed("t1", 3)]

            # A catch-up that raced the change itself: the catch-up hands it on, the late live change is dropped.
            store.now["t1"] = task_event("t1", 4)
            watch.push("t1", None)
            watch.push("t1", task_event("t1", 4))
            watch.push("t1", task_event("t1", 5))
            for stream in (first, second):
                assert await next_events(stream, 2) == [changed("t1", 4), changed("t1", 5)]

            # And the other way round: the live change first, then a catch-up that reads the same version.
            watch.push("t1", task_event("t1", 6))
            store.now["t1"] = task_event("t1", 6)
            watch.push("t1", None)
            watch.push("t1", task_event("t1", 7))
            for stream in (first, second):
                assert await next_events(stream, 2) == [changed("t1", 6), changed("t1", 7)]
            assert store.reads == ["t1", "t1"]
            assert first.empty()
            assert second.empty()


async def test_close_stops_following_every_task() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for its tasks to be live
        watch = FakeWatch()
        hub = ChangeHub(watch)
        async with hub.subscribe(frozenset({"t1", "t2"})) as stream:
            hub.close()
            assert ChangeHub.is_closing(await next_event(stream))
            assert hub.followed() == 0
            await watch.until(lambda: watch.open() == 0)
