"""Error answers that tell a client the truth about whether to retry (issue "Real clients, unchanged").

Over the real app in-process (``POST /mcp`` through ASGI), so the HTTP status and headers are what a
client on the wire sees:

* a caller past a limit (unfinished tasks, polling rate) gets HTTP 429, ``Retry-After`` in seconds and
  the application-defined -31429, never -32600 ("your message is malformed");
* ``tasks/update`` and ``tasks/cancel`` that keep losing the compare-and-set to other writers keep
  trying while the task lives, and past their time budget answer -32603 with HTTP 503 and
  ``Retry-After``, never a -32602 that reads as final;
* ``subscriptions/listen`` with ``taskIds`` on a server without tasks acknowledges without ``taskIds``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Unpack

import anyio
import httpx
import pytest

from ext_tasks import Context, Principal, ToolRegistry, elicit
from ext_tasks.auth import AnonymousAuthenticator
from ext_tasks.config import Settings
from ext_tasks.engine import Engine
from ext_tasks.http import create_app
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.errors import (
    INTERNAL_ERROR,
    LIMIT_EXCEEDED,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskEvent
from ext_tasks.protocol.tasks import TaskRecord, transition
from ext_tasks.replies import StreamReply
from ext_tasks.store.base import Followups
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from tests.support.mcp_http import modern_request

pytestmark = pytest.mark.anyio

DECLARING: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ANSWER = {"name": {"action": "accept", "content": {"name": "Ada"}}}
OTHER_WRITER = "another instance was here"


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now_ms


class ContendedStore(MemoryTaskStore):
    """A real memory store where another writer commits to the task right before each of the next
    ``losses`` commits (as another instance merging a partial answer would), so the engine's
    compare-and-set loses that many times in a row."""

    def __init__(self, clock: Clock, losses: float) -> None:
        super().__init__(clock_ms=clock)
        self.losses = losses
        self.lost = 0

    async def commit(self, before: TaskRecord, after: TaskRecord, **then: Unpack[Followups]) -> bool:
        current = await self.lookup(after.task_id)
        if self.losses > 0 and isinstance(current, TaskRecord):
            self.losses -= 1
            self.lost += 1
            message = f"{OTHER_WRITER} ({self.lost})"
            other = transition(current, TaskEvent.ANSWERED, current.updated_at_ms, status_message=message)
            assert await super().commit(current, other)
        return await super().commit(before, after, **then)


Waiting = tuple[ContendedStore, httpx.AsyncClient, str]


def registry() -> ToolRegistry:
    tools = ToolRegistry("error-codes", version="1.0.0")

    @tools.tool(task="required")
    async def survey(ctx: Context) -> str:
        answer = ctx.ask({"name": elicit("Your name?", NAME_SCHEMA)})["name"]
        return f"hello {(answer.content or {}).get('name')}"

    @tools.tool(task="required")
    async def job() -> str:
        return "done"

    return tools


def app_over(store: MemoryTaskStore, clock: Clock, **options: Any) -> tuple[Engine, httpx.AsyncClient]:
    budget = options.pop("commit_budget_s", 5.0)
    tasks = TaskMethods(store, TaskOptions(**options), clock_ms=clock, commit_budget_s=budget)
    engine = Engine(registry(), ResumeCodec([b"e" * 32], audience="error-codes"), tasks=tasks)
    app = create_app(engine, Settings(), AnonymousAuthenticator())
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return engine, httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:3001")


async def post(http: httpx.AsyncClient, method: str, params: dict[str, Any]) -> httpx.Response:
    headers, body = modern_request(method, params, capabilities=DECLARING)
    with anyio.fail_after(10):
        return await http.post("/mcp", headers=headers, content=json.dumps(body))


async def started(http: httpx.AsyncClient, tool: str) -> str:
    response = await post(http, "tools/call", {"name": tool, "arguments": {}})
    assert response.status_code == 200, response.text
    task_id: str = response.json()["result"]["taskId"]
    return task_id


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def waiting_task(clock: Clock, request: pytest.FixtureRequest) -> AsyncIterator[Waiting]:
    """A task in ``input_required``, on a store whose next commits will be contended (set ``losses``);
    an indirect parameter sets the server's compare-and-set time budget (default 5 s)."""
    store = ContendedStore(clock, losses=0)
    engine, http = app_over(store, clock, commit_budget_s=getattr(request, "param", 5.0))
    async with http:
        task_id = await started(http, "survey")
        await Worker(store, engine.registry, clock_ms=clock).execute(task_id)
        yield store, http, task_id
    engine.close()


# --- limits: 429 with Retry-After and a code that does not say "malformed" --------------------------


async def test_the_unfinished_task_cap_answers_429_with_retry_after(clock: Clock) -> None:
    engine, http = app_over(MemoryTaskStore(clock_ms=clock), clock, max_active_tasks=1, poll_interval_max_ms=5_000)
    async with http:
        await started(http, "job")
        refused = await post(http, "tools/call", {"name": "job", "arguments": {}})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "5"
    error = refused.json()["error"]
    assert error["code"] == LIMIT_EXCEEDED
    assert "the limit is 1" in error["message"]
    assert error["data"] == {"limit": "max_active_tasks", "retryAfterSeconds": 5}
    engine.close()


async def test_polling_too_fast_answers_429_with_retry_after(clock: Clock) -> None:
    options = {"poll_rate_limit": True, "poll_interval_ms": 4_000, "poll_interval_max_ms": 4_000}
    engine, http = app_over(MemoryTaskStore(clock_ms=clock), clock, **options)
    async with http:
        task_id = await started(http, "job")
        assert (await post(http, "tasks/get", {"taskId": task_id})).status_code == 200
        clock.now_ms += 100
        too_soon = await post(http, "tasks/get", {"taskId": task_id})
    assert too_soon.status_code == 429
    assert too_soon.headers["retry-after"] == "2"  # half the 4 s interval
    error = too_soon.json()["error"]
    assert error["code"] == LIMIT_EXCEEDED
    assert error["data"] == {"limit": "poll_rate", "retryAfterSeconds": 2}
    engine.close()


# --- lost compare-and-set races: keep trying while the task lives, then "retry" -----------------------


async def test_update_outlasts_many_concurrent_writers(waiting_task: Waiting) -> None:
    store, http, task_id = waiting_task
    store.losses = 20  # far more than the five tries the server used to give up after
    response = await post(http, "tasks/update", {"taskId": task_id, "inputResponses": ANSWER})
    assert response.status_code == 200, response.text
    assert response.json()["result"]["resultType"] == "complete"
    assert store.lost == 20
    task = (await post(http, "tasks/get", {"taskId": task_id})).json()["result"]
    assert task["status"] == "working"  # every answer in: queued to run again


async def test_cancel_outlasts_many_concurrent_writers(waiting_task: Waiting) -> None:
    store, http, task_id = waiting_task
    store.losses = 20
    response = await post(http, "tasks/cancel", {"taskId": task_id})
    assert response.status_code == 200, response.text
    assert store.lost == 20
    assert (await post(http, "tasks/get", {"taskId": task_id})).json()["result"]["status"] == "cancelled"


@pytest.mark.parametrize("waiting_task", [0.2], indirect=True)
@pytest.mark.parametrize(("method", "extra"), [("tasks/update", {"inputResponses": ANSWER}), ("tasks/cancel", {})])
async def test_a_task_that_never_stops_changing_answers_retry_later(
    waiting_task: Waiting, method: str, extra: dict[str, Any]
) -> None:
    store, http, task_id = waiting_task
    store.losses = float("inf")
    response = await post(http, method, {"taskId": task_id, **extra})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["code"] == INTERNAL_ERROR
    assert "retry" in error["message"]
    store.losses = 0
    task = (await post(http, "tasks/get", {"taskId": task_id})).json()["result"]
    assert task["status"] == "input_required"  # nothing was changed: the resend is safe
    assert set(task["inputRequests"]) == {"name"}


# --- listen on a server without tasks ------------------------------------------------------------------


async def listen(engine: Engine, capabilities: dict[str, Any]) -> StreamReply | dict[str, Any]:
    params = {"notifications": {"toolsListChanged": True, "taskIds": ["t-1"]}}
    headers, body = modern_request("subscriptions/listen", params, capabilities=capabilities, request_id="l-1")
    lowered = {name.lower(): [value] for name, value in headers.items()}
    with anyio.fail_after(5):
        reply = await engine.handle(json.dumps(body).encode(), lowered, Principal("alice"))
    if isinstance(reply, StreamReply):
        return reply
    assert reply.message is not None
    return {"status": reply.status, **reply.wire["error"]}


async def test_listen_for_tasks_on_a_server_without_tasks_is_acknowledged_without_task_ids() -> None:
    engine = Engine(registry(), ResumeCodec([b"e" * 32], audience="error-codes"))  # no task store
    reply = await listen(engine, DECLARING)
    assert isinstance(reply, StreamReply)  # an SSE stream: HTTP 200
    with anyio.fail_after(5):
        ack = await anext(reply.items)
    assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    await reply.items.aclose()  # type: ignore[attr-defined]
    # Asking for task notifications without declaring the extension is still -32021.
    refused = await listen(engine, {})
    assert isinstance(refused, dict)
    assert (refused["status"], refused["code"]) == (400, MISSING_REQUIRED_CLIENT_CAPABILITY)
    engine.close()
