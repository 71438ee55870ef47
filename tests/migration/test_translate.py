"""The era translation as tables: (2026-07-28 shape, expected 2025-11-25 shape) and era routing."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, LIMIT_EXCEEDED
from ext_tasks.protocol.result_types import CreateTaskResult, DetailedTask, ErrorObject
from migration.router import classify
from migration.translate import (
    answer_from_legacy_response,
    legacy_create_task_result,
    legacy_error,
    legacy_input_request,
    legacy_result,
    legacy_status,
    legacy_task,
    legacy_tools,
    modern_capabilities,
    negotiate_version,
    task_outcome,
)
from tests.migration.shim_support import MODERN_TASK as TASK

RELATED = "io.modelcontextprotocol/related-task"


def typed(task: dict[str, Any]) -> DetailedTask:
    """A modern task as the shim reads it: the engine's typed ``DetailedTask``."""
    return msgspec.convert(task, DetailedTask)


def wire(value: msgspec.Struct) -> dict[str, Any]:
    """What the legacy client receives."""
    converted: dict[str, Any] = msgspec.to_builtins(value)
    return converted


@pytest.mark.parametrize(
    ("modern", "legacy"),
    [
        (
            TASK,
            {
                **{k: v for k, v in TASK.items() if k not in ("ttlMs", "pollIntervalMs")},
                "ttl": 60_000,
                "pollInterval": 250,
            },
        ),
        ({**TASK, "ttlMs": None}, {"ttl": None}),
        ({**TASK, "statusMessage": "halfway"}, {"statusMessage": "halfway"}),
        ({**TASK, "status": "input_required", "inputRequests": {"k": {}}}, {"status": "input_required"}),
        ({**TASK, "status": "completed", "result": {"content": [], "isError": False}}, {"status": "completed"}),
        ({**TASK, "status": "completed", "result": {"content": [], "isError": True}}, {"status": "failed"}),
        (
            {
                **TASK,
                "status": "completed",
                "statusMessage": "working hard",
                "result": {"content": [{"type": "text", "text": "disk full"}], "isError": True},
            },
            {"status": "failed", "statusMessage": "disk full"},
        ),
        ({**TASK, "status": "failed", "error": {"code": INTERNAL_ERROR, "message": "x"}}, {"status": "failed"}),
        ({**TASK, "status": "cancelled"}, {"status": "cancelled"}),
    ],
)
def test_a_modern_task_reads_as_a_flat_legacy_task(modern: dict[str, Any], legacy: dict[str, Any]) -> None:
    translated = wire(legacy_task(typed(modern)))
    assert translated.items() >= legacy.items()
    # Never the modern names, nor what only DetailedTask carries.
    assert not {"ttlMs", "pollIntervalMs", "result", "error", "inputRequests", "resultType"} & translated.keys()


@pytest.mark.parametrize("status", ["working", "completed", "failed"])
def test_once_cancelled_by_a_legacy_client_a_task_stays_cancelled(status: str) -> None:
    assert legacy_status(typed({**TASK, "status": status}), cancelled_by_legacy=True) == "cancelled"


def test_create_task_result_is_nested_and_starts_working() -> None:
    created = msgspec.convert({"resultType": "task", **TASK, "status": "input_required"}, CreateTaskResult)
    assert wire(legacy_create_task_result(created)) == {"task": {**wire(legacy_task(typed(TASK))), "status": "working"}}


@pytest.mark.parametrize(
    ("task", "outcome"),
    [
        (
            {**TASK, "status": "completed", "result": {"resultType": "complete", "content": [], "isError": True}},
            ("result", {"content": [], "isError": True, "_meta": {RELATED: {"taskId": "t1"}}}),
        ),
        (
            {**TASK, "status": "failed", "error": {"code": INTERNAL_ERROR, "message": "rate limited"}},
            ("error", {"code": INTERNAL_ERROR, "message": "rate limited"}),
        ),
        ({**TASK, "status": "cancelled"}, ("error", {"code": INTERNAL_ERROR, "message": "Task was cancelled"})),
    ],
)
def test_tasks_result_answers_what_the_call_would_have(task: dict[str, Any], outcome: tuple[str, Any]) -> None:
    assert task_outcome(typed(task)) == outcome


@pytest.mark.parametrize(
    ("modern", "legacy"),
    [
        ({"resultType": "complete", "tools": []}, {"tools": []}),
        ({"resultType": "complete", "ttlMs": 5, "cacheScope": "public", "prompts": []}, {"prompts": []}),
        (
            {"resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}}, "x": 1},
            {"x": 1},
        ),
        ({"_meta": {"io.modelcontextprotocol/serverInfo": {}, "mine": 1}}, {"_meta": {"mine": 1}}),
    ],
)
def test_modern_only_result_fields_are_dropped(modern: dict[str, Any], legacy: dict[str, Any]) -> None:
    assert legacy_result(modern) == legacy


def test_legacy_tools_list_carries_task_support_from_the_policy() -> None:
    tools = [{"name": "a", "inputSchema": {}}, {"name": "b", "inputSchema": {}}]
    assert legacy_tools(tools, {"a": "required"}) == [
        {"name": "a", "inputSchema": {}, "execution": {"taskSupport": "required"}},
        {"name": "b", "inputSchema": {}},
    ]


@pytest.mark.parametrize(
    ("legacy", "tasks", "modern"),
    [
        ({}, False, {}),
        (
            {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}},
            False,
            {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}},
        ),
        (
            {"tasks": {"list": {}}, "elicitation": {}},
            True,
            {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
        ),
        ({"elicitation": True}, False, {}),
    ],
)
def test_client_capabilities_carry_over_except_legacy_tasks(
    legacy: dict[str, Any], tasks: bool, modern: dict[str, Any]
) -> None:
    assert modern_capabilities(legacy, tasks=tasks) == modern


@pytest.mark.parametrize(
    ("requested", "spoken"),
    [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2024-01-01", "2025-11-25"), (None, "2025-11-25")],
)
def test_version_negotiation(requested: object, spoken: str) -> None:
    assert negotiate_version(requested) == spoken


def test_a_relayed_input_request_in_a_task_carries_the_related_task() -> None:
    entry = {"method": "elicitation/create", "params": {"message": "ok?", "requestedSchema": {}}}
    method, params = legacy_input_request(entry, "confirm", "t1")
    assert method == "elicitation/create"
    assert params["_meta"] == {RELATED: {"taskId": "t1"}}


def test_a_relayed_url_elicitation_gets_the_elicitation_id_2025_11_25_requires() -> None:
    entry = {"method": "elicitation/create", "params": {"mode": "url", "message": "log in", "url": "https://x"}}
    _, params = legacy_input_request(entry, "login", None)
    assert params["elicitationId"] == "mrtr:login"
    assert "_meta" not in params


@pytest.mark.parametrize(
    ("method", "response", "answer"),
    [
        (
            "elicitation/create",
            {"id": 1, "result": {"action": "accept", "content": {}}},
            {"action": "accept", "content": {}},
        ),
        ("elicitation/create", {"id": 1, "error": {"code": -1, "message": "no"}}, {"action": "cancel"}),
        ("sampling/createMessage", {"id": 1, "error": {"code": -1, "message": "no"}}, None),
        ("roots/list", {"id": 1, "result": {"roots": []}}, {"roots": []}),
    ],
)
def test_a_client_response_becomes_an_input_response(
    method: str, response: dict[str, Any], answer: dict[str, Any] | None
) -> None:
    assert answer_from_legacy_response(method, response) == answer


@pytest.mark.parametrize(
    ("headers", "body", "era"),
    [
        ({"mcp-protocol-version": ["2026-07-28"]}, b'{"jsonrpc":"2.0","id":1,"method":"initialize"}', "modern"),
        ({}, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}', "legacy"),
        (
            {},
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
            b'{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}',
            "modern",
        ),
        ({"mcp-session-id": ["s"], "mcp-protocol-version": ["2026-07-28"]}, b"{}", "modern"),
        ({"mcp-session-id": ["s"], "mcp-protocol-version": ["2025-11-25"]}, b"{}", "legacy"),
        ({"mcp-session-id": ["s"]}, b'{"jsonrpc":"2.0","id":1,"method":"ping"}', "legacy"),
        ({"mcp-protocol-version": ["2025-11-25"]}, b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "legacy"),
        ({"mcp-protocol-version": ["v999.0.0"]}, b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "modern"),
        ({}, b'{"jsonrpc":"2.0","id":"srv-1","result":{}}', "legacy"),
        ({}, b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "legacy"),
        ({}, b"not json", "legacy"),
        ({"mcp-protocol-version": ["v9"]}, b"not json", "modern"),
    ],
)
def test_era_routing(headers: dict[str, list[str]], body: bytes, era: str) -> None:
    assert classify(headers, body) == era


@pytest.mark.parametrize(
    ("modern", "status", "headers", "code"),
    [
        # "Retry later" keeps its HTTP status and Retry-After: a limit ...
        (
            {
                "code": LIMIT_EXCEEDED,
                "message": "Too many",
                "data": {"limit": "max_active_tasks", "retryAfterSeconds": 5},
            },
            429,
            {"Retry-After": "5"},
            LIMIT_EXCEEDED,
        ),
        # ... and the store (the engine's 503), told apart from a plain internal error by its data.
        (
            {
                "code": INTERNAL_ERROR,
                "message": "Task store unavailable; retry later",
                "data": {"retryAfterSeconds": 1},
            },
            503,
            {"Retry-After": "1"},
            INTERNAL_ERROR,
        ),
        (
            {"code": INTERNAL_ERROR, "message": "Internal error"},
            200,
            {},
            INTERNAL_ERROR,
        ),  # relayed in the body, as in 2025-11-25
        ({"code": INVALID_PARAMS, "message": "Task not found"}, 200, {}, INVALID_PARAMS),
        ({"code": LIMIT_EXCEEDED, "message": "odd", "data": {"retryAfterSeconds": "soon"}}, 200, {}, LIMIT_EXCEEDED),
    ],
)
def test_upstream_errors_keep_their_retry_later(
    modern: dict[str, Any], status: int, headers: dict[str, str], code: int
) -> None:
    error = legacy_error(msgspec.convert(modern, ErrorObject))

    assert (error.http_status, error.http_headers(), error.to_error()["code"]) == (status, headers, code)
    assert error.to_error()["message"] == modern["message"]
