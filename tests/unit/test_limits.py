"""Limits that keep callers apart and the server healthy: active tasks per principal, single-use
requestState, and polling faster than the advertised interval."""

from __future__ import annotations

from typing import Any

import pytest

from ext_tasks import Context, ToolRegistry
from ext_tasks.auth import Principal
from ext_tasks.engine import Engine
from ext_tasks.metrics import REGISTRY
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.errors import INVALID_PARAMS, LIMIT_EXCEEDED
from ext_tasks.protocol.jsonrpc import encode
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods

pytestmark = pytest.mark.anyio

CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
ALICE, BOB = Principal("alice"), Principal("bob")


class Clock:
    def __init__(self) -> None:
        self.now_ms = 5_000_000

    def __call__(self) -> int:
        return self.now_ms


def build(clock: Clock, **options: Any) -> tuple[Engine, MemoryTaskStore]:
    registry = ToolRegistry("limits")

    @registry.tool(task="required")
    async def job() -> str:
        return "done"

    @registry.tool()
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("w", "word?", {"type": "object", "properties": {"w": {"type": "string"}}})
        return str((answer.content or {}).get("w"))

    store = MemoryTaskStore(clock_ms=clock)
    tasks = TaskMethods(store, TaskOptions(**options), clock_ms=clock)
    return Engine(registry, ResumeCodec([b"s" * 32], audience="limits"), tasks=tasks), store


async def call(engine: Engine, method: str, params: dict[str, Any], principal: Principal = ALICE) -> JsonReply:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": CAPS}
    headers = {"mcp-protocol-version": ["2026-07-28"], "mcp-method": [method]}
    name = params.get("name") or params.get("taskId")
    if name is not None:
        headers["mcp-name"] = [name]
    body = encode({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta, **params}})
    reply = await engine.handle(body, headers, principal)
    assert isinstance(reply, JsonReply)
    return reply


async def test_a_principal_past_its_active_task_cap_is_told_clearly_and_others_are_not() -> None:
    engine, _ = build(Clock(), max_active_tasks=2)
    for _ in range(2):
        assert "result" in (await call(engine, "tools/call", {"name": "job", "arguments": {}})).message  # type: ignore[operator]
    refused = await call(engine, "tools/call", {"name": "job", "arguments": {}})
    assert refused.status == 429
    assert refused.message is not None
    assert refused.wire["error"]["code"] == LIMIT_EXCEEDED  # application-defined: "retry later", not "malformed"
    assert "limit is 2" in refused.wire["error"]["message"]
    assert "result" in (await call(engine, "tools/call", {"name": "job", "arguments": {}}, BOB)).message  # type: ignore[operator]


async def test_a_single_use_state_cannot_be_replayed() -> None:
    engine, store = build(Clock())
    engine.core.claim_once = store.claim
    first = (await call(engine, "tools/call", {"name": "ask", "arguments": {}})).wire
    assert first is not None
    state = first["result"]["requestState"]
    retry = {
        "name": "ask",
        "arguments": {},
        "requestState": state,
        "inputResponses": {"w": {"action": "accept", "content": {"w": "hi"}}},
    }
    done = (await call(engine, "tools/call", retry)).wire
    assert done is not None and done["result"]["content"][0]["text"] == "hi"
    replayed = (await call(engine, "tools/call", retry)).wire
    assert replayed is not None
    assert replayed["error"] == {
        "code": INVALID_PARAMS,
        "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"},
    }
    assert REGISTRY.get_sample_value("ext_tasks_request_state_rejections_total", {"reason": "replayed"}) >= 1  # type: ignore[operator]


async def test_without_single_use_a_state_may_be_retried() -> None:
    engine, _ = build(Clock())
    first = (await call(engine, "tools/call", {"name": "ask", "arguments": {}})).wire
    assert first is not None
    retry = {
        "name": "ask",
        "arguments": {},
        "requestState": first["result"]["requestState"],
        "inputResponses": {"w": {"action": "accept", "content": {"w": "hi"}}},
    }
    for _ in range(2):
        again = (await call(engine, "tools/call", retry)).wire
        assert again is not None and "result" in again


async def test_polling_faster_than_half_the_interval_is_refused_when_limited() -> None:
    clock = Clock()
    engine, _ = build(clock, poll_rate_limit=True, poll_interval_ms=1_000, poll_interval_max_ms=1_000)
    created = (await call(engine, "tools/call", {"name": "job", "arguments": {}})).wire
    assert created is not None
    task_id = created["result"]["taskId"]
    assert (await call(engine, "tasks/get", {"taskId": task_id})).status == 200
    clock.now_ms += 400
    too_soon = await call(engine, "tasks/get", {"taskId": task_id})
    assert too_soon.status == 429
    assert too_soon.message is not None and "pollIntervalMs (1000 ms)" in too_soon.wire["error"]["message"]
    clock.now_ms += 200  # 600 ms after the first poll: more than half the interval
    assert (await call(engine, "tasks/get", {"taskId": task_id})).status == 200
    # Another principal polling the same id is not slowed by alice (and sees "not found" anyway).
    assert (await call(engine, "tasks/get", {"taskId": task_id}, BOB)).status != 429
