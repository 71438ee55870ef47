"""The 2025-11-25 task methods of the shim (``migration.legacy_tasks``) in process, over the real engine
and the memory stores: ``tasks/get``, ``tasks/list`` and ``tasks/cancel`` translated onto the Tasks
extension, ``tasks/result`` waiting for the outcome and relaying the task's questions as server→client
requests, and the shim's own tasks for calls answered inline.

How a stream relays questions (each once per session) is in ``test_question_relay.py``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from ext_tasks.auth import Caller
from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, LIMIT_EXCEEDED
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.replies import Reply
from migration.remote import UpstreamFailed
from migration.upstream import EngineUpstream, ModernCall
from tests.migration.shim_support import (
    ADA,
    ALICE,
    ANONYMOUS,
    BOB,
    NAME_SCHEMA,
    RELATED_TASK,
    Legacy,
    LegacyClient,
    json_of,
    next_item,
    rest_of,
    stream_of,
)

pytestmark = pytest.mark.anyio

NOT_FOUND = {"code": INVALID_PARAMS, "message": "Failed to retrieve task: Task not found"}
MODERN_ONLY = {"ttlMs", "pollIntervalMs", "result", "error", "inputRequests", "resultType"}


def related(task_id: str) -> dict[str, Any]:
    return {RELATED_TASK: {"taskId": task_id}}


async def waiting_result(client: LegacyClient, task_id: str, request_id: str) -> Reply:
    """``tasks/result`` of a task that is not finished, once the shim has read it (and is waiting)."""
    store = client.legacy.store
    reads = store.reads.get(task_id, 0)
    replies: list[Reply] = []

    async def wait() -> None:
        replies.append(await client.post("tasks/result", {"taskId": task_id}, request_id=request_id))

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        # Two reads: the listen that follows the task checks that it is the caller's, then the shim reads
        # the task itself (after that, it waits for a change).
        await store.wait_read(task_id, reads + 2)
        assert not replies  # still waiting for the task to end
        await client.legacy.worker.execute(task_id)
    return replies[0]


# --- tasks/get ------------------------------------------------------------------------------------------


async def test_tasks_get_reads_the_task_as_a_flat_legacy_task(legacy: Legacy) -> None:
    client = await legacy.initialize()
    started = time.monotonic()
    task_id = await client.start_task("job", {"n": 3}, ttl=120_000)

    working = await client.result("tasks/get", {"taskId": task_id})
    aged_ms = (time.monotonic() - started) * 1000
    await legacy.worker.execute(task_id)
    completed = await client.result("tasks/get", {"taskId": task_id})

    assert (working["taskId"], working["status"], working["pollInterval"]) == (task_id, "working", 50)
    # An unfinished task is told its grant counted from the read: its age so far plus the 120 s asked for.
    assert 120_000 <= working["ttl"] <= 120_000 + aged_ms + 1
    assert {"createdAt", "lastUpdatedAt"} <= working.keys()
    assert completed["status"] == "completed"
    assert not MODERN_ONLY & (working.keys() | completed.keys())


async def test_a_task_whose_tool_reported_an_error_reads_as_failed_with_the_error_text(legacy: Legacy) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("broken")
    await legacy.worker.execute(task_id)

    task = await client.result("tasks/get", {"taskId": task_id})

    assert (task["status"], task["statusMessage"]) == ("failed", "disk quota exceeded")
    assert (await legacy.modern("tasks/get", {"taskId": task_id}))["result"]["status"] == "completed"


async def test_a_task_of_another_principal_reads_exactly_like_an_unknown_one(legacy: Legacy) -> None:
    alices = await legacy.initialize(ALICE)
    bobs = await legacy.initialize(BOB)
    task_id = await alices.start_task("job")

    foreign = await bobs.call("tasks/get", {"taskId": task_id})
    unknown = await bobs.call("tasks/get", {"taskId": "no-such-task"})

    assert foreign["error"] == unknown["error"] == NOT_FOUND


# --- tasks/list -----------------------------------------------------------------------------------------


async def test_tasks_list_shows_the_tasks_the_caller_created_through_any_of_its_sessions(legacy: Legacy) -> None:
    first, second, bobs = await legacy.initialize(), await legacy.initialize(), await legacy.initialize(BOB)
    mine = {await first.start_task("job"), await second.start_task("job", {"n": 2})}
    theirs = await bobs.start_task("job")
    created = await legacy.modern("tools/call", {"name": "job", "arguments": {}})  # not through the shim

    listed = await first.result("tasks/list", {})

    assert {task["taskId"] for task in listed["tasks"]} == mine
    assert all(task["status"] == "working" and not MODERN_ONLY & task.keys() for task in listed["tasks"])
    assert "nextCursor" not in listed
    assert [task["taskId"] for task in (await bobs.result("tasks/list", {}))["tasks"]] == [theirs]
    assert created["result"]["taskId"] not in mine


async def test_anonymous_callers_list_only_the_tasks_of_their_own_session(legacy: Legacy) -> None:
    one, other = await legacy.initialize(ANONYMOUS), await legacy.initialize(ANONYMOUS)
    task_id = await one.start_task("job")

    assert [task["taskId"] for task in (await one.result("tasks/list", {}))["tasks"]] == [task_id]
    assert (await other.result("tasks/list", {}))["tasks"] == []


async def test_tasks_list_pages_with_a_signed_cursor_that_only_its_caller_can_use(legacy: Legacy) -> None:
    client, bobs = await legacy.initialize(), await legacy.initialize(BOB)
    created = {await client.start_task("job", {"n": n}) for n in range(51)}

    first = await client.result("tasks/list", {})
    second = await client.result("tasks/list", {"cursor": first["nextCursor"]})
    forged = await client.call("tasks/list", {"cursor": first["nextCursor"][:-2] + "xx"})
    borrowed = await bobs.call("tasks/list", {"cursor": first["nextCursor"]})

    assert len(first["tasks"]) == 50
    assert len(second["tasks"]) == 1 and "nextCursor" not in second
    assert {task["taskId"] for task in first["tasks"] + second["tasks"]} == created
    assert forged["error"] == borrowed["error"] == {"code": INVALID_PARAMS, "message": "Invalid params: invalid cursor"}


# --- tasks/cancel ---------------------------------------------------------------------------------------


async def test_a_cancelled_task_is_reported_cancelled_from_then_on_in_both_eras_and_never_runs(legacy: Legacy) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("job")

    cancelled = await client.result("tasks/cancel", {"taskId": task_id})

    assert (cancelled["taskId"], cancelled["status"]) == (task_id, "cancelled")
    assert (await client.result("tasks/get", {"taskId": task_id}))["status"] == "cancelled"
    assert (await legacy.modern("tasks/get", {"taskId": task_id}))["result"]["status"] == "cancelled"
    assert await legacy.worker.execute(task_id) is None


@pytest.mark.parametrize(("tool", "status"), [("job", "completed"), ("broken", "failed"), (None, "cancelled")])
async def test_cancelling_a_task_that_already_ended_is_refused_with_its_status(
    legacy: Legacy, tool: str | None, status: str
) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task(tool or "job")
    if tool is None:
        await client.result("tasks/cancel", {"taskId": task_id})
    else:
        await legacy.worker.execute(task_id)

    refused = await client.call("tasks/cancel", {"taskId": task_id})

    assert refused["error"] == {
        "code": INVALID_PARAMS,
        "message": f"Cannot cancel task: already in terminal status '{status}'",
    }


# --- tasks/result ---------------------------------------------------------------------------------------


async def test_tasks_result_waits_for_the_end_telling_the_status_then_answers_the_result_with_the_related_task(
    legacy: Legacy,
) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("job", {"n": 7})

    items = await rest_of(stream_of(await waiting_result(client, task_id, "r-1")))

    notification, final = items
    assert notification["method"] == "notifications/tasks/status"
    assert (notification["params"]["taskId"], notification["params"]["status"]) == (task_id, "completed")
    assert final == {
        "jsonrpc": "2.0",
        "id": "r-1",
        "result": {"content": [{"type": "text", "text": "job 7"}], "isError": False, "_meta": related(task_id)},
    }


class _NoListen(EngineUpstream):
    """An upstream that cannot listen (an older server, or a proxy's upstream that breaks it off)."""

    async def send(self, call: ModernCall, caller: Caller) -> AsyncIterator[dict[str, Any]]:
        if call.method == "subscriptions/listen":
            raise UpstreamFailed("no subscriptions/listen here")
        async for message in super().send(call, caller):
            yield message


async def test_tasks_result_reads_the_task_every_poll_interval_when_it_cannot_follow_it() -> None:
    legacy = Legacy(upstream=_NoListen)
    try:
        client = await legacy.initialize()
        task_id = await client.start_task("job", {"n": 5})
        reads = legacy.store.reads.get(task_id, 0)
        replies: list[Reply] = []

        async def wait() -> None:
            replies.append(await client.post("tasks/result", {"taskId": task_id}, request_id="r-5"))

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await legacy.store.wait_read(task_id, reads + 3)  # read, then read again on the 50 ms poll
            assert not replies
            await legacy.worker.execute(task_id)

        final = (await rest_of(stream_of(replies[0])))[-1]
        assert final["result"]["content"] == [{"type": "text", "text": "job 5"}]
    finally:
        await legacy.close()


async def test_tasks_result_relays_the_tasks_question_and_the_answer_reaches_the_task(legacy: Legacy) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("interview")
    await legacy.worker.execute(task_id)
    items = stream_of(await client.post("tasks/result", {"taskId": task_id}, request_id="r-2"))

    asked = await next_item(items)
    await client.respond(asked["id"], ADA)
    rest: list[dict[str, Any]] = []

    async def read() -> None:
        rest.extend(await rest_of(items))

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        await legacy.store.wait_for(task_id, TaskStatus.WORKING)  # the answer went in as tasks/update
        await legacy.worker.execute(task_id)

    assert asked["method"] == "elicitation/create"
    assert asked["params"] == {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": NAME_SCHEMA,
        "_meta": related(task_id),
    }
    statuses = [
        message["params"]["status"] for message in rest if message.get("method") == "notifications/tasks/status"
    ]
    assert statuses[-1] == "completed"
    assert rest[-1]["id"] == "r-2"
    assert rest[-1]["result"]["content"] == [{"type": "text", "text": "Interviewed Ada"}]
    assert rest[-1]["result"]["_meta"] == related(task_id)


async def test_a_refused_sampling_question_cancels_the_task(legacy: Legacy) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("sampled_task")
    await legacy.worker.execute(task_id)
    items = stream_of(await client.post("tasks/result", {"taskId": task_id}, request_id="r-3"))

    asked = await next_item(items)
    await client.respond(asked["id"], error={"code": -1, "message": "no model here"})
    rest = await rest_of(items)

    assert asked["method"] == "sampling/createMessage"
    assert rest[-1] == {
        "jsonrpc": "2.0",
        "id": "r-3",
        "error": {"code": INTERNAL_ERROR, "message": "Task was cancelled"},
    }
    assert (await legacy.modern("tasks/get", {"taskId": task_id}))["result"]["status"] == "cancelled"


async def test_an_answer_the_task_refuses_cancels_it_instead_of_leaving_it_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An answer larger than a task keeps cannot be taken, and a 2025-11-25 client cannot be told so: the
    task is cancelled (logged) rather than left waiting for an answer that was already given."""
    legacy = Legacy(max_answer_bytes=1024)
    try:
        client = await legacy.initialize()
        task_id = await client.start_task("interview")
        await legacy.worker.execute(task_id)
        items = stream_of(await client.post("tasks/result", {"taskId": task_id}, request_id="r-4"))

        asked = await next_item(items)
        await client.respond(asked["id"], {"action": "accept", "content": {"name": "A" * 2000}})
        rest = await rest_of(items)

        assert rest[-1] == {
            "jsonrpc": "2.0",
            "id": "r-4",
            "error": {"code": INTERNAL_ERROR, "message": "Task was cancelled"},
        }
        assert (await legacy.modern("tasks/get", {"taskId": task_id}))["result"]["status"] == "cancelled"
        assert any(
            "answer to task" in record.getMessage() and str(INVALID_PARAMS) in record.getMessage()
            for record in caplog.records
        )
    finally:
        await legacy.close()


async def test_tasks_result_of_a_failed_task_answers_its_error(legacy: Legacy) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("limited")
    await legacy.worker.execute(task_id)

    answered = await client.call("tasks/result", {"taskId": task_id})

    assert answered["error"]["code"] == INTERNAL_ERROR
    assert answered["error"]["message"] == "rate limited upstream"


async def test_tasks_result_of_a_task_the_legacy_client_cancelled_is_an_error(legacy: Legacy) -> None:
    client = await legacy.initialize()
    task_id = await client.start_task("job")
    await client.result("tasks/cancel", {"taskId": task_id})

    answered = await client.call("tasks/result", {"taskId": task_id})

    assert answered["error"] == {"code": INTERNAL_ERROR, "message": "Task was cancelled"}


async def test_a_waiting_tasks_result_holds_one_of_the_callers_waits_until_it_ends() -> None:
    legacy = Legacy(max_waits=1)
    try:
        client = await legacy.initialize()
        task_id = await client.start_task("job")
        async with anyio.create_task_group() as group:
            group.start_soon(client.post, "tasks/result", {"taskId": task_id})
            await legacy.store.wait_read(task_id, legacy.store.reads.get(task_id, 0) + 1)

            status, refused = json_of(await client.post("tasks/result", {"taskId": task_id}))
            group.cancel_scope.cancel()

        assert status == 429
        assert (refused["error"]["code"], refused["error"]["data"]["limit"]) == (LIMIT_EXCEEDED, "max_waits")
        assert legacy.engine.waits.open("alice") == 0
    finally:
        await legacy.close()


async def test_a_task_call_past_the_callers_cap_answers_429_with_retry_after() -> None:
    legacy = Legacy(max_active_tasks=1)
    try:
        client = await legacy.initialize()
        await client.start_task("job")

        reply = await client.post("tools/call", {"name": "job", "arguments": {}, "task": {}})

        status, refused = json_of(reply)
        assert status == 429 and reply.headers.get("Retry-After", "").isdigit(), reply
        assert (refused["error"]["code"], refused["error"]["data"]["limit"]) == (LIMIT_EXCEEDED, "max_active_tasks")
    finally:
        await legacy.close()


# --- calls answered inline despite params.task ------------------------------------------------------------


async def test_a_call_answered_inline_despite_params_task_becomes_a_completed_task_of_the_shims_own(
    legacy: Legacy,
) -> None:
    client, bobs = await legacy.initialize(), await legacy.initialize(BOB)

    created = await client.result("tools/call", {"name": "quick", "arguments": {}, "task": {"ttl": 90_000}})
    task_id = created["task"]["taskId"]

    assert (created["task"]["status"], created["task"]["ttl"]) == ("working", 90_000)  # legacy tasks start working
    assert (await client.result("tasks/get", {"taskId": task_id}))["status"] == "completed"
    assert await client.result("tasks/result", {"taskId": task_id}) == {
        "content": [{"type": "text", "text": "quick answer"}],
        "isError": False,
        "_meta": related(task_id),
    }
    assert [task["taskId"] for task in (await client.result("tasks/list", {}))["tasks"]] == [task_id]
    assert (await client.call("tasks/cancel", {"taskId": task_id}))["error"]["code"] == INVALID_PARAMS
    assert (await bobs.call("tasks/get", {"taskId": task_id}))["error"] == NOT_FOUND
