"""Both eras on one endpoint and one task store: each sees the other's tasks (same principal), and each
gets only its own style of errors."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from tests.support.cluster import wait_for
from tests.support.mcp_http import post
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("eras"), tools="ext_tasks.examples.conformance") as running:
        yield running


class Legacy:
    """A hand-driven 2025-11-25 session."""

    def __init__(self, server: ServerProcess) -> None:
        self.url = server.url
        self.client = httpx.Client(timeout=10.0, headers={"Accept": "application/json, text/event-stream"})
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "1"}}
        response = self.client.post(self.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        self.headers = {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        self.ids = iter(range(1, 10_000))

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        message: dict[str, Any] = self.client.post(self.url, json=body, headers=self.headers).json()
        return message


def modern(
    server: ServerProcess, method: str, params: dict[str, Any], capabilities: dict[str, Any] = CAPS
) -> dict[str, Any]:
    with httpx.Client(timeout=10.0) as client:
        _, message = post(client, server.url, method, params, capabilities=capabilities)
    return message


def test_a_task_created_by_a_legacy_client_is_seen_and_cancelled_by_a_modern_one(server: ServerProcess) -> None:
    legacy = Legacy(server)
    created = legacy.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 60000}})
    task_id = created["result"]["task"]["taskId"]
    seen = modern(server, "tasks/get", {"taskId": task_id})["result"]
    assert (seen["taskId"], seen["status"]) == (task_id, "working")
    assert 60000 <= seen["ttlMs"] < 70000  # the client's hint granted: its age + 60 s while it runs
    ack = modern(server, "tasks/cancel", {"taskId": task_id})["result"]
    assert {key: value for key, value in ack.items() if key != "_meta"} == {"resultType": "complete"}
    assert legacy.call("tasks/get", {"taskId": task_id})["result"]["status"] == "cancelled"


def test_a_task_created_by_a_modern_client_is_seen_and_cancelled_by_a_legacy_one(server: ServerProcess) -> None:
    task_id = modern(server, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 30}})["result"]["taskId"]
    legacy = Legacy(server)
    task = legacy.call("tasks/get", {"taskId": task_id})["result"]
    assert (task["taskId"], task["status"]) == (task_id, "working")
    assert "ttl" in task and "ttlMs" not in task
    assert legacy.call("tasks/cancel", {"taskId": task_id})["result"]["status"] == "cancelled"
    assert modern(server, "tasks/get", {"taskId": task_id})["result"]["status"] == "cancelled"
    # Legacy semantics: a terminal task cannot be cancelled again (the modern era acks instead).
    again = legacy.call("tasks/cancel", {"taskId": task_id})
    assert again["error"]["code"] == INVALID_PARAMS
    assert again["error"]["message"] == "Cannot cancel task: already in terminal status 'cancelled'"
    assert modern(server, "tasks/cancel", {"taskId": task_id})["result"]["resultType"] == "complete"


def test_each_era_gets_its_own_errors(server: ServerProcess) -> None:
    legacy = Legacy(server)
    # A task-required tool without augmentation: -32601 for a legacy client, -32021 for a modern one.
    assert legacy.call("tools/call", {"name": "failing_job", "arguments": {}})["error"]["code"] == METHOD_NOT_FOUND
    assert (
        modern(server, "tools/call", {"name": "failing_job"}, capabilities={})["error"]["code"]
        == MISSING_REQUIRED_CLIENT_CAPABILITY
    )
    # Legacy methods on the modern path are unknown (-32601, HTTP 404), and a stray session header
    # does not make a modern request legacy.
    with httpx.Client(timeout=10.0, headers={"Mcp-Session-Id": "stray"}) as client:
        response, message = post(client, server.url, "tasks/list", {}, capabilities=CAPS)
    assert (response.status_code, message["error"]["code"]) == (404, METHOD_NOT_FOUND)
    # A legacy request without a session: a plain 400, never a modern -320xx code.
    no_session = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}})
    assert no_session.status_code == 400
    assert no_session.json()["error"]["code"] == INVALID_REQUEST


def test_a_legacy_client_waits_for_a_task_result(server: ServerProcess) -> None:
    legacy = Legacy(server)
    task_id = legacy.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3}, "task": {}})["result"][
        "task"
    ]["taskId"]
    body = {"jsonrpc": "2.0", "id": 99, "method": "tasks/result", "params": {"taskId": task_id}}
    response = legacy.client.post(legacy.url, json=body, headers=legacy.headers)
    final = [line for line in response.text.splitlines() if line.startswith("data:") and '"id":99' in line]
    assert final
    assert "io.modelcontextprotocol/related-task" in final[0]
    wait_for(lambda: modern(server, "tasks/get", {"taskId": task_id})["result"]["status"] == "completed", 5)


def test_the_legacy_get_stream_reports_task_status_changes(server: ServerProcess) -> None:
    legacy = Legacy(server)
    statuses: queue.Queue[dict[str, Any]] = queue.Queue()
    stop = threading.Event()
    opened = threading.Event()

    def read() -> None:
        with (
            contextlib.suppress(httpx.TransportError),
            legacy.client.stream(
                "GET", legacy.url, headers=legacy.headers, timeout=httpx.Timeout(10.0, read=20.0)
            ) as stream,
        ):
            for line in stream.iter_lines():
                opened.set()  # the stream's first line comes once its subscription is live
                if stop.is_set():
                    return
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if message.get("method") == "notifications/tasks/status":
                        statuses.put(message["params"])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert opened.wait(timeout=10)
    task_id = legacy.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.5}, "task": {}})["result"][
        "task"
    ]["taskId"]
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while not seen or seen[-1]["status"] != "completed":
        assert time.monotonic() < deadline, seen
        seen.append(statuses.get(timeout=15))
    stop.set()
    assert {status["taskId"] for status in seen} == {task_id}
    assert all("ttl" in status and "result" not in status for status in seen)  # legacy Task shape
