"""A legacy session's GET stream renews its task subscription when the upstream breaks it off (as a proxy's
upstream does when it goes silent past the read timeout, or restarts), and reads its tasks again once the
new one is live: a change made while there was no subscription still reaches the client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from ext_tasks.auth import Caller
from ext_tasks.engine import Engine
from migration.remote import UpstreamTimedOut
from migration.upstream import EngineUpstream, ModernCall
from tests.migration.shim_support import WAIT_S, Legacy, next_item

pytestmark = pytest.mark.anyio


class BreakingUpstream(EngineUpstream):
    """The engine in process, except that the first listen breaks off once it is acknowledged."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.broke = asyncio.Event()
        self.listens = 0

    async def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
        if call.method == "subscriptions/listen":
            self.listens += 1
        async for message in super().send(call, caller):
            yield message
            if call.method == "subscriptions/listen" and self.listens == 1:
                self.broke.set()
                raise UpstreamTimedOut(300)


async def test_a_subscription_broken_off_is_renewed_and_the_tasks_read_again() -> None:
    upstreams: list[BreakingUpstream] = []

    def breaking(engine: Engine) -> BreakingUpstream:
        upstreams.append(BreakingUpstream(engine))
        return upstreams[-1]

    legacy = Legacy(upstream=breaking)
    try:
        client = await legacy.initialize()
        task_id = await client.start_task("job", {"n": 1})
        stream = await client.get_stream()
        with anyio.fail_after(WAIT_S):
            await upstreams[0].broke.wait()
        await legacy.worker.execute(task_id)  # while there is no subscription
        completed = await next_item(stream)
        assert completed["method"] == "notifications/tasks/status"
        assert (completed["params"]["taskId"], completed["params"]["status"]) == (task_id, "completed")
        assert upstreams[0].listens == 2
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await legacy.close()
