"""Sharded channels on one Valkey and on the cluster: one connection per node, fanned out in memory.

The case that matters to a client that reconnects (a legacy GET stream dropped and opened again on the
same session): leaving a channel and joining it again before the node answered the leave must leave the
new subscription live at once, not waiting for a confirmation that was taken for the old one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest

from ext_tasks.store.connection.channels import ShardedChannels
from ext_tasks.store.connection.errors import TaskStoreUnavailable
from ext_tasks.store.connection.topology import Topology, connect
from tests.contract.conftest import shared_url

pytestmark = pytest.mark.anyio

#: Far under the 5 s a subscription may wait for its confirmation: a lost confirmation would show.
LIVE_WITHIN_S = 1.0
SPUBLISH = "return redis.call('SPUBLISH', KEYS[1], ARGV[1])"  # routed by its channel, on any topology


@pytest.fixture(params=["valkey", "cluster"])
async def topology(request: pytest.FixtureRequest) -> AsyncIterator[Topology]:
    topology = connect(shared_url(request))
    try:
        yield topology
    finally:
        await topology.close()


async def publish(topology: Topology, channel: str, data: str) -> int:
    receivers: int = await topology.client.eval(SPUBLISH, 1, channel, data)
    return receivers


async def test_leaving_and_joining_again_at_once_stays_live(topology: Topology) -> None:
    channels = ShardedChannels(topology)
    try:
        for round_ in range(20):
            channel = f"contract-channels:{{s{round_ % 3}}}:bus"
            with anyio.fail_after(LIVE_WITHIN_S):
                async with channels.subscribe(channel) as first:
                    assert await first.get() is None  # live
            # Joined again before the node could answer the leave.
            with anyio.fail_after(LIVE_WITHIN_S):
                async with channels.subscribe(channel) as again:
                    assert await again.get() is None
                    assert await publish(topology, channel, f"m{round_}") == 1
                    assert await again.get() == f"m{round_}"
        assert channels.connection_count() <= (1 if topology.spans_slots else 3)
    finally:
        await channels.close()


async def test_many_local_subscribers_share_one_subscription(topology: Topology) -> None:
    channel = "contract-channels:{fan}:bus"
    channels = ShardedChannels(topology)
    try:
        async with contextlib.AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(channels.subscribe(channel)) for _ in range(50)]
            with anyio.fail_after(LIVE_WITHIN_S):
                assert [await queue.get() for queue in queues] == [None] * 50
                assert await publish(topology, channel, "hello") == 1  # one subscribed connection
                assert [await queue.get() for queue in queues] == ["hello"] * 50
        assert channels.channel_count() == 0
    finally:
        await channels.close()


async def test_a_closed_channels_object_opens_no_connection_again(topology: Topology) -> None:
    """A subscriber arriving after close (a run's watcher, late in a shutdown) is refused, and leaves
    no connection and no reader behind the closed store."""
    channels = ShardedChannels(topology)
    async with channels.subscribe("contract-channels:{late}:bus") as live:
        assert await live.get() is None
    await channels.close()
    with pytest.raises(TaskStoreUnavailable):
        async with channels.subscribe("contract-channels:{late}:bus"):
            pass
    assert channels.connection_count() == 0
    assert [task for task in asyncio.all_tasks() if task.get_name().startswith("ext-tasks-pubsub")] == []
