"""What one task may keep, through the engine and a worker: its arguments, its answers, the client's
capabilities and its status message are bounded, and so is the total a principal's tasks keep. Each
bound at its edge: exactly at it is kept, one byte more is refused before anything is stored.

In process, on the memory store with a hand-moved clock; the same byte budget on Valkey and a cluster is
in ``tests/contract/test_byte_budget.py``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from ext_tasks import Context, Principal, ToolRegistry, elicit
from ext_tasks.engine import Engine
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, LIMIT_EXCEEDED, InternalError
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import MAX_STATUS_CHARS, TaskRecord, encoded_size, stored_bytes
from ext_tasks.replies import JsonReply, StreamReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from tests.support.mcp_http import modern_request

pytestmark = pytest.mark.anyio

TASKS = "io.modelcontextprotocol/tasks"
DECLARING: dict[str, Any] = {"extensions": {TASKS: {}}, "elicitation": {}}
ALICE, BOB = Principal("alice"), Principal("bob")
KEY = b"task-sizes-test-key".ljust(32, b"!")
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}}
MIB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


def tools() -> ToolRegistry:
    registry = ToolRegistry("task-sizes", version="1.0.0")

    @registry.tool(task="optional")
    async def keep(blob: str = "") -> str:
        return f"kept {len(blob)}"

    @registry.tool(task="optional", preflight=True)
    async def prepare(ctx: Context, blob: str = "") -> str:
        await ctx.start_task()
        return f"prepared {len(blob)}"

    @registry.tool(task="required")
    async def interview(ctx: Context) -> str:
        answers = ctx.ask({"a": elicit("A?", TEXT), "b": elicit("B?", TEXT)})
        return "+".join(str((answer.content or {}).get("text", ""))[:3] for answer in answers.values())

    @registry.tool(task="required")
    async def chatty(ctx: Context, size: int) -> str:
        await ctx.set_status("s" * size)
        return "said"

    @registry.tool(task="required")
    async def breaks(size: int) -> str:
        raise InternalError("e" * size, data={"trace": "t" * size})

    @registry.tool(task="required")
    async def checks(ctx: Context) -> str:
        return "ui" if ctx.supports({"extensions": {"io.example/ui": {}}}) else "no ui"

    return registry


class Served:
    def __init__(self, **options: Any) -> None:
        self.clock = Clock()
        self.store = MemoryTaskStore(clock_ms=self.clock)
        tasks = TaskMethods(self.store, TaskOptions(**options), clock_ms=self.clock)
        self.engine = Engine(tools(), ResumeCodec([KEY], audience="task-sizes"), tasks=tasks)
        self.worker = Worker(self.store, self.engine.registry, clock_ms=self.clock)

    async def send(
        self,
        method: str,
        params: dict[str, Any],
        principal: Principal = ALICE,
        capabilities: dict[str, Any] | None = None,
    ) -> JsonReply:
        headers, body = modern_request(method, params, capabilities=capabilities or DECLARING)
        lowered = {name.lower(): [value] for name, value in headers.items()}
        with anyio.fail_after(10):
            reply = await self.engine.handle(json.dumps(body).encode(), lowered, principal)
        assert isinstance(reply, JsonReply) and not isinstance(reply, StreamReply) and reply.message is not None
        return reply

    async def start(self, tool: str, arguments: dict[str, Any], **kwargs: Any) -> JsonReply:
        return await self.send("tools/call", {"name": tool, "arguments": arguments}, **kwargs)

    async def record(self, task_id: str) -> TaskRecord:
        found = await self.store.lookup(task_id)
        assert isinstance(found, TaskRecord)
        return found


def blob_of(encoded: int) -> dict[str, str]:
    """Arguments ``{"blob": "xx..."}`` whose encoded JSON is exactly ``encoded`` bytes."""
    return {"blob": "x" * (encoded - encoded_size({"blob": ""}))}


def refused_as_too_large(reply: JsonReply, part: str, size: int, limit: int) -> None:
    assert reply.status == 413, reply.message
    error = reply.wire["error"] if reply.message else {}
    assert error["code"] == INVALID_PARAMS
    assert error["data"] == {f"{part}Bytes": size, f"max{part.capitalize()}Bytes": limit}


# --- arguments ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["keep", "prepare"])
async def test_arguments_at_the_limit_are_kept_and_one_byte_more_is_refused_before_anything_is_stored(
    tool: str,
) -> None:
    served = Served(max_task_argument_bytes=1024)
    kept = await served.start(tool, blob_of(1024))
    assert kept.message is not None and kept.wire["result"]["resultType"] == "task"
    record = await served.record(kept.wire["result"]["taskId"])
    assert record.arguments == blob_of(1024)

    refused = await served.start(tool, blob_of(1025))
    refused_as_too_large(refused, "argument", 1025, 1024)
    assert served.store.sizes()["records"] == 1
    assert await served.store.places.charged("alice") == stored_bytes(record)


async def test_an_inline_call_keeps_nothing_so_its_arguments_are_not_bounded_by_the_task_limit() -> None:
    served = Served(max_task_argument_bytes=1024)
    inline = await served.start("keep", blob_of(4096), capabilities={"elicitation": {}})
    assert inline.message is not None and inline.wire["result"]["content"][0]["text"] == "kept 4085"
    assert served.store.sizes()["records"] == 0


async def test_the_probes_twenty_calls_with_4_mib_arguments_are_refused_and_nothing_is_kept() -> None:
    served = Served()  # the defaults
    for _ in range(20):
        refused = await served.start("keep", blob_of(4 * MIB - 4096))
        refused_as_too_large(refused, "argument", 4 * MIB - 4096, 256 * 1024)
    assert served.store.sizes()["records"] == 0
    assert await served.store.places.charged("alice") == 0


# --- answers -----------------------------------------------------------------------------------------------


def answer(text_bytes: int) -> dict[str, Any]:
    return {"action": "accept", "content": {"text": "y" * text_bytes}}


async def test_the_answers_a_task_keeps_after_a_merge_are_bounded_at_the_edge() -> None:
    served = Served(max_answer_bytes=1024)
    created = await served.start("interview", {})
    assert created.message is not None
    task_id = created.wire["result"]["taskId"]
    await served.worker.execute(task_id)
    assert (await served.record(task_id)).status is TaskStatus.INPUT_REQUIRED

    first = {"a": answer(400)}
    partial = await served.send("tasks/update", {"taskId": task_id, "inputResponses": first})
    assert partial.message is not None and "error" not in partial.message
    base = encoded_size({**first, "b": answer(0)})
    over = await served.send("tasks/update", {"taskId": task_id, "inputResponses": {"b": answer(1025 - base)}})
    refused_as_too_large(over, "answer", 1025, 1024)
    assert set((await served.record(task_id)).input_requests) == {"b"}  # nothing merged

    exact = await served.send("tasks/update", {"taskId": task_id, "inputResponses": {"b": answer(1024 - base)}})
    assert exact.message is not None and exact.wire["result"]["resultType"] == "complete"
    kept = await served.record(task_id)
    assert kept.status is TaskStatus.WORKING and encoded_size(kept.answers) == 1024


async def test_answers_past_the_principals_byte_budget_are_refused_with_429() -> None:
    served = Served(max_stored_bytes=8 * 1024, max_answer_bytes=64 * 1024)
    created = await served.start("interview", {})
    assert created.message is not None
    task_id = created.wire["result"]["taskId"]
    await served.worker.execute(task_id)
    refused = await served.send("tasks/update", {"taskId": task_id, "inputResponses": {"a": answer(9 * 1024)}})
    assert refused.status == 429 and refused.headers == {"Retry-After": "60"}
    assert refused.message is not None and refused.wire["error"]["data"]["limit"] == "max_stored_bytes"
    assert set((await served.record(task_id)).input_requests) == {"a", "b"}
    assert await served.store.places.charged("alice") <= 8 * 1024


# --- the principal's byte budget ------------------------------------------------------------------------------


async def test_a_principals_tasks_are_refused_once_their_bytes_would_pass_the_budget() -> None:
    served = Served(max_stored_bytes=64 * 1024)
    created = 0
    while True:
        reply = await served.start("keep", blob_of(10_000))
        if reply.status != 200:
            break
        created += 1
    assert created == 6  # six tasks of ~10 KB fit in 64 KiB; the seventh does not
    assert reply.status == 429 and reply.headers == {"Retry-After": "60"}
    assert reply.message is not None and reply.wire["error"]["code"] == LIMIT_EXCEEDED
    assert reply.wire["error"]["data"] == {"limit": "max_stored_bytes", "retryAfterSeconds": 60}
    assert await served.store.places.charged("alice") <= 64 * 1024
    # Another principal has a budget of its own.
    assert (await served.start("keep", blob_of(10_000), principal=BOB)).status == 200


# --- status messages ----------------------------------------------------------------------------------------


async def test_a_status_message_is_cut_to_1024_characters_with_an_ellipsis() -> None:
    served = Served()
    seen = {}
    for size in (MAX_STATUS_CHARS, 10 * MIB):
        created = await served.start("chatty", {"size": size})
        assert created.message is not None
        task_id = created.wire["result"]["taskId"]
        done = await served.worker.execute(task_id)
        assert done is not None and done.status is TaskStatus.COMPLETED
        seen[size] = (await served.record(task_id)).status_message
    assert seen[MAX_STATUS_CHARS] == "s" * MAX_STATUS_CHARS
    assert seen[10 * MIB] == "s" * (MAX_STATUS_CHARS - 1) + "…"


async def test_a_failed_tasks_status_message_and_error_are_cut_too() -> None:
    served = Served()
    created = await served.start("breaks", {"size": 5 * MIB})
    assert created.message is not None
    done = await served.worker.execute(created.wire["result"]["taskId"])
    assert done is not None and done.status is TaskStatus.FAILED
    assert done.status_message is not None and len(done.status_message) == MAX_STATUS_CHARS
    assert done.status_message.startswith("Task failed: eee") and done.status_message.endswith("…")
    assert done.error is not None and done.error["code"] == INTERNAL_ERROR
    assert done.error["message"] == "e" * (MAX_STATUS_CHARS - 1) + "…" and "data" not in done.error
    assert stored_bytes(done) < 8 * 1024


# --- capabilities -------------------------------------------------------------------------------------------


async def test_a_task_keeps_only_the_capabilities_its_tool_can_use() -> None:
    served = Served()
    declared = {
        **DECLARING,
        "sampling": {"tools": {}},
        "roots": {"listChanged": True},
        "extensions": {TASKS: {}, "io.example/ui": {"mimeTypes": ["text/html"]}},
        "experimental": {"x": {}},
        "somethingElse": {"padding": "p" * 100_000},
    }
    created = await served.start("checks", {}, capabilities=declared)
    assert created.message is not None
    task_id = created.wire["result"]["taskId"]
    kept = (await served.record(task_id)).client_capabilities
    assert kept == {name: value for name, value in declared.items() if name != "somethingElse"}
    done = await served.worker.execute(task_id)
    assert done is not None and done.result is not None and done.result["content"][0]["text"] == "ui"


async def test_capabilities_a_task_would_keep_over_16_kib_are_refused() -> None:
    served = Served()
    declared = {**DECLARING, "experimental": {"padding": {"p": "p" * 20_000}}}
    refused = await served.start("keep", {}, capabilities=declared)
    size = encoded_size({"elicitation": {}, "experimental": declared["experimental"], "extensions": {TASKS: {}}})
    refused_as_too_large(refused, "capability", size, 16 * 1024)
    assert served.store.sizes()["records"] == 0
