"""``ext_tasks.client`` against this server, serving the conformance fixtures: one process on the
in-memory store, and three behind nginx round-robin on one Valkey and on the Valkey Cluster (so a retry,
a poll, an answer or a listen may each reach another instance). Inline answers, multi round-trip
input, tasks with input inside them, the three ends of a task, cancellation, following a task started
elsewhere, headers, and typed refusals."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from ext_tasks.client import (
    Client,
    InvalidParams,
    MissingCapability,
    TaskCancelled,
    TaskFailed,
    tasks,
)
from ext_tasks.protocol.errors import INTERNAL_ERROR
from tests.e2e.conftest import STORES, store_url_for
from tests.support.cluster import running_cluster
from tests.support.lossy_proxy import LossyProxy
from tests.support.processes import running_server

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TOOLS = "ext_tasks.examples.conformance"
#: What the person answers, by the question's field.
ANSWERS: dict[str, Any] = {"name": "Ada", "color": "teal", "confirm": True}


class Served(Protocol):
    """A server's MCP endpoint: one process, or a fleet behind its balancer."""

    @property
    def url(self) -> str: ...


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=("memory", *STORES))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server on the in-memory store; three behind nginx on one Valkey, and on the Valkey Cluster."""
    directory = tmp_path_factory.mktemp(f"client-{request.param}")
    if request.param == "memory":
        with running_server(directory, tools=TOOLS) as served:
            yield served
    else:
        with running_cluster(directory, tools=TOOLS, valkey_url=store_url_for(request, request.param)) as fleet:
            yield fleet


class Person:
    """Answers each elicitation's first field from :data:`ANSWERS`, and remembers what was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params["message"])
        field = next(iter(params["requestedSchema"]["properties"]))
        return {"action": "accept", "content": {field: ANSWERS.get(field, "yes")}}


async def _sample(params: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": "Hi!"}, "model": "stub", "stopReason": "endTurn"}


def _text(result: dict[str, Any]) -> str:
    return " ".join(item["text"] for item in result["content"] if item["type"] == "text")


async def test_an_inline_answer_is_the_result(server: Served) -> None:
    async with Client(server.url) as client:
        handle = await client.start_tool("greet", {"name": "Ada"})
        assert handle.task_id is None and handle.done
        assert _text(await handle.wait()) == "Hello, Ada!"


async def test_multi_round_input_is_answered_and_the_state_echoed(server: Served) -> None:
    person = Person()
    async with Client(server.url, elicitation=person) as client:
        result = await client.call_tool("test_input_required_result_multi_round", {})
    assert _text(result) == "Ada likes teal."
    assert person.asked == ["What is your name?", "What is your favourite colour?"]


async def test_one_round_of_three_kinds_of_input(server: Served) -> None:
    roots = [{"uri": "file:///srv/app", "name": "app"}]
    async with Client(server.url, elicitation=Person(), sampling=_sample, roots=roots) as client:
        result = await client.call_tool("test_input_required_result_multiple_inputs", {})
    assert _text(result) == "Got a name (Ada), a greeting and 1 root(s)."


async def test_a_task_asking_inside_it_is_answered_with_tasks_update(server: Served) -> None:
    person = Person()
    async with Client(server.url, elicitation=person) as client:
        handle = await client.start_tool("confirm_delete", {"filename": "notes.txt"})
        assert handle.task_id is not None
        statuses = []
        async for state in handle.updates():
            statuses.append(state["status"])
            if state["status"] == "input_required":
                await handle.respond(await client.inputs.answer(state["inputRequests"]))
        assert statuses[0] in ("working", "input_required") and statuses[-1] == "completed"
        assert "input_required" in statuses
        assert _text(await handle.wait()) == "Deleted notes.txt."
    assert person.asked == ["Delete notes.txt?"]


@pytest.mark.parametrize("listen", [True, False], ids=["listen", "poll"])
async def test_wait_follows_a_task_to_its_end(server: Served, listen: bool) -> None:
    async with Client(server.url, elicitation=Person(), listen=listen) as client:
        result = await client.call_tool("confirm_delete", {"filename": "a.txt"})
    assert _text(result) == "Deleted a.txt."


async def test_an_is_error_result_is_returned_not_raised(server: Served) -> None:
    async with Client(server.url) as client:
        result = await client.call_tool("failing_job", {})
    assert result["isError"] is True and "corrupt" in _text(result)


async def test_a_failed_task_raises_its_error(server: Served) -> None:
    async with Client(server.url) as client:
        with pytest.raises(TaskFailed) as failed:
            await client.call_tool("protocol_error_job", {})
    assert failed.value.code == INTERNAL_ERROR and "rate limit" in failed.value.message and failed.value.task_id


async def test_a_cancelled_task_raises_and_stops_on_the_server(server: Served) -> None:
    async with Client(server.url) as client:
        handle = await client.start_tool("slow_compute", {"seconds": 30})
        assert handle.task_id is not None
        started = time.monotonic()
        await handle.cancel()
        with pytest.raises(TaskCancelled):
            await handle.wait()
        assert time.monotonic() - started < 10
        assert (await client.task(handle.task_id).status())["status"] == "cancelled"


async def test_a_task_started_elsewhere_is_followed_by_id(server: Served) -> None:
    async with Client(server.url) as starter:
        handle = await starter.start_tool("slow_compute", {"seconds": 1, "label": "shared"})
        assert handle.task_id is not None
    async with Client(server.url) as follower:
        assert _text(await follower.task(handle.task_id).wait()) == "shared: computed after 1s"


async def test_headers_from_the_tools_schema_are_sent(server: Served) -> None:
    """The server refuses a call whose ``Mcp-Param-Region`` is missing or differs (-32020)."""
    async with Client(server.url) as client:
        assert _text(await client.call_tool("test_x_mcp_header", {"region": "eu-north-1"})) == "Region: eu-north-1"
        assert _text(await client.call_tool("test_x_mcp_header", {"region": "Zürich "})) == "Region: Zürich "


async def test_refusals_are_typed(server: Served) -> None:
    async with Client(server.url) as client:
        with pytest.raises(MissingCapability) as missing:
            await client.call_tool("test_missing_capability", {})
        assert missing.value.required == {"sampling": {}} and missing.value.http_status == 400
        with pytest.raises(InvalidParams):
            await client.call_tool("no_such_tool", {})
        with pytest.raises(InvalidParams):
            await client.task("not-a-task").status()
    async with Client(server.url, sampling=_sample) as client:
        assert _text(await client.call_tool("test_missing_capability", {})) == "The client declared sampling."


async def test_prompts_and_resources_follow_input_rounds(server: Served) -> None:
    async with Client(server.url, elicitation=Person()) as client:
        assert any(prompt["name"] == "test_input_required_result_prompt" for prompt in await client.list_prompts())
        prompt = await client.get_prompt("test_input_required_result_prompt")
        assert prompt["messages"]
        resources = await client.list_resources()
        assert resources
        read = await client.read_resource(resources[0]["uri"])
        assert read["contents"]


async def test_without_the_extension_a_task_tool_answers_inline(server: Served) -> None:
    async with Client(server.url, tasks=False) as client:
        handle = await client.start_tool("slow_compute", {"seconds": 0.2, "label": "inline"})
        assert handle.task_id is None
        assert _text(await handle.wait()) == "inline: computed after 0.2s"


async def test_a_listen_stream_is_renewed_with_a_read_between(server: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``LISTEN_REFRESH_S`` the stream is closed, the task read once and a new stream opened, so a
    notification lost on the way delays the caller by that much at most."""
    monkeypatch.setattr(tasks, "LISTEN_REFRESH_S", 0.3)
    async with LossyProxy(server.url, drop=lambda _: False) as proxy, Client(proxy.url) as client:
        handle = await client.start_tool("slow_compute", {"seconds": 1.5, "label": "renewed"})
        assert _text(await handle.wait()) == "renewed: computed after 1.5s"
    methods = [json.loads(body)["method"] for body in proxy.bodies]
    assert methods.count("subscriptions/listen") >= 3, methods
    assert methods.count("tasks/get") >= methods.count("subscriptions/listen"), methods
