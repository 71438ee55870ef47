"""The same server on granian (``ext-tasks serve --server granian``): MRTR, a task, progress over SSE."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.cluster import wait_for
from tests.support.mcp_http import post
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("granian")
    with running_server(
        directory, tools="ext_tasks.examples.conformance", extra_args=("--server", "granian")
    ) as running:
        yield running


def test_granian_serves_mrtr_tasks_and_streams(server: ServerProcess) -> None:
    with httpx.Client(timeout=10.0) as client:
        name = "test_input_required_result_elicitation"
        _, first = post(client, server.url, "tools/call", {"name": name}, capabilities=CAPS)
        retry = {
            "name": name,
            "requestState": first["result"]["requestState"],
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Gran"}}},
        }
        _, done = post(client, server.url, "tools/call", retry, capabilities=CAPS)
        assert done["result"]["content"][0]["text"] == "Hello, Gran!"

        _, created = post(
            client, server.url, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2}}, capabilities=CAPS
        )
        task_id = created["result"]["taskId"]
        wait_for(
            lambda: (
                post(client, server.url, "tasks/get", {"taskId": task_id}, capabilities=CAPS)[1]["result"]["status"]
                == "completed"
            ),
            10,
            message="the task on granian",
        )

        response, final = post(
            client,
            server.url,
            "tools/call",
            {"name": "test_tool_with_progress", "_meta": {"progressToken": "p1"}},
            capabilities=CAPS,
        )
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.text.count("notifications/progress") >= 3
        assert final["result"]["resultType"] == "complete"
