"""Lifetimes across three ``ext-tasks serve`` instances behind nginx, on one Valkey and on the Valkey
Cluster (``tests.e2e.lifetime_tools``; every request may reach any instance):

- a task running three times its granted lifetime stays readable through every instance, each
  ``tasks/get`` telling a ``ttlMs`` whose end is still ahead, completes, and expires its retention
  after its end; a 2025-11-25 client is told the same truth as ``ttl``;
- retention by outcome, counted from the end (``EXT_TASKS_RETAIN_*_MS``): completed, then cancelled,
  then failed expire in that order, each at its own time;
- a run past its tool's ``timeout_s`` ends ``failed`` and its coroutine is cancelled where it ran;
- a wait for input past its ``input_timeout_s`` ends ``failed`` with nobody reading it (the workers'
  sweep), at its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_PARAMS
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.legacy import Session
from tests.support.mcp_http import post

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.lifetime_tools"
CAPABILITIES: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {"form": {}}}
GRANT_MS = 1_000  # the tools' ttl_ms and the server's EXT_TASKS_TASK_TTL_MS
RETAIN = {"completed": 2_000, "cancelled": 3_500, "failed": 5_000}
EXPIRED = "Failed to retrieve task: Task has expired"
WAIT_S = 20.0


def ms_of(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def fleet(tmp_path: Path, store_url: str | None) -> Iterator[tuple[Cluster, Path]]:
    journal = tmp_path / "journal.txt"
    env = {
        "EXT_TASKS_TASK_TTL_MS": str(GRANT_MS),
        "EXT_TASKS_RETAIN_COMPLETED_MS": str(RETAIN["completed"]),
        "EXT_TASKS_RETAIN_CANCELLED_MS": str(RETAIN["cancelled"]),
        "EXT_TASKS_RETAIN_FAILED_MS": str(RETAIN["failed"]),
        "EXT_TASKS_LEASE_S": "1",  # the sweep of overdue waits runs every half lease
        "E2E_TASK_JOURNAL": str(journal),
    }
    with running_cluster(tmp_path, tools=TOOLS, env=env, valkey_url=store_url) as cluster:
        yield cluster, journal


class Api:
    def __init__(self, cluster: Cluster, client: httpx.Client) -> None:
        self.url = cluster.url
        self.client = client

    def message(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        _, message = post(self.client, self.url, method, params, capabilities=CAPABILITIES)
        return message

    def create(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.message("tools/call", {"name": tool, "arguments": arguments})["result"]
        assert result["resultType"] == "task", result
        return result

    def get(self, task_id: str) -> dict[str, Any]:
        message = self.message("tasks/get", {"taskId": task_id})
        assert "result" in message, message
        task: dict[str, Any] = message["result"]
        return task

    def expired(self, task_id: str) -> bool:
        message = self.message("tasks/get", {"taskId": task_id})
        if "error" not in message:
            return False
        assert (message["error"]["code"], message["error"]["message"]) == (INVALID_PARAMS, EXPIRED), message
        return True

    def until(self, task_id: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def matches() -> bool:
            found.update(self.get(task_id))
            return check(found)

        wait_for(matches, WAIT_S)
        return found


@pytest.fixture
def api(fleet: tuple[Cluster, Path]) -> Iterator[Api]:
    with httpx.Client(timeout=10.0) as client:
        yield Api(fleet[0], client)


def test_a_task_running_past_its_ttl_stays_readable_and_completes(api: Api, fleet: tuple[Cluster, Path]) -> None:
    created = api.create("outlives", {"seconds": 3 * GRANT_MS / 1000})
    task_id, created_at = created["taskId"], ms_of(created["createdAt"])
    assert created["ttlMs"] == GRANT_MS
    legacy = Session(fleet[0].url)
    legacy_task = legacy.call("tools/call", {"name": "outlives", "arguments": {"seconds": 2.5}, "task": {"ttl": 800}})
    legacy_id = legacy_task["result"]["task"]["taskId"]
    assert legacy_task["result"]["task"]["ttl"] == 800  # the client's hint, granted
    ends, legacy_ends = [], []
    deadline = time.monotonic() + WAIT_S
    while (task := api.get(task_id))["status"] == "working":
        read_at = now_ms()
        ends.append(created_at + task["ttlMs"])
        assert created_at + task["ttlMs"] > read_at, task  # never a lifetime already over
        legacy_seen = legacy.call("tasks/get", {"taskId": legacy_id})["result"]
        if legacy_seen["status"] == "working":
            assert ms_of(legacy_seen["createdAt"]) + legacy_seen["ttl"] > now_ms(), legacy_seen
            legacy_ends.append(legacy_seen["ttl"])
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert task["status"] == "completed", task
    assert max(ends) > created_at + 2 * GRANT_MS  # read well past its first lifetime, and still there
    assert legacy_ends and max(legacy_ends) > 800  # the legacy era is told the same growing truth
    ended_at = ms_of(task["lastUpdatedAt"])
    assert created_at + task["ttlMs"] == ended_at + RETAIN["completed"]  # retention from its end
    wait_for(lambda: api.expired(task_id), RETAIN["completed"] / 1000 + 5)
    assert now_ms() >= ended_at + RETAIN["completed"] - 100
    legacy.close()


def test_retention_by_outcome_counts_from_the_end(api: Api) -> None:
    done = api.create("outlives", {"seconds": 0})["taskId"]
    broken = api.create("breaks", {})["taskId"]
    dropped = api.create("outlives", {"seconds": 30})["taskId"]
    assert "result" in api.message("tasks/cancel", {"taskId": dropped})
    ends = {}
    for outcome, task_id in (("completed", done), ("failed", broken), ("cancelled", dropped)):
        task = api.until(task_id, lambda t, o=outcome: t["status"] == o)  # type: ignore[misc]
        ends[outcome] = ms_of(task["lastUpdatedAt"])
        assert ms_of(task["createdAt"]) + task["ttlMs"] == ends[outcome] + RETAIN[outcome], (outcome, task)
    wait_for(lambda: api.expired(done), WAIT_S)
    assert not api.expired(dropped) and not api.expired(broken)
    wait_for(lambda: api.expired(dropped), WAIT_S)
    assert now_ms() >= ends["cancelled"] + RETAIN["cancelled"] - 100
    assert not api.expired(broken)  # failures are kept longest
    wait_for(lambda: api.expired(broken), WAIT_S)
    assert now_ms() >= ends["failed"] + RETAIN["failed"] - 100


def test_a_run_past_its_timeout_ends_failed_and_is_stopped_where_it_ran(
    api: Api, fleet: tuple[Cluster, Path]
) -> None:
    _, journal = fleet
    created = api.create("bounded", {"seconds": 30})
    task = api.until(created["taskId"], lambda t: t["status"] != "working")
    assert task["status"] == "failed", task
    assert task["statusMessage"] == "Task failed: The tool ran longer than its timeout of 1 s; it was stopped"
    assert task["error"]["data"] == {"timeout": "run", "limitSeconds": 1}
    took = ms_of(task["lastUpdatedAt"]) - ms_of(task["createdAt"])
    assert 1_000 <= took < 5_000, took
    wait_for(lambda: journal.exists() and f"stopped {created['taskId']}" in journal.read_text(), 5)
    pids = {server.process.pid for server in fleet[0].servers}
    (line,) = [line for line in journal.read_text().splitlines() if created["taskId"] in line]
    assert int(line.split()[-1]) in pids  # cancelled in the instance that ran it


def test_an_input_timeout_ends_the_task_failed_with_nobody_polling(api: Api) -> None:
    created = api.create("asks", {})
    waiting = api.until(created["taskId"], lambda t: t["status"] == "input_required")
    began = ms_of(waiting["lastUpdatedAt"])
    # Nobody reads the task now: only the workers' sweep (every half lease, 0.5 s) can end it.
    time.sleep(3.0)
    read_at = now_ms()
    task = api.get(created["taskId"])
    assert task["status"] == "failed", task
    assert task["statusMessage"] == "Task failed: No answer came within the tool's input timeout of 1 s"
    assert "inputRequests" not in task
    ended = ms_of(task["lastUpdatedAt"])
    assert began + 1_000 <= ended <= began + 1_000 + 1_500, (began, ended)  # at its deadline, by the sweep
    assert ended < read_at - 500  # long before anyone looked
    assert ms_of(task["createdAt"]) + task["ttlMs"] == ended + RETAIN["failed"]
