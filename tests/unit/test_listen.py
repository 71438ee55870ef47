"""``subscriptions/listen`` through the engine: the acknowledgement, the list-changed and resource
notifications each stream asked for (and no others), keep-alives, and the graceful end on shutdown.

The change hub under it is in ``test_notify.py``; listens for tasks are with the task tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from ext_tasks import ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.options import EngineOptions
from ext_tasks.protocol.errors import INVALID_PARAMS
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import StreamItem, StreamReply
from tests.unit.engine_support import (
    ALICE,
    KEY,
    SUBSCRIPTION_ID,
    FakeClock,
    collect,
    error,
    message,
    next_item,
    request,
)

pytestmark = pytest.mark.anyio


# --- subscriptions/listen ----------------------------------------------------------------------------


async def listen(engine: Engine, request_id: str, **notifications: Any) -> AsyncIterator[StreamItem]:
    body, headers = message("subscriptions/listen", {"notifications": notifications}, request_id=request_id)
    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, ALICE)
    assert isinstance(reply, StreamReply)
    return reply.items


async def test_listen_first_acknowledges_with_the_subscription_id(engine: Engine) -> None:
    items = await listen(engine, "listen-1", toolsListChanged=True, resourceSubscriptions=["file:///readme.md"])

    first = await next_item(items)

    assert first == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUBSCRIPTION_ID: "listen-1"},
            "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["file:///readme.md"]},
        },
    }


async def test_removing_a_tool_notifies_tool_listeners_and_not_prompt_listeners(
    engine: Engine, registry: ToolRegistry
) -> None:
    tools = await listen(engine, "listen-tools", toolsListChanged=True)
    prompts = await listen(engine, "listen-prompts", promptsListChanged=True)
    await next_item(tools)
    await next_item(prompts)

    registry.remove_tool("add")
    engine.close()

    assert await next_item(tools) == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUBSCRIPTION_ID: "listen-tools"}},
    }
    # The prompt listener's next message is the end of the stream: the tool change never reached it.
    after = await next_item(prompts)
    assert after is not None
    assert after["id"] == "listen-prompts"
    assert "result" in after


async def test_resource_update_reaches_only_subscribers_of_that_uri(engine: Engine, registry: ToolRegistry) -> None:
    readme = await listen(engine, "listen-readme", resourceSubscriptions=["file:///readme.md"])
    other = await listen(engine, "listen-other", resourceSubscriptions=["file:///other.md"])
    await next_item(readme)
    await next_item(other)

    registry.resource_updated("file:///readme.md")
    engine.close()

    assert await next_item(readme) == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {SUBSCRIPTION_ID: "listen-readme"}, "uri": "file:///readme.md"},
    }
    after = await next_item(other)
    assert after is not None and "result" in after


async def test_close_ends_the_stream_with_a_result_carrying_the_subscription_id(engine: Engine) -> None:
    items = await listen(engine, "listen-9", toolsListChanged=True)
    await next_item(items)

    engine.close()

    final = await next_item(items)
    assert final is not None
    assert final["id"] == "listen-9"
    assert final["result"]["resultType"] == "complete"
    assert final["result"]["_meta"][SUBSCRIPTION_ID] == "listen-9"
    with anyio.fail_after(5), pytest.raises(StopAsyncIteration):
        await anext(items)


async def test_listen_opened_after_close_ends_at_once(engine: Engine) -> None:
    engine.close()
    items = await listen(engine, "late", toolsListChanged=True)

    remaining = await collect(items)

    assert remaining[0] is not None and remaining[0]["method"] == "notifications/subscriptions/acknowledged"
    assert remaining[-1] is not None and remaining[-1]["id"] == "late"


async def test_idle_subscription_sends_keepalives(registry: ToolRegistry, clock: FakeClock) -> None:
    engine = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock), EngineOptions(keepalive_s=0.01))
    items = await listen(engine, "idle", toolsListChanged=True)
    await next_item(items)

    assert await next_item(items) is None

    engine.close()
    final = await next_item(items)
    assert final is not None and final["id"] == "idle"


async def test_listen_with_a_malformed_filter_is_invalid_params(engine: Engine) -> None:
    reply = await request(engine, "subscriptions/listen", {"notifications": {"toolsListChanged": "sometimes"}})

    assert error(reply)["code"] == INVALID_PARAMS
