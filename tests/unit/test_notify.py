"""The change hub (``ext_tasks.notify``) on its own: fan-out of list changes to every open stream, a
bounded queue per listener that drops its oldest events, the graceful end on close, and task events,
consumed from the store only while some stream watches a task, handed only to the streams watching it,
and caught up after the store's announcement broke and came back.

The store's announcement is a fake async generator function the test feeds; nothing sleeps in the tests
(the hub's own backoff before it subscribes again is 0.1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from ext_tasks.notify import _QUEUE_SIZE, ChangeEvent, ChangeHub
from ext_tasks.store.base import TaskStoreUnavailable

pytestmark = pytest.mark.anyio

WAIT_S = 5


def task_event(task_id: str, version: int) -> dict[str, Any]:
    """A store event as the store announces a commit (the owner and the DetailedTask beside the version)."""
    return {"taskId": task_id, "owner": "alice", "version": version, "task": {"taskId": task_id, "v": version}}


def changed(task_id: str, version: int) -> ChangeEvent:
    return ChangeEvent(kind="task", task=task_event(task_id, version))


async def next_event(queue: asyncio.Queue[ChangeEvent]) -> ChangeEvent:
    with anyio.fail_after(WAIT_S):
        return await queue.get()


class FakeTaskEvents:
    """The store's task announcement, scripted by the test. Each call is one subscription: it announces
    that it is live (an empty event), then yields what the test :meth:`send`\\ s, and breaks on an
    exception sent. ``refuse`` makes the next subscription fail before it is live."""

    def __init__(self) -> None:
        self.connections = 0
        self.open = 0
        self.refuse: Exception | None = None
        self._feed: asyncio.Queue[dict[str, Any] | Exception] = asyncio.Queue()
        self._changed = asyncio.Event()

    async def __call__(self) -> AsyncIterator[dict[str, Any]]:
        if self.refuse is not None:
            refused, self.refuse = self.refuse, None
            raise refused
        self._feed = asyncio.Queue()
        self.connections += 1
        self.open += 1
        self._changed.set()
        try:
            yield {}
            while True:
                item = await self._feed.get()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            self.open -= 1
            self._changed.set()

    def send(self, item: dict[str, Any] | Exception) -> None:
        self._feed.put_nowait(item)

    async def until(self, condition: Callable[[], bool]) -> None:
        with anyio.fail_after(WAIT_S):
            while not condition():
                self._changed.clear()
                await self._changed.wait()


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


async def test_task_events_are_consumed_only_while_some_stream_watches_a_task() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for the store to be live
        events = FakeTaskEvents()
        hub = ChangeHub(events)

        async with hub.subscribe():
            assert events.connections == 0
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(hub.subscribe(frozenset({"t1"})))
                assert events.open == 1  # the subscription is live once subscribe returns
                await stack.enter_async_context(hub.subscribe(frozenset({"t2"})))
                assert (events.connections, events.open) == (1, 1)  # one consumer for every watcher
            await events.until(lambda: events.open == 0)

        async with hub.subscribe(frozenset({"t3"})):
            assert (events.connections, events.open) == (2, 1)


async def test_a_task_event_reaches_only_the_streams_watching_that_task() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for the store to be live
        events = FakeTaskEvents()
        hub = ChangeHub(events)
        async with (
            hub.subscribe(frozenset({"t1"})) as one,
            hub.subscribe(frozenset({"t2", "t3"})) as other,
            hub.subscribe() as lists_only,
        ):
            events.send(task_event("t1", 1))
            events.send(task_event("t9", 1))
            events.send(task_event("t2", 4))

            assert await next_event(one) == changed("t1", 1)
            assert await next_event(other) == changed("t2", 4)  # neither t1 nor the unwatched t9 came first
            hub.publish(ChangeEvent(kind="tools"))
            assert await next_event(one) == ChangeEvent(kind="tools")  # t1's stream was handed nothing else
            assert await next_event(lists_only) == ChangeEvent(kind="tools")


async def test_a_store_that_cannot_subscribe_fails_the_subscription_and_the_next_one_tries_again() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for the store to be live
        events = FakeTaskEvents()
        events.refuse = TaskStoreUnavailable("valkey is down")
        hub = ChangeHub(events)

        with pytest.raises(TaskStoreUnavailable):
            async with hub.subscribe(frozenset({"t1"})):
                pytest.fail("subscribed to a store that refused")

        async with hub.subscribe(frozenset({"t1"})) as watching:
            events.send(task_event("t1", 1))
            assert await next_event(watching) == changed("t1", 1)


async def test_after_the_store_broke_and_came_back_the_hub_hands_on_what_was_missed() -> None:
    with anyio.fail_after(WAIT_S):  # every subscription below waits for the store to be live
        events = FakeTaskEvents()
        current: dict[str, dict[str, Any] | None] = {}

        async def now(task_id: str) -> dict[str, Any] | None:
            return current[task_id]

        hub = ChangeHub(events, now)
        async with hub.subscribe(frozenset({"t1", "t2", "t3"})) as many, hub.subscribe(frozenset({"t1"})) as one:
            events.send(task_event("t1", 1))
            assert await next_event(many) == changed("t1", 1)
            assert await next_event(one) == changed("t1", 1)
            # While the announcement is down: t1 does not move, t2 moves on, t3 is lost with the store.
            current.update({"t1": task_event("t1", 1), "t2": task_event("t2", 2), "t3": None})

            events.send(ConnectionError("announcement broke"))
            await events.until(lambda: events.connections == 2)

            assert await next_event(many) == changed("t2", 2)
            # A stream watching a task that is gone ends: the client subscribes again and learns what is left.
            assert ChangeHub.is_closing(await next_event(many))
            events.send(task_event("t1", 3))
            assert await next_event(one) == changed("t1", 3)  # t1 was not handed on again, and events flow
