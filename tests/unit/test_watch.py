"""The HTTP edge's watch on a request (ext_tasks/watch.py): the body's deadline, the client going away,
and the endpoint's one clock, on a real event loop with an ASGI ``receive`` fed by the test."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ext_tasks.watch import WATCH_AFTER_S, BodyTimeout, Clock, Disconnected, RequestWatch

pytestmark = pytest.mark.anyio


class Client:
    """The server side of one connection: ``receive`` yields what the test puts."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def receive(self) -> dict[str, Any]:
        return await self.messages.get()

    def send_body(self, body: bytes, *, more: bool = False) -> None:
        self.messages.put_nowait({"type": "http.request", "body": body, "more_body": more})

    def leave(self) -> None:
        self.messages.put_nowait({"type": "http.disconnect"})


async def test_a_body_in_pieces_is_joined_and_a_quick_answer_never_watches_the_client() -> None:
    clock, client = Clock(), Client()
    client.send_body(b'{"a":', more=True)
    client.send_body(b"1}")
    watch = RequestWatch(clock, client.receive, 5.0)
    try:
        assert await watch.body({}, 1024) == b'{"a":1}'
        assert await watch.run(asyncio.sleep(0, "answer")) == "answer"
        await asyncio.sleep(WATCH_AFTER_S * 2.5)
        assert watch.gone is None  # no task was spent on watching a request answered at once
    finally:
        watch.stop()


async def test_a_stalled_body_ends_with_body_timeout_near_its_deadline() -> None:
    clock, client = Clock(), Client()
    client.send_body(b"{", more=True)
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def request() -> BodyTimeout:  # one task, as the server runs a request
        watch = RequestWatch(clock, client.receive, 0.2)
        try:
            with pytest.raises(BodyTimeout) as raised:
                await watch.body({}, 1024)
        finally:
            watch.stop()
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the watch's own cancel was taken back
        return raised.value

    timeout = await asyncio.wait_for(request(), 5.0)
    waited = loop.time() - started
    assert 0.2 <= waited < 0.2 + 3 * WATCH_AFTER_S, waited  # at the deadline, within a tick or two
    assert timeout.http_status == 408 and timeout.http_headers() == {"Connection": "close"}


async def test_a_client_leaving_mid_body_is_a_disconnect_not_a_timeout() -> None:
    clock, client = Clock(), Client()
    client.send_body(b"{", more=True)
    client.leave()
    watch = RequestWatch(clock, client.receive, 5.0)
    try:
        with pytest.raises(Disconnected):
            await watch.body({}, 1024)
    finally:
        watch.stop()


async def test_a_client_leaving_during_a_long_answer_cancels_it() -> None:
    clock, client = Clock(), Client()
    client.send_body(b"{}")
    work_cancelled = asyncio.Event()

    async def long_answer() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            work_cancelled.set()
            raise
        return "never"

    async def request() -> str | None:  # one task, as the server runs a request
        watch = RequestWatch(clock, client.receive, 5.0)
        try:
            await watch.body({}, 1024)
            asyncio.get_running_loop().call_later(WATCH_AFTER_S * 3, client.leave)
            answer = await watch.run(long_answer())
        finally:
            watch.stop()
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the watch's own cancel was taken back
        return answer

    assert await asyncio.wait_for(request(), 5.0) is None
    assert work_cancelled.is_set()


async def test_a_stream_watches_at_once_and_the_clock_stops_when_nothing_is_young() -> None:
    clock, client = Clock(), Client()
    client.send_body(b"{}")
    watch = RequestWatch(clock, client.receive, 5.0)
    await watch.body({}, 1024)
    gone = watch.start()  # what the endpoint does when a stream begins
    assert watch.start() is gone
    client.leave()
    await asyncio.wait_for(gone, 1.0)
    watch.stop()
    await asyncio.sleep(WATCH_AFTER_S * 2.5)
    assert clock._timer is None  # idle: no timer left running


async def test_many_requests_share_one_timer() -> None:
    clock = Clock()
    clients = [Client() for _ in range(50)]
    watches = [RequestWatch(clock, client.receive, 5.0) for client in clients]
    timer = clock._timer
    assert timer is not None and all(clock._timer is timer for _ in watches)
    for watch in watches:
        watch.stop()
    await asyncio.sleep(WATCH_AFTER_S * 1.5)
    assert clock._timer is None


async def test_an_early_error_reply_is_not_watched_so_a_disconnect_cannot_cancel_its_sending() -> None:
    clock, client = Clock(), Client()
    client.send_body(b"{}")
    watch = RequestWatch(clock, client.receive, 5.0)
    try:
        await watch.body({}, 1024)
        # The endpoint refuses the request (a bad Origin, a body over its limit) and sends its error without
        # asking the handler: a slow send must not be cancelled by the client leaving meanwhile.
        client.leave()
        await asyncio.sleep(WATCH_AFTER_S * 2.5)
        assert watch.gone is None
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
    finally:
        watch.stop()
