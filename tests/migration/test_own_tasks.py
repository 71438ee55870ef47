"""The tasks the shim keeps itself (``migration.own_tasks``): a 2025-11-25 client asked for a task and the
upstream answered inline. They are bounded like the engine's: the client's ``ttl`` is capped, a result
over ``EXT_TASKS_MAX_RESULT_BYTES`` is not kept, and they count toward the principal's caps: with the
engine's tasks in ``ext-tasks serve``, and in the session store's own places behind a proxy.
"""

from __future__ import annotations

import pytest

from ext_tasks import Context, ToolRegistry
from ext_tasks.compose import Runtime
from ext_tasks.config import Settings
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.errors import INTERNAL_ERROR, LIMIT_EXCEEDED
from ext_tasks.protocol.tasks import encoded_size
from tests.migration.shim_support import BOB, Legacy, LegacyClient, json_of

pytestmark = pytest.mark.anyio

HOUR_MS, DAY_MS = 3_600_000, 86_400_000


async def echo(ctx: Context, text: str) -> str:
    """Finishes before it becomes a task, with an answer as large as its input."""
    return text


def serving_echo(legacy: Legacy) -> Legacy:
    legacy.registry.tool(task="optional", preflight=True)(echo)
    return legacy


async def refused_with(client: LegacyClient, limit: str, name: str, **arguments: object) -> None:
    """``tools/call name`` with ``params.task`` refused by the cap ``limit``: HTTP 429 with ``Retry-After``,
    whether the shim refuses a task of its own (``quick``, ``echo``) or relays the engine's refusal (``job``)."""
    call = {"name": name, "arguments": arguments, "task": {}}
    reply = await client.post("tools/call", call)
    status, message = json_of(reply)
    assert status == 429 and reply.headers.get("Retry-After", "").isdigit(), (status, reply.headers, message)
    assert (message["error"]["code"], message["error"]["data"]["limit"]) == (LIMIT_EXCEEDED, limit), message


async def test_a_huge_ttl_is_capped_by_the_maximum_and_no_ttl_gets_the_default(legacy: Legacy) -> None:
    client = await legacy.initialize()

    huge = await client.result("tools/call", {"name": "quick", "arguments": {}, "task": {"ttl": 10**15}})
    plain = await client.result("tools/call", {"name": "quick", "arguments": {}, "task": {}})

    assert huge["task"]["ttl"] == DAY_MS  # EXT_TASKS_TASK_MAX_TTL_MS
    assert (await client.result("tasks/get", {"taskId": huge["task"]["taskId"]}))["ttl"] == DAY_MS
    assert (await client.result("tasks/get", {"taskId": plain["task"]["taskId"]}))["ttl"] == HOUR_MS


async def test_a_result_over_the_limit_is_not_kept_and_the_task_says_why() -> None:
    legacy = serving_echo(Legacy(worker=WorkerOptions(max_result_bytes=2048)))
    try:
        client = await legacy.initialize()
        small = await client.start_task("echo", {"text": "s" * 1000})
        large = await client.start_task("echo", {"text": "l" * 100_000})

        assert (await client.result("tasks/result", {"taskId": small}))["content"][0]["text"] == "s" * 1000
        status = await client.result("tasks/get", {"taskId": large})
        assert status["status"] == "failed" and "too large to keep" in status["statusMessage"]
        refused = await client.call("tasks/result", {"taskId": large})
        assert refused["error"]["code"] == INTERNAL_ERROR and "the limit is 2048" in refused["error"]["message"]
        kept = await legacy.sessions.load_task(large)
        assert kept is not None and "result" not in kept and encoded_size(kept) < 2048
    finally:
        await legacy.close()


async def test_they_count_with_the_principals_tasks_toward_the_stored_task_cap() -> None:
    legacy = Legacy(max_stored_tasks=2)
    try:
        client, bobs = await legacy.initialize(), await legacy.initialize(BOB)
        await client.start_task("job")  # a task of the engine's
        await client.start_task("quick")  # one of the shim's own
        await refused_with(client, "max_stored_tasks", "quick")
        await refused_with(client, "max_stored_tasks", "job")
        assert legacy.store.sizes()["stored"] == 2
        await bobs.start_task("quick")  # another principal has its own count
    finally:
        await legacy.close()


async def test_they_count_toward_the_principals_byte_budget() -> None:
    legacy = serving_echo(Legacy(max_stored_bytes=40_000))
    try:
        client = await legacy.initialize()
        await client.start_task("echo", {"text": "e" * 30_000})
        await refused_with(client, "max_stored_bytes", "echo", text="e" * 30_000)
        await refused_with(client, "max_stored_bytes", "job", note="n" * 10_000)
        assert 30_000 < await legacy.store.places.charged("alice") <= 40_000
    finally:
        await legacy.close()


async def test_behind_a_proxy_the_session_store_counts_them_itself() -> None:
    legacy = Legacy(own_places=True, max_stored_tasks=1)
    try:
        client = await legacy.initialize()
        await client.start_task("quick")
        await refused_with(client, "max_stored_tasks", "quick")
        assert await legacy.sessions.places.charged("alice") > 0
        assert await legacy.store.places.charged("alice") == 0
    finally:
        await legacy.close()


def test_ext_tasks_serve_counts_them_in_the_task_stores_places() -> None:
    runtime = Runtime(ToolRegistry("composed"), Settings())
    assert runtime.shim is not None
    assert runtime.shim.tasks.own.places is runtime.store.places
