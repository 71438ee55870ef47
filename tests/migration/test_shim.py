"""The 2025-11-25 front end (``migration.shim``) in process, over the real engine and the memory stores,
reached through the era router as ``ext-tasks serve`` composes it: ``initialize`` and sessions, the small
session methods, calls translated to the modern engine (``migration.legacy_calls``: input relayed as
real server→client requests, task-augmented calls), and the errors each era gets for the same mistakes.

The task methods (``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel``) are in
``test_legacy_tasks.py``; the pure translation tables in ``test_translate.py``.
"""

from __future__ import annotations

import time

import pytest

from ext_tasks.protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
)
from ext_tasks.replies import JsonReply
from tests.migration.shim_support import (
    ADA,
    ALICE,
    BOB,
    LEGACY_VERSION,
    MODERN_VERSION,
    NAME_SCHEMA,
    Legacy,
    json_of,
    next_item,
    rest_of,
    stream_of,
)

pytestmark = pytest.mark.anyio

MODERN_ONLY = {"resultType", "ttlMs", "cacheScope"}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


# --- initialize and sessions ----------------------------------------------------------------------------


async def test_initialize_opens_a_session_kept_in_the_store_and_answers_in_the_legacy_shape(legacy: Legacy) -> None:
    client = await legacy.initialize(capabilities={"elicitation": {}, "roots": {"listChanged": True}})

    assert client.initialized == {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
            "logging": {},
            "completions": {},
            "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}, "list": {}},
        },
        "serverInfo": {"name": "shim-test", "version": "2.0.0"},
        "instructions": "Tools for the shim tests.",
    }
    session = await legacy.sessions.load(client.session_id)
    assert session is not None
    assert (session.principal, session.protocol_version) == ("alice", LEGACY_VERSION)
    assert session.capabilities == {"elicitation": {}, "roots": {"listChanged": True}}


async def test_a_request_without_a_session_is_400_and_one_with_an_unknown_session_404(legacy: Legacy) -> None:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}

    missing = json_of(await legacy.post(body, {"MCP-Protocol-Version": LEGACY_VERSION}, ALICE))
    unknown = json_of(await legacy.post(body, {"Mcp-Session-Id": "no-such-session"}, ALICE))

    assert (missing[0], missing[1]["id"], missing[1]["error"]["code"]) == (400, 3, INVALID_REQUEST)
    assert unknown[0] == 404
    assert unknown[1]["error"] == {"code": INVALID_REQUEST, "message": "Session not found: initialize a new session"}


async def test_a_session_of_another_principal_answers_exactly_like_an_unknown_one(legacy: Legacy) -> None:
    alices = await legacy.initialize(ALICE)
    body = {"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {}}

    borrowed = await legacy.post(body, alices.headers, BOB)
    unknown = await legacy.post(body, {**alices.headers, "Mcp-Session-Id": "no-such-session"}, BOB)

    assert borrowed == unknown
    assert json_of(borrowed)[0] == 404


async def test_delete_ends_the_session(legacy: Legacy) -> None:
    client = await legacy.initialize()
    assert (await client.result("ping", {})) == {}

    deleted = await client.delete()

    assert deleted == JsonReply(204, None)
    assert json_of(await client.post("ping", {}))[0] == 404


# --- the session's own methods --------------------------------------------------------------------------


async def test_set_level_is_kept_by_the_session_and_an_unknown_level_is_invalid_params(legacy: Legacy) -> None:
    client = await legacy.initialize()

    assert await client.result("logging/setLevel", {"level": "warning"}) == {}
    refused = await client.call("logging/setLevel", {"level": "loud"})

    session = await legacy.sessions.load(client.session_id)
    assert session is not None and session.log_level == "warning"
    assert refused["error"]["code"] == INVALID_PARAMS


async def test_after_set_level_a_tools_logs_reach_the_client_before_its_result(legacy: Legacy) -> None:
    client = await legacy.initialize()
    quiet = await client.result("tools/call", {"name": "chatty", "arguments": {}})
    await client.result("logging/setLevel", {"level": "info"})

    items = await rest_of(stream_of(await client.post("tools/call", {"name": "chatty", "arguments": {}}, request_id=8)))

    assert quiet["content"] == [{"type": "text", "text": "done"}]
    assert items == [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working on it"}},
        {"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "done"}], "isError": False}},
    ]


async def test_resource_subscriptions_are_kept_by_the_session(legacy: Legacy) -> None:
    client = await legacy.initialize()

    for uri in ("file:///a", "file:///b", "file:///a"):
        assert await client.result("resources/subscribe", {"uri": uri}) == {}
    assert await client.result("resources/unsubscribe", {"uri": "file:///a"}) == {}
    assert await client.result("resources/unsubscribe", {"uri": "file:///never"}) == {}
    refused = await client.call("resources/subscribe", {"uri": ""})

    session = await legacy.sessions.load(client.session_id)
    assert session is not None and session.subscriptions == ["file:///b"]
    assert refused["error"]["code"] == INVALID_PARAMS


# --- calls, translated to the engine ----------------------------------------------------------------------


async def test_tools_list_says_each_tools_task_support_and_nothing_only_the_modern_era_has(legacy: Legacy) -> None:
    client = await legacy.initialize()

    listed = await client.result("tools/list", {})

    support = {tool["name"]: tool["execution"]["taskSupport"] for tool in listed["tools"]}
    assert (support["add"], support["job"], support["required_job"]) == ("forbidden", "optional", "required")
    assert not MODERN_ONLY & listed.keys()
    assert SERVER_INFO not in listed.get("_meta", {})


async def test_a_plain_tool_call_answers_a_legacy_result(legacy: Legacy) -> None:
    client = await legacy.initialize()

    found = await client.result("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})

    assert found == {"content": [{"type": "text", "text": "3"}], "isError": False}


async def test_a_tool_asking_for_input_relays_a_real_elicitation_request_and_the_answer_completes_the_call(
    legacy: Legacy,
) -> None:
    client = await legacy.initialize()
    items = stream_of(await client.post("tools/call", {"name": "greet", "arguments": {}}, request_id="call-1"))

    asked = await next_item(items)
    await client.respond(asked["id"], ADA)
    final = await rest_of(items)

    assert asked["method"] == "elicitation/create"
    assert asked["params"] == {"mode": "form", "message": "Your name?", "requestedSchema": NAME_SCHEMA}
    assert final == [
        {
            "jsonrpc": "2.0",
            "id": "call-1",
            "result": {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": False},
        }
    ]


async def test_an_elicitation_the_client_answers_with_an_error_counts_as_cancelled(legacy: Legacy) -> None:
    client = await legacy.initialize()
    items = stream_of(await client.post("tools/call", {"name": "greet", "arguments": {}}))

    asked = await next_item(items)
    await client.respond(asked["id"], error={"code": -1, "message": "user closed the dialog"})
    final = await rest_of(items)

    assert [message["result"]["content"][0]["text"] for message in final] == ["No name given."]


async def test_a_refused_sampling_request_fails_the_call(legacy: Legacy) -> None:
    client = await legacy.initialize()
    items = stream_of(await client.post("tools/call", {"name": "haiku", "arguments": {}}, request_id=5))

    asked = await next_item(items)
    await client.respond(asked["id"], error={"code": -1, "message": "no model"})
    final = await rest_of(items)

    assert asked["method"] == "sampling/createMessage"
    assert final == [
        {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {"code": INVALID_REQUEST, "message": "The client refused the sampling/createMessage request"},
        }
    ]


async def test_an_answer_from_another_session_does_not_reach_the_call(legacy: Legacy) -> None:
    client, other = await legacy.initialize(), await legacy.initialize()
    items = stream_of(await client.post("tools/call", {"name": "greet", "arguments": {}}))
    asked = await next_item(items)

    await other.respond(asked["id"], {"action": "accept", "content": {"name": "Mallory"}})
    await client.respond(asked["id"], ADA)

    assert [message["result"]["content"][0]["text"] for message in await rest_of(items)] == ["Hello, Ada!"]


# --- task-augmented calls -------------------------------------------------------------------------------


async def test_a_task_augmented_call_creates_a_task_reported_working_with_the_requested_ttl(legacy: Legacy) -> None:
    client = await legacy.initialize()

    started = time.monotonic()
    created = await client.result("tools/call", {"name": "job", "arguments": {"n": 2}, "task": {"ttl": 60_000}})

    task = created["task"]
    assert (task["status"], task["ttl"], task["pollInterval"]) == ("working", 60_000, 50)
    assert {"taskId", "createdAt", "lastUpdatedAt"} <= task.keys()
    seen = (await legacy.modern("tasks/get", {"taskId": task["taskId"]}))["result"]
    elapsed_ms = (time.monotonic() - started) * 1000
    assert seen["status"] == "working"  # the same task, in the same store
    # A working task is promised its grant counted from the read, so the ttl grows by the time between.
    assert 60_000 <= seen["ttlMs"] <= 60_000 + elapsed_ms + 1


async def test_a_tool_that_forbids_tasks_refuses_augmentation_and_one_that_requires_them_refuses_a_plain_call(
    legacy: Legacy,
) -> None:
    client = await legacy.initialize()

    forbidden = await client.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}, "task": {}})
    required = await client.call("tools/call", {"name": "required_job", "arguments": {}})

    assert forbidden["error"] == {
        "code": METHOD_NOT_FOUND,
        "message": "Tool 'add' does not support task-augmented calls",
    }
    assert required["error"] == {
        "code": METHOD_NOT_FOUND,
        "message": "Task augmentation required for tools/call requests",
    }


# --- each era its own errors ----------------------------------------------------------------------------


async def test_a_method_neither_era_has_is_not_found_with_the_http_status_of_each_era(legacy: Legacy) -> None:
    client = await legacy.initialize()

    old = json_of(await client.post("no/such/method", {}))
    new = json_of(await legacy.modern_reply("no/such/method"))

    assert (old[0], old[1]["error"]["code"]) == (200, METHOD_NOT_FOUND)
    assert (new[0], new[1]["error"]["code"]) == (404, METHOD_NOT_FOUND)


async def test_a_capability_the_client_did_not_declare_is_an_invalid_request_for_legacy_and_minus_32021_for_modern(
    legacy: Legacy,
) -> None:
    client = await legacy.initialize(capabilities={})

    old = await client.call("tools/call", {"name": "greet", "arguments": {}})
    new_status, new = json_of(await legacy.modern_reply("tools/call", {"name": "greet", "arguments": {}}))

    assert old["error"] == {
        "code": INVALID_REQUEST,
        "message": "The client did not declare a capability this request needs: elicitation",
    }
    assert (new_status, new["error"]["code"]) == (400, MISSING_REQUIRED_CLIENT_CAPABILITY)


async def test_an_undecodable_body_is_answered_the_same_in_both_eras(legacy: Legacy) -> None:
    client = await legacy.initialize()

    answers = [
        json_of(await legacy.post(b"{not json", headers, ALICE))
        for headers in ({}, client.headers, {"MCP-Protocol-Version": MODERN_VERSION})
    ]

    assert answers[0][0] == 400
    assert answers[0][1]["id"] is None and answers[0][1]["error"]["code"] == PARSE_ERROR
    assert answers[1] == answers[0] == answers[2]


async def test_a_modern_request_with_a_stray_session_header_is_served_by_the_engine(legacy: Legacy) -> None:
    client = await legacy.initialize()

    status, message = json_of(await legacy.modern_reply("tasks/list", headers=client.headers))

    # tasks/list is a legacy method: the modern path does not know it, whatever session header comes along.
    assert (status, message["error"]["code"]) == (404, METHOD_NOT_FOUND)
    status, listed = json_of(await legacy.modern_reply("tools/list", headers=client.headers))
    assert (status, listed["result"]["resultType"]) == (200, "complete")
