"""The real ``mcp==2.3.0`` client, with a small SEP-2663 client extension, against our Tasks extension.

The client (``clients/mcp2_tasks_client.py``) runs in its own interpreter (``EXT_TASKS_MCP2_PYTHON``,
default ``.venvs/mcp2/bin/python``) so that mcp 2.x never shares an environment with the dev tools. It
calls a task tool and lets its ``resultType: "task"`` claim poll ``tasks/get`` to completion, answers
input asked inside a task through ``tasks/update``, and cancels a long task with ``tasks/cancel``; it
prints what it saw as JSON, and this test checks it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.task_client_tools import CANCELLED_LINE
from tests.support.clients import mcp2_python, run_json_client
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

CLIENT_SCRIPT = Path(__file__).parent / "clients" / "mcp2_tasks_client.py"
CLIENT_TIMEOUT_S = 90
POLL_INTERVAL_MS = 50
TTL_MS = 600_000
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
TASK_KEYS = {"resultType", "taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"EXT_TASKS_POLL_INTERVAL_MS": str(POLL_INTERVAL_MS), "EXT_TASKS_TASK_TTL_MS": str(TTL_MS)}
    with running_server(tmp_path_factory.mktemp("mcp2-tasks"), tools="tests.e2e.task_client_tools", env=env) as process:
        yield process


@pytest.fixture(scope="module")
def observed(server: ServerProcess) -> dict[str, Any]:
    return run_json_client(mcp2_python(), CLIENT_SCRIPT, server.url, timeout_s=CLIENT_TIMEOUT_S, context=server.log)


def assert_create_task_result(created: dict[str, Any]) -> None:
    """A flat CreateTaskResult (protocol.md §3.4-3.5) as the real client received it."""
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert set(created) - {"_meta"} <= TASK_KEYS
    assert isinstance(created["taskId"], str)
    assert len(created["taskId"]) >= 16
    assert type(created["ttlMs"]) is int
    assert created["ttlMs"] == TTL_MS
    assert type(created["pollIntervalMs"]) is int
    assert created["pollIntervalMs"] == POLL_INTERVAL_MS
    assert ISO_Z.match(created["createdAt"])
    assert ISO_Z.match(created["lastUpdatedAt"])
    for absent in ("result", "requestState", "task", "inputRequests", "ttl", "pollInterval"):
        assert absent not in created


def test_the_client_negotiates_2026_07_28_and_lists_the_task_tools(observed: dict[str, Any]) -> None:
    assert observed["protocolVersion"] == "2026-07-28"
    assert observed["tools"] == ["approve_release", "long_export", "quick_sum"]


def test_a_task_is_created_and_polled_to_completed_by_the_claim(observed: dict[str, Any]) -> None:
    assert observed["quick_sum"] == {"texts": ["2 + 3 = 5"], "isError": False}
    task = observed["tasks"]["quick_sum"]
    assert_create_task_result(task["created"])
    assert task["statuses"][-1] == "completed"
    assert set(task["statuses"]) <= {"working", "completed"}
    assert task["updates"] == []
    last = task["last"]
    assert last["resultType"] == "complete"  # tasks/get answers "complete", never "task"
    assert last["taskId"] == task["created"]["taskId"]
    assert last["createdAt"] == task["created"]["createdAt"]
    assert last["result"]["content"] == [{"type": "text", "text": "2 + 3 = 5"}]
    assert last["result"]["isError"] is False
    assert "error" not in last
    assert "inputRequests" not in last


def test_input_asked_inside_a_task_is_answered_through_tasks_update(observed: dict[str, Any]) -> None:
    assert observed["approve_release"] == {"texts": ["Release 1.2.3 approved by Ada."], "isError": False}
    task = observed["tasks"]["approve_release"]
    assert_create_task_result(task["created"])
    statuses = task["statuses"]
    assert "input_required" in statuses
    assert statuses[-1] == "completed"
    assert statuses.index("input_required") < len(statuses) - 1
    # Both questions were outstanding at once and were answered in one tasks/update, acked empty.
    assert task["updates"] == [
        {"keys": ["approver", "confirm"], "ack": {"keys": ["resultType"], "resultType": "complete"}}
    ]
    questions = {entry["key"]: (entry["message"], entry["answer"]) for entry in observed["questions"]}
    assert questions == {
        "approver": ("Who approves release 1.2.3?", {"approver": "Ada"}),
        "confirm": ("Ship release 1.2.3?", {"confirm": True}),
    }
    last = task["last"]
    assert last["status"] == "completed"
    assert last["statusMessage"] == "Shipping 1.2.3"
    assert last["result"]["content"] == [{"type": "text", "text": "Release 1.2.3 approved by Ada."}]
    # Input inside a task never goes through the MRTR callbacks.
    assert observed["callbacks"] == {"elicitation": 0}


def test_a_running_task_is_cancelled_with_tasks_cancel(observed: dict[str, Any], server: ServerProcess) -> None:
    cancel = observed["long_export"]
    assert_create_task_result(cancel["created"])
    assert cancel["before"] == "working"
    assert cancel["ack"] == {"keys": ["resultType"], "resultType": "complete"}
    after = cancel["after"]
    assert after["status"] == "cancelled"
    assert not {"result", "error", "inputRequests"} & set(after)
    # Cancelling a terminal task is acknowledged again, and nothing changes.
    assert cancel["againAck"] == {"keys": ["resultType"], "resultType": "complete"}
    assert cancel["final"] == after

    # The worker cancelled the running coroutine (the tool logs it when it sees the cancellation).
    deadline = time.monotonic() + 10
    while CANCELLED_LINE not in server.log():
        if time.monotonic() > deadline:
            pytest.fail(f"the cancelled tool never saw its cancellation; server log:\n{server.log()}")
        time.sleep(0.05)
