"""The Tasks extension through the engine, in-process: task creation from ``tools/call`` and
``tasks/get``, ``tasks/update``, ``tasks/cancel`` (protocol.md §3).

The engine runs over a :class:`MemoryTaskStore` and a clock the tests move by hand. Runs are executed
burst style with ``Worker.execute`` where a test needs a task to move on; no background loop runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from ext_tasks import Context, Principal, ToolRegistry, elicit
from ext_tasks.engine import Engine
from ext_tasks.lifecycle import principal_tag
from ext_tasks.metrics import REGISTRY
from ext_tasks.options import EngineOptions, TaskOptions
from ext_tasks.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from tests.support.mcp_http import modern_request

pytestmark = pytest.mark.anyio

EXTENSION = "io.modelcontextprotocol/tasks"
KEY = b"task-methods-test-key".ljust(32, b"!")
T0_MS = 1_800_000_000_000
TTL_MS = 60_000
POLL_MS = 250
ALICE = Principal(id="alice")
BOB = Principal(id="bob")

DECLARING: dict[str, Any] = {"extensions": {EXTENSION: {}}, "elicitation": {}}
NON_DECLARING: dict[str, Any] = {"elicitation": {}}
TASK_FIELDS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
REQUIRED_CAPABILITIES: dict[str, Any] = {"extensions": {EXTENSION: {}}}
NOT_FOUND = "Failed to retrieve task: Task not found"
EXPIRED = "Failed to retrieve task: Task has expired"

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
COLOUR_SCHEMA = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
NAME_ANSWER = {"action": "accept", "content": {"name": "Ada"}}
COLOUR_ANSWER = {"action": "accept", "content": {"colour": "teal"}}


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0_MS

    def __call__(self) -> int:
        return self.now_ms


class Calls:
    """How often each tool function actually ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def ran(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def __getitem__(self, name: str) -> int:
        return self.counts.get(name, 0)


def make_registry(calls: Calls) -> ToolRegistry:
    registry = ToolRegistry("task-methods-test", version="1.0.0")

    @registry.tool(task="required", description="Runs only as a task.")
    async def required_job(n: int = 1) -> str:
        calls.ran("required_job")
        return f"required {n}"

    @registry.tool(task="optional", description="A task when the client allows it.")
    async def optional_job(n: int = 1) -> str:
        calls.ran("optional_job")
        return f"optional {n}"

    @registry.tool(description="Never a task.")
    async def forbidden_job(n: int = 1) -> str:
        calls.ran("forbidden_job")
        return f"forbidden {n}"

    @registry.tool(task="required", description="Asks two questions inside the task.")
    async def survey(ctx: Context) -> str:
        calls.ran("survey")
        answers = ctx.ask({"name": elicit("Your name?", NAME_SCHEMA), "colour": elicit("Colour?", COLOUR_SCHEMA)})
        return f"{answers['name'].content['name']} likes {answers['colour'].content['colour']}"

    @registry.tool(task="optional", preflight=True, description="Asks a name by MRTR, then continues as a task.")
    async def hello_task(ctx: Context) -> str:
        answer = await ctx.elicit("user_name", "What is your name?", NAME_SCHEMA)
        await ctx.start_task()
        calls.ran("hello_task:after_start")
        return f"Hello from the task, {(answer.content or {}).get('name', 'stranger')}!"

    return registry


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def registry(calls: Calls) -> ToolRegistry:
    return make_registry(calls)


@pytest.fixture
def store(clock: Clock) -> MemoryTaskStore:
    return MemoryTaskStore(clock_ms=clock)


@pytest.fixture
def engine(registry: ToolRegistry, store: MemoryTaskStore, clock: Clock) -> Iterator[Engine]:
    codec = ResumeCodec([KEY], audience="task-methods-test", ttl_s=600, clock=lambda: clock() / 1000)
    options = TaskOptions(task_ttl_ms=TTL_MS, task_max_ttl_ms=TTL_MS * 10, poll_interval_ms=POLL_MS)
    engine = Engine(registry, codec, tasks=TaskMethods(store, options, clock_ms=clock))
    yield engine
    engine.close()


@pytest.fixture
def worker(store: MemoryTaskStore, registry: ToolRegistry, clock: Clock) -> Worker:
    return Worker(store, registry, clock_ms=clock)


# --- helpers ----------------------------------------------------------------------------------------


async def send(
    engine: Engine,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    principal: Principal = ALICE,
    capabilities: dict[str, Any] | None = None,
    header_overrides: dict[str, str] | None = None,
) -> JsonReply:
    """One request through ``Engine.handle`` with the headers a conforming client sends."""
    declared = DECLARING if capabilities is None else capabilities
    headers, body = modern_request(method, params, capabilities=declared)
    headers.update(header_overrides or {})
    lowered = {name.lower(): [value] for name, value in headers.items()}
    with anyio.fail_after(5):
        reply = await engine.handle(json.dumps(body).encode(), lowered, principal)
    assert isinstance(reply, JsonReply), reply
    return reply


async def result_of(engine: Engine, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    reply = await send(engine, method, params, **kwargs)
    assert reply.message is not None
    assert "error" not in reply.message, reply.message
    assert reply.status == 200
    result: dict[str, Any] = reply.wire["result"]
    return result


async def error_of(
    engine: Engine, method: str, params: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    reply = await send(engine, method, params, **kwargs)
    assert reply.message is not None
    assert "result" not in reply.message, reply.message
    error: dict[str, Any] = reply.wire["error"]
    return reply.status, error


async def create_task(engine: Engine, tool: str = "optional_job", principal: Principal = ALICE) -> str:
    created = await result_of(engine, "tools/call", {"name": tool, "arguments": {}}, principal=principal)
    assert created["resultType"] == "task", created
    task_id: str = created["taskId"]
    return task_id


async def get_task(engine: Engine, task_id: str, principal: Principal = ALICE) -> dict[str, Any]:
    return await result_of(engine, "tasks/get", {"taskId": task_id}, principal=principal)


def task_params(method: str, task_id: str) -> dict[str, Any]:
    if method == "tasks/update":
        return {"taskId": task_id, "inputResponses": {"name": NAME_ANSWER}}
    return {"taskId": task_id}


def is_empty_ack(result: dict[str, Any]) -> bool:
    return result["resultType"] == "complete" and set(result) <= {"resultType", "_meta"}


TASK_METHODS = ["tasks/get", "tasks/update", "tasks/cancel"]


# --- creating tasks from tools/call -------------------------------------------------------------------


async def test_required_tool_without_the_extension_answers_32021_before_the_function_runs(
    engine: Engine, calls: Calls
) -> None:
    status, error = await error_of(
        engine, "tools/call", {"name": "required_job", "arguments": {}}, capabilities=NON_DECLARING
    )
    assert status == 400
    assert error["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert error["data"]["requiredCapabilities"]["extensions"][EXTENSION] == {}
    assert calls["required_job"] == 0


async def test_required_tool_with_legacy_tasks_capability_only_is_non_declaring(engine: Engine, calls: Calls) -> None:
    legacy: dict[str, Any] = {"tasks": {"requests": {"tools": {"call": {}}}}}
    status, error = await error_of(engine, "tools/call", {"name": "required_job", "arguments": {}}, capabilities=legacy)
    assert (status, error["code"]) == (400, MISSING_REQUIRED_CLIENT_CAPABILITY)
    assert calls["required_job"] == 0


async def test_optional_tool_without_the_extension_answers_a_plain_complete_result(
    engine: Engine, calls: Calls, store: MemoryTaskStore
) -> None:
    result = await result_of(
        engine, "tools/call", {"name": "optional_job", "arguments": {"n": 3}}, capabilities=NON_DECLARING
    )
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "optional 3"}]
    assert result["isError"] is False
    assert "taskId" not in result
    assert calls["optional_job"] == 1


@pytest.mark.parametrize("capabilities", [DECLARING, NON_DECLARING], ids=["declaring", "non-declaring"])
async def test_forbidden_tool_with_a_legacy_task_param_answers_a_complete_result(
    engine: Engine, calls: Calls, capabilities: dict[str, Any]
) -> None:
    params = {"name": "forbidden_job", "arguments": {"n": 2}, "task": {"ttl": 60_000}}
    result = await result_of(engine, "tools/call", params, capabilities=capabilities)
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "forbidden 2"}]
    assert "taskId" not in result
    assert calls["forbidden_job"] == 1


@pytest.mark.parametrize("tool", ["optional_job", "required_job"])
async def test_declaring_request_gets_a_flat_create_task_result(engine: Engine, calls: Calls, tool: str) -> None:
    created = await result_of(engine, "tools/call", {"name": tool, "arguments": {"n": 1}})
    assert created["resultType"] == "task"
    assert set(created) - {"resultType", "_meta"} <= TASK_FIELDS
    assert {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"} <= set(created)
    assert created["status"] == "working"
    assert isinstance(created["taskId"], str)
    assert len(created["taskId"]) >= 16  # high entropy: task ids may act as bearer tokens
    assert type(created["ttlMs"]) is int
    assert created["ttlMs"] == TTL_MS
    assert type(created["pollIntervalMs"]) is int
    assert created["pollIntervalMs"] == POLL_MS
    for absent in ("result", "requestState", "task", "inputRequests", "error", "ttl", "pollInterval", "content"):
        assert absent not in created
    assert calls[tool] == 0  # the worker runs it, not the request


async def test_tasks_get_right_after_creation_succeeds(engine: Engine) -> None:
    created = await result_of(engine, "tools/call", {"name": "optional_job", "arguments": {}})
    got = await get_task(engine, created["taskId"])
    assert got["resultType"] == "complete"
    assert got["taskId"] == created["taskId"]
    assert got["status"] == "working"
    assert got["createdAt"] == created["createdAt"]
    assert "requestState" not in got


async def test_invalid_arguments_answer_32602_instead_of_creating_a_task(
    engine: Engine, store: MemoryTaskStore, calls: Calls
) -> None:
    status, error = await error_of(engine, "tools/call", {"name": "optional_job", "arguments": {"n": "many"}})
    assert error["code"] == INVALID_PARAMS
    assert status in (200, 400)
    assert await store.next_runs("probe", 1, block_ms=50) == []  # no task, so no run was queued
    assert calls["optional_job"] == 0


async def test_a_created_task_runs_to_completed_and_tasks_get_inlines_the_result(
    engine: Engine, worker: Worker, calls: Calls
) -> None:
    task_id = await create_task(engine, "optional_job")
    await worker.execute(task_id)
    got = await get_task(engine, task_id)
    assert got["status"] == "completed"
    assert got["result"]["content"] == [{"type": "text", "text": "optional 1"}]
    assert got["result"]["isError"] is False
    assert "io.modelcontextprotocol/related-task" not in (got["result"].get("_meta") or {})
    assert calls["optional_job"] == 1


# --- preflight: MRTR rounds, then the task ------------------------------------------------------------


async def test_preflight_asks_by_mrtr_then_creates_the_task_which_sees_the_answer(
    engine: Engine, worker: Worker, calls: Calls
) -> None:
    call = {"name": "hello_task", "arguments": {}}
    asked = await result_of(engine, "tools/call", call)
    assert asked["resultType"] == "input_required"
    assert set(asked["inputRequests"]) == {"user_name"}
    assert "taskId" not in asked  # round 1 of MRTR is not a task yet
    assert calls["hello_task:after_start"] == 0

    retry = {**call, "inputResponses": {"user_name": NAME_ANSWER}, "requestState": asked["requestState"]}
    created = await result_of(engine, "tools/call", retry)
    assert created["resultType"] == "task"
    assert "requestState" not in created
    assert "inputRequests" not in created
    assert calls["hello_task:after_start"] == 0  # what follows start_task() runs in the worker

    await worker.execute(created["taskId"])
    done = await get_task(engine, created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "Hello from the task, Ada!"}]
    assert calls["hello_task:after_start"] == 1


async def test_preflight_tool_runs_inline_for_a_non_declaring_client(engine: Engine, calls: Calls) -> None:
    call = {"name": "hello_task", "arguments": {}}
    asked = await result_of(engine, "tools/call", call, capabilities=NON_DECLARING)
    assert asked["resultType"] == "input_required"
    retry = {**call, "inputResponses": {"user_name": NAME_ANSWER}, "requestState": asked["requestState"]}
    result = await result_of(engine, "tools/call", retry, capabilities=NON_DECLARING)
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "Hello from the task, Ada!"}]
    assert calls["hello_task:after_start"] == 1


# --- the extension must be declared on tasks/* ----------------------------------------------------------


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_tasks_methods_without_the_extension_answer_32021(engine: Engine, method: str) -> None:
    task_id = await create_task(engine)
    status, error = await error_of(engine, method, task_params(method, task_id), capabilities=NON_DECLARING)
    assert status == 400
    assert error["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert error["data"]["requiredCapabilities"] == REQUIRED_CAPABILITIES
    assert (await get_task(engine, task_id))["status"] == "working"  # nothing happened to the task


# --- unknown, foreign and expired tasks ---------------------------------------------------------------


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_an_unknown_task_id_answers_32602_task_not_found(engine: Engine, method: str) -> None:
    status, error = await error_of(engine, method, task_params(method, "no-such-task"))
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == NOT_FOUND
    assert status in (200, 400)


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_another_principals_task_is_not_found_exactly_like_an_unknown_id(engine: Engine, method: str) -> None:
    task_id = await create_task(engine, principal=ALICE)
    foreign = await send(engine, method, task_params(method, task_id), principal=BOB)
    unknown = await send(engine, method, task_params(method, "no-such-task"), principal=BOB)
    assert foreign.message is not None and unknown.message is not None
    assert foreign.status == unknown.status
    assert foreign.wire["error"] == unknown.wire["error"]
    assert foreign.wire["error"]["message"] == NOT_FOUND
    # Bob's attempt changed nothing for Alice.
    assert (await get_task(engine, task_id))["status"] == "working"


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_an_expired_task_is_expired_for_its_owner_and_not_found_for_others(
    engine: Engine, clock: Clock, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = await create_task(engine, principal=ALICE)
    clock.now_ms += TTL_MS * 3
    assert (await get_task(engine, task_id))["status"] == "working"  # unfinished: never expires
    await result_of(engine, "tasks/cancel", {"taskId": task_id})  # kept its lifetime from its end
    clock.now_ms += TTL_MS - 1
    assert (await get_task(engine, task_id))["taskId"] == task_id  # readable for its whole ttlMs
    clock.now_ms += 1
    _, for_bob = await error_of(engine, method, task_params(method, task_id), principal=BOB)
    with caplog.at_level(logging.INFO, logger="ext_tasks.lifecycle"):
        _, for_alice = await error_of(engine, method, task_params(method, task_id), principal=ALICE)
    (logged,) = [entry for entry in caplog.records if entry.getMessage() == "task.expired"]
    assert logged.principal == principal_tag(ALICE.id)  # type: ignore[attr-defined]  # the one-way tag, not the id
    assert for_alice["code"] == INVALID_PARAMS
    assert for_alice["message"] == EXPIRED
    assert for_bob["code"] == INVALID_PARAMS
    assert for_bob["message"] == NOT_FOUND


async def test_a_task_id_that_is_not_a_string_answers_32602(engine: Engine) -> None:
    _, error = await error_of(engine, "tasks/get", {"taskId": 42})
    assert error["code"] == INVALID_PARAMS


# --- tasks/update -------------------------------------------------------------------------------------


async def test_update_with_keys_that_are_not_outstanding_acks_and_changes_nothing(
    engine: Engine, worker: Worker
) -> None:
    task_id = await create_task(engine, "survey")
    await worker.execute(task_id)
    before = await get_task(engine, task_id)
    assert before["status"] == "input_required"
    assert set(before["inputRequests"]) == {"name", "colour"}

    ack = await result_of(engine, "tasks/update", {"taskId": task_id, "inputResponses": {"bogus": NAME_ANSWER}})
    assert is_empty_ack(ack), ack
    assert await get_task(engine, task_id) == before


async def test_update_of_a_working_task_acks_and_changes_nothing(engine: Engine) -> None:
    task_id = await create_task(engine, "optional_job")
    before = await get_task(engine, task_id)
    ack = await result_of(engine, "tasks/update", {"taskId": task_id, "inputResponses": {"name": NAME_ANSWER}})
    assert is_empty_ack(ack), ack
    assert await get_task(engine, task_id) == before


async def test_a_partial_update_leaves_only_the_rest_outstanding(engine: Engine, worker: Worker) -> None:
    task_id = await create_task(engine, "survey")
    await worker.execute(task_id)
    ack = await result_of(engine, "tasks/update", {"taskId": task_id, "inputResponses": {"name": NAME_ANSWER}})
    assert is_empty_ack(ack), ack
    got = await get_task(engine, task_id)
    assert got["status"] == "input_required"
    assert set(got["inputRequests"]) == {"colour"}


async def test_answering_every_key_resumes_the_task_which_then_completes(
    engine: Engine, worker: Worker, calls: Calls
) -> None:
    task_id = await create_task(engine, "survey")
    await worker.execute(task_id)
    responses = {"name": NAME_ANSWER, "colour": COLOUR_ANSWER}
    ack = await result_of(engine, "tasks/update", {"taskId": task_id, "inputResponses": responses})
    assert is_empty_ack(ack), ack
    resumed = await get_task(engine, task_id)
    assert resumed["status"] == "working"
    assert "inputRequests" not in resumed
    await worker.execute(task_id)
    done = await get_task(engine, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "Ada likes teal"}]
    assert calls["survey"] == 2


@pytest.mark.parametrize("responses", [None, 42, {"name": 42}, {"name": None}, ["name"]])
async def test_update_with_malformed_input_responses_answers_32602(
    engine: Engine, worker: Worker, responses: object
) -> None:
    task_id = await create_task(engine, "survey")
    await worker.execute(task_id)
    before = await get_task(engine, task_id)
    _, error = await error_of(engine, "tasks/update", {"taskId": task_id, "inputResponses": responses})
    assert error["code"] == INVALID_PARAMS
    assert await get_task(engine, task_id) == before


async def test_update_without_input_responses_answers_32602(engine: Engine, worker: Worker) -> None:
    task_id = await create_task(engine, "survey")
    await worker.execute(task_id)
    _, error = await error_of(engine, "tasks/update", {"taskId": task_id})
    assert error["code"] == INVALID_PARAMS


# --- tasks/cancel -------------------------------------------------------------------------------------


async def test_cancel_of_a_working_task_acks_and_tasks_get_says_cancelled(engine: Engine, worker: Worker) -> None:
    task_id = await create_task(engine, "optional_job")
    ack = await result_of(engine, "tasks/cancel", {"taskId": task_id})
    assert is_empty_ack(ack), ack
    got = await get_task(engine, task_id)
    assert got["status"] == "cancelled"
    assert not {"result", "error", "inputRequests"} & set(got)
    # The queued run finds a cancelled task and leaves it alone.
    assert await worker.execute(task_id) is None
    assert (await get_task(engine, task_id))["status"] == "cancelled"


async def test_cancel_of_an_input_required_task_acks_and_tasks_get_says_cancelled(
    engine: Engine, worker: Worker
) -> None:
    task_id = await create_task(engine, "survey")
    await worker.execute(task_id)
    ack = await result_of(engine, "tasks/cancel", {"taskId": task_id})
    assert is_empty_ack(ack), ack
    got = await get_task(engine, task_id)
    assert got["status"] == "cancelled"
    assert "inputRequests" not in got


async def test_cancel_of_a_completed_task_acks_and_leaves_it_completed(engine: Engine, worker: Worker) -> None:
    task_id = await create_task(engine, "optional_job")
    await worker.execute(task_id)
    before = await get_task(engine, task_id)
    assert before["status"] == "completed"
    for _ in range(2):  # idempotent
        ack = await result_of(engine, "tasks/cancel", {"taskId": task_id})
        assert is_empty_ack(ack), ack
    assert await get_task(engine, task_id) == before


async def test_cancel_of_a_cancelled_task_acks_again(engine: Engine) -> None:
    task_id = await create_task(engine, "optional_job")
    await result_of(engine, "tasks/cancel", {"taskId": task_id})
    before = await get_task(engine, task_id)
    ack = await result_of(engine, "tasks/cancel", {"taskId": task_id})
    assert is_empty_ack(ack), ack
    assert await get_task(engine, task_id) == before


# --- routing headers and methods that do not exist ----------------------------------------------------


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_mcp_name_that_differs_from_the_task_id_answers_32020(engine: Engine, method: str) -> None:
    task_id = await create_task(engine)
    status, error = await error_of(
        engine, method, task_params(method, task_id), header_overrides={"Mcp-Name": "some-other-task"}
    )
    assert status == 400
    assert error["code"] == HEADER_MISMATCH
    assert (await get_task(engine, task_id))["status"] == "working"


async def send_without_mcp_name(engine: Engine, method: str, params: dict[str, Any]) -> JsonReply:
    headers, body = modern_request(method, params, capabilities=DECLARING)
    lowered = {name.lower(): [value] for name, value in headers.items() if name.lower() != "mcp-name"}
    assert "mcp-method" in lowered
    with anyio.fail_after(5):
        reply = await engine.handle(json.dumps(body).encode(), lowered, ALICE)
    assert isinstance(reply, JsonReply)
    assert reply.message is not None
    return reply


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_a_missing_mcp_name_is_served_and_counted(engine: Engine, store: MemoryTaskStore, method: str) -> None:
    # Real tasks clients send Mcp-Method but no Mcp-Name on tasks/*: the body's taskId is authoritative.
    task_id = await create_task(engine, "survey")
    await Worker(store, engine.registry).execute(task_id)
    before = REGISTRY.get_sample_value("ext_tasks_header_tolerated_total", {"header": "Mcp-Name"}) or 0.0
    reply = await send_without_mcp_name(engine, method, task_params(method, task_id))
    assert reply.status == 200, reply.message
    assert reply.message is not None and reply.wire["result"]["resultType"] == "complete"
    after = REGISTRY.get_sample_value("ext_tasks_header_tolerated_total", {"header": "Mcp-Name"})
    assert after == before + 1
    expected = {"tasks/get": "input_required", "tasks/update": "input_required", "tasks/cancel": "cancelled"}
    assert (await get_task(engine, task_id))["status"] == expected[method]


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_strict_headers_refuse_a_missing_mcp_name(
    registry: ToolRegistry, store: MemoryTaskStore, clock: Clock, method: str
) -> None:
    codec = ResumeCodec([KEY], audience="task-methods-test", clock=lambda: clock() / 1000)
    strict = Engine(
        registry, codec, EngineOptions(strict_headers=True), tasks=TaskMethods(store, TaskOptions(), clock_ms=clock)
    )
    task_id = await create_task(strict)
    reply = await send_without_mcp_name(strict, method, task_params(method, task_id))
    assert reply.message is not None
    assert (reply.status, reply.wire["error"]["code"]) == (400, HEADER_MISMATCH)
    assert "Mcp-Name is missing" in reply.wire["error"]["message"]
    assert (await get_task(strict, task_id))["status"] == "working"


@pytest.mark.parametrize("method", ["tools/call", "prompts/get", "resources/read"])
async def test_calls_keep_requiring_mcp_name(engine: Engine, method: str) -> None:
    params: dict[str, dict[str, Any]] = {
        "tools/call": {"name": "forbidden_job", "arguments": {}},
        "prompts/get": {"name": "p"},
        "resources/read": {"uri": "test://r"},
    }
    reply = await send_without_mcp_name(engine, method, params[method])
    assert reply.message is not None
    assert (reply.status, reply.wire["error"]["code"]) == (400, HEADER_MISMATCH)


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
async def test_tasks_result_and_tasks_list_do_not_exist(engine: Engine, method: str) -> None:
    task_id = await create_task(engine)
    status, error = await error_of(engine, method, {"taskId": task_id} if method == "tasks/result" else {})
    assert status == 404
    assert error["code"] == METHOD_NOT_FOUND


async def test_discover_advertises_the_extension_and_no_tasks_capability(engine: Engine) -> None:
    result = await result_of(engine, "server/discover", {})
    capabilities = result["capabilities"]
    assert capabilities["extensions"][EXTENSION] == {}
    assert "tasks" not in capabilities
