"""Tasks behind a round-robin balancer: three ``ext-tasks serve`` processes on one Valkey, nginx in front.

Every request may reach any instance, so nothing about a task may live in one process: a task created
on one instance is readable, answerable and completed through the others, and a task whose process is
SIGKILLed is taken over by a surviving one once its lease runs out (``tests.support.cluster``).
Raw HTTP (httpx): every request carries the 2026-07-28 headers and ``_meta`` of ``tests.support.mcp_http``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import HEADER_MISMATCH
from tests.e2e.test_conformance import SCORED_SCENARIOS, assert_all_passed, run_referee
from tests.e2e.test_conformance_tasks import TASK_SCENARIOS
from tests.support.cluster import (
    Cluster,
    fleet_env,
    keygen,
    running_cluster,
    running_servers,
    running_worker,
    wait_for,
)
from tests.support.history import History
from tests.support.mcp_http import modern_request, post
from tests.support.processes import running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CAPABILITIES: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}, "elicitation": {"form": {}}}
TERMINAL = frozenset({"completed", "failed", "cancelled"})
STATUSES = frozenset({"working", "input_required", *TERMINAL})
PID = re.compile(r"\bpid (\d+)\b")
TASK_TOOLS = "tests.e2e.task_tools"

REFEREE = os.environ.get("EXT_TASKS_CONFORMANCE_PKG") or "@modelcontextprotocol/conformance@0.2.0-alpha.12"
REFEREE_TIMEOUT_S = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PASSED_LINE = re.compile(r"^Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings?$")

# The SIGKILL test: enough tasks to keep every worker of the fleet busy (3 x 16 slots) and queue more.
KILL_TASKS = 60
KILL_SLEEP_S = 3.0
KILL_LEASE_S = 2
RECOVERY_TIMEOUT_S = 60.0


class TaskApi:
    """``tools/call`` of a task tool and ``tasks/get|update`` over raw HTTP, declaring the extension."""

    def __init__(self, client: httpx.Client, history: History | None = None) -> None:
        self.client = client
        #: Every acknowledged creation and every status seen, checked when the test ends.
        self.history = history if history is not None else History()

    def message(self, url: str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        response, message = post(self.client, url, method, params, capabilities=CAPABILITIES)
        assert response.status_code in (200, 400, 404), (
            f"{method} {params}: HTTP {response.status_code} {response.text}"
        )
        return message

    def create(self, url: str, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The ``CreateTaskResult`` of ``tools/call`` (asserted flat, ``resultType: task``)."""
        message = self.message(url, "tools/call", {"name": tool, "arguments": dict(arguments)})
        assert "result" in message, message
        result: dict[str, Any] = message["result"]
        assert result["resultType"] == "task", result
        assert isinstance(result["taskId"], str), result
        assert result["taskId"], result
        self.history.acknowledged(result["taskId"])
        return result

    def get_message(self, url: str, task_id: str) -> dict[str, Any]:
        sent = self.history.now()
        message = self.message(url, "tasks/get", {"taskId": task_id})
        self.history.answered(task_id, sent, message)
        return message

    def get(self, url: str, task_id: str) -> dict[str, Any]:
        """The ``DetailedTask`` of ``tasks/get`` (asserted to succeed and to be about ``task_id``)."""
        message = self.get_message(url, task_id)
        assert "result" in message, f"tasks/get {task_id} at {url}: {message}"
        task: dict[str, Any] = message["result"]
        assert task["taskId"] == task_id, task
        assert task["resultType"] == "complete", task
        return task

    def update(self, url: str, task_id: str, responses: Mapping[str, Any]) -> dict[str, Any]:
        message = self.message(url, "tasks/update", {"taskId": task_id, "inputResponses": dict(responses)})
        assert "result" in message, message
        ack: dict[str, Any] = message["result"]
        return ack


@contextlib.contextmanager
def checked_api() -> Iterator[TaskApi]:
    """The raw task API; at the end, what it saw must obey the history rules (no acknowledged task
    lost, terminal is final, attempts bounded: ``tests.support.history``)."""
    with httpx.Client(timeout=15.0, limits=httpx.Limits(max_connections=16)) as client:
        api = TaskApi(client)
        yield api
    print(f"history: {api.history.summary()}")
    assert api.history.violations() == []


@pytest.fixture
def api() -> Iterator[TaskApi]:
    with checked_api() as api:
        yield api


def pid_in(text: object) -> int | None:
    match = PID.search(text) if isinstance(text, str) else None
    return int(match[1]) if match else None


def result_text(task: Mapping[str, Any]) -> str:
    content = task["result"]["content"]
    assert isinstance(content, list), task
    assert content, task
    assert content[0]["type"] == "text", task
    text: str = content[0]["text"]
    return text


def wall_ms(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp).timestamp() * 1000


# --- a. the referee's tasks scenarios through nginx ---------------------------------------------------


def npx() -> str:
    found = shutil.which("npx")
    if found is None:
        pytest.fail("npx is not on PATH: install Node.js to run the MCP conformance referee", pytrace=False)
    return found


def failed_checks(out_dir: Path) -> list[str]:
    """FAILURE checks recorded in the referee's result files (belt and braces next to its summary)."""
    found = []
    for checks_file in sorted(out_dir.glob("*/checks.json")):
        for check in json.loads(checks_file.read_text()):
            if check.get("status") == "FAILURE":
                found.append(f"{check.get('id')}: {check.get('errorMessage') or check.get('description')}")
    return found


@pytest.mark.parametrize("scenario", TASK_SCENARIOS)
def test_tasks_scenario_passes_through_the_balancer(
    conformance_cluster: Cluster, scenario: str, tmp_path: Path
) -> None:
    out_dir = tmp_path / "results"
    command = f"conformance server --url {conformance_cluster.url} --scenario {scenario} -o {out_dir}"
    argv = [npx(), "-y", "-p", "node@22", "-p", REFEREE, "-c", command]
    try:
        completed = subprocess.run(
            argv, capture_output=True, text=True, timeout=REFEREE_TIMEOUT_S, cwd=tmp_path, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the referee did not finish {scenario} within {REFEREE_TIMEOUT_S}s\nstdout:\n{exc.stdout!r}")
    output = _ANSI.sub("", completed.stdout)
    passed_lines = [line.strip() for line in output.splitlines() if _PASSED_LINE.match(line.strip())]
    assert passed_lines, f"no 'Passed: ...' line for {scenario}:\n{output[-4000:]}\nstderr:\n{completed.stderr[-4000:]}"
    print(f"{scenario} via nginx: {passed_lines[-1]} (exit {completed.returncode})")
    match = _PASSED_LINE.match(passed_lines[-1])
    assert match is not None
    passed, total, failed = int(match[1]), int(match[2]), int(match[3])
    details = f"{output[-6000:]}\n{conformance_cluster.logs()[-6000:]}"
    assert failed == 0, details
    assert passed == total, details
    assert total > 0, details
    assert failed_checks(out_dir) == [], details
    assert completed.returncode == 0, details
    # The referee's requests really were spread over the fleet (cumulative over the module's scenarios).
    used = conformance_cluster.balancer.upstreams_used()
    print(f"requests per upstream so far: {dict(used)}")
    assert {f"127.0.0.1:{server.port}" for server in conformance_cluster.servers} <= set(used), used


@dataclass
class FleetUnderReferee:
    """A fleet as the referee sees it: the balancer's URL, and every instance's log for the report."""

    cluster: Cluster

    @property
    def url(self) -> str:
        return self.cluster.url

    def log(self) -> str:
        return self.cluster.logs()[-8000:]


def test_scored_2026_07_28_requirements_pass_through_the_balancer(conformance_cluster: Cluster, tmp_path: Path) -> None:
    fleet = FleetUnderReferee(conformance_cluster)
    out_dir = tmp_path / "requirements-2026-07-28"
    run = run_referee(fleet, out_dir, "--requirements", "2026-07-28")
    scored = set(run.scenarios) - run.not_scored
    assert len(scored) == SCORED_SCENARIOS, sorted(scored)
    assert_all_passed(run, scored, fleet)
    scored_passed = sum(run.scenarios[name].passed for name in scored)
    print(f"scored through nginx on {conformance_cluster.valkey_url}: {len(scored)} scenarios, {scored_passed} checks")
    assert run.returncode == 0, run.summary()
    assert run.failing_unscored == set(), run.summary()


# --- b. tasks/get on any instance straight after CreateTaskResult --------------------------------------


def test_tasks_get_succeeds_on_every_instance_right_after_create(tools_cluster: Cluster, api: TaskApi) -> None:
    a, b, c = tools_cluster.servers

    def create_then_read(_: int) -> tuple[str, list[dict[str, Any]]]:
        task_id = api.create(a.url, "sleepy", {"seconds": 0.2})["taskId"]
        return task_id, [api.get_message(server.url, task_id) for server in (b, c)]

    with ThreadPoolExecutor(max_workers=6) as pool:
        outcomes = list(pool.map(create_then_read, range(30)))

    task_ids = [task_id for task_id, _ in outcomes]
    assert len(set(task_ids)) == 30
    failures = [
        (task_id, message)
        for task_id, messages in outcomes
        for message in messages
        if "result" not in message
        or message["result"].get("taskId") != task_id
        or message["result"].get("status") not in STATUSES
    ]
    assert failures == [], f"{len(failures)} of 60 immediate tasks/get failed, e.g. {failures[:3]}"

    # The tasks also finish (so the module's fleet is idle again for the next test).
    def all_completed() -> bool:
        return all(api.get(tools_cluster.url, task_id)["status"] == "completed" for task_id in task_ids)

    wait_for(all_completed, 30, interval_s=0.2, message="the 30 sleepy tasks completed")


# --- c. input asked on one instance, answered on another, finished on a third --------------------------


def test_input_required_answered_through_another_instance_completes(tools_cluster: Cluster, api: TaskApi) -> None:
    a, b, c = tools_cluster.servers
    created = api.create(a.url, "ask_then_finish", {"label": "release 42"})
    task_id = created["taskId"]
    assert created["status"] == "working", created

    def asking() -> dict[str, Any] | None:
        task = api.get(b.url, task_id)
        assert task["status"] in ("working", "input_required"), task
        return task if task["status"] == "input_required" else None

    asked = wait_for(asking, 30, message=f"task {task_id} input_required on B")
    assert list(asked["inputRequests"]) == ["name"], asked
    request = asked["inputRequests"]["name"]
    assert request["method"] == "elicitation/create", request
    assert request["params"]["message"] == "Who finishes release 42?", request

    ack = api.update(c.url, task_id, {"name": {"action": "accept", "content": {"name": "Ada"}}})
    assert ack.get("resultType") == "complete", ack
    assert not {"taskId", "status", "result", "error", "inputRequests"} & set(ack), ack

    def finished() -> dict[str, Any] | None:
        task = api.get(a.url, task_id)
        return task if task["status"] in TERMINAL else None

    done = wait_for(finished, 30, message=lambda: f"task {task_id} terminal on A\n{tools_cluster.logs()[-4000:]}")
    assert done["status"] == "completed", done
    assert done["result"]["isError"] is False, done
    text = result_text(done)
    match = re.fullmatch(r"release 42 finished by Ada in pid (\d+)", text)
    assert match is not None, text
    assert int(match[1]) in {server.process.pid for server in tools_cluster.servers}, text


# --- c2. tasks/* without Mcp-Name, as some real tasks clients send them -------------------------------


def without_mcp_name(api: TaskApi, url: str, method: str, params: Mapping[str, Any], name: str | None) -> Any:
    headers, body = modern_request(method, params, capabilities=CAPABILITIES)
    headers.pop("Mcp-Name")
    if name is not None:
        headers["Mcp-Name"] = name
    return api.client.post(url, headers=headers, json=body)


def test_task_methods_without_mcp_name_are_served_on_every_instance(tools_cluster: Cluster, api: TaskApi) -> None:
    urls = [server.url for server in tools_cluster.servers] + [tools_cluster.url]
    task_id = api.create(urls[0], "ask_then_finish", {"label": "headerless"})["taskId"]
    wait_for(lambda: api.get(urls[1], task_id)["status"] == "input_required", 30, message="input_required")
    for url in urls:
        got = without_mcp_name(api, url, "tasks/get", {"taskId": task_id}, None)
        assert got.status_code == 200, got.text
        assert got.json()["result"]["status"] == "input_required"
        # A present but different Mcp-Name is still refused, on every instance.
        wrong = without_mcp_name(api, url, "tasks/get", {"taskId": task_id}, "another-task")
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, HEADER_MISMATCH)
    answer = {"taskId": task_id, "inputResponses": {"name": {"action": "accept", "content": {"name": "Bo"}}}}
    updated = without_mcp_name(api, urls[2], "tasks/update", answer, None)
    assert updated.status_code == 200, updated.text
    wait_for(lambda: api.get(urls[0], task_id)["status"] == "completed", 30, message="completed")
    long_running = api.create(urls[1], "sleepy", {"seconds": 30})["taskId"]
    cancelled = without_mcp_name(api, urls[3], "tasks/cancel", {"taskId": long_running}, None)
    assert cancelled.status_code == 200, cancelled.text
    assert api.get(urls[2], long_running)["status"] == "cancelled"
    scrape = httpx.get(tools_cluster.servers[0].url.removesuffix("/mcp") + "/metrics").text
    assert re.search(r'^ext_tasks_header_tolerated_total\{header="Mcp-Name"\} [1-9]', scrape, re.MULTILINE), scrape


def test_strict_headers_refuse_task_methods_without_mcp_name(tmp_path: Path, api: TaskApi) -> None:
    with running_server(tmp_path, tools=TASK_TOOLS, env={"EXT_TASKS_STRICT_HEADERS": "true"}) as server:
        task_id = api.create(server.url, "sleepy", {"seconds": 0.1})["taskId"]
        refused = without_mcp_name(api, server.url, "tasks/get", {"taskId": task_id}, None)
        assert (refused.status_code, refused.json()["error"]["code"]) == (400, HEADER_MISMATCH)
        assert "Mcp-Name is missing" in refused.json()["error"]["message"]
        assert api.get(server.url, task_id)["taskId"] == task_id  # with the header it is served


# --- d. SIGKILL of an instance that is running tasks ---------------------------------------------------


def test_sigkill_of_an_instance_running_tasks_loses_none(tmp_path: Path, api: TaskApi, store_url: str | None) -> None:
    env = {"EXT_TASKS_LEASE_S": str(KILL_LEASE_S), "EXT_TASKS_SHUTDOWN_GRACE_S": "1"}
    with running_cluster(tmp_path, tools=TASK_TOOLS, env=env, valkey_url=store_url) as cluster:
        task_ids = [api.create(cluster.url, "sleepy", {"seconds": KILL_SLEEP_S})["taskId"] for _ in range(KILL_TASKS)]
        assert len(set(task_ids)) == KILL_TASKS

        def snapshot_once_running() -> dict[str, dict[str, Any]] | None:
            servers = cluster.servers
            snapshot = {task_id: api.get(servers[i % 3].url, task_id) for i, task_id in enumerate(task_ids)}
            running = [
                task
                for task in snapshot.values()
                if task["status"] not in TERMINAL and pid_in(task.get("statusMessage"))
            ]
            return snapshot if running else None

        before = wait_for(snapshot_once_running, 30, message="a sleepy task reporting its pid")
        in_flight = {task_id for task_id, task in before.items() if task["status"] not in TERMINAL}
        running_on = Counter(pid_in(before[task_id].get("statusMessage")) for task_id in in_flight)
        running_on.pop(None, None)
        victim_pid = running_on.most_common(1)[0][0]
        assert victim_pid is not None
        victim = cluster.by_pid(victim_pid)
        on_victim = {task_id for task_id in in_flight if pid_in(before[task_id].get("statusMessage")) == victim_pid}

        os.kill(victim_pid, signal.SIGKILL)
        killed_wall_ms = time.time() * 1000
        killed_at = time.monotonic()
        victim.process.wait(timeout=10)
        survivors = cluster.alive()
        assert len(survivors) == 2
        survivor_pids = {server.process.pid for server in survivors}

        latest: dict[str, dict[str, Any]] = {}

        def all_terminal() -> bool:
            # One request at a time, alternating between the live instances (never the dead one).
            for i, task_id in enumerate(task_ids):
                if task_id not in latest or latest[task_id]["status"] not in TERMINAL:
                    latest[task_id] = api.get(survivors[i % 2].url, task_id)
            return all(task["status"] in TERMINAL for task in latest.values())

        def pending() -> str:
            waiting = Counter(task["status"] for task in latest.values() if task["status"] not in TERMINAL)
            return f"all {KILL_TASKS} tasks terminal; still {dict(waiting)}\n{cluster.logs()[-6000:]}"

        wait_for(all_terminal, RECOVERY_TIMEOUT_S, interval_s=0.1, message=pending)
        observed_s = time.monotonic() - killed_at

        # Nothing lost: every task still answers on every live instance, completed.
        final: dict[str, dict[str, Any]] = {}
        lost = []
        for task_id in task_ids:
            for server in survivors:
                message = api.get_message(server.url, task_id)
                if "result" not in message:
                    lost.append((task_id, server.port, message))
                else:
                    final[task_id] = message["result"]
        last_completion_ms = max(wall_ms(task["lastUpdatedAt"]) for task in final.values())
        recovery_s = (last_completion_ms - killed_wall_ms) / 1000
        print(
            f"\nSIGKILL of pid {victim_pid}: {len(task_ids)} tasks created, {len(in_flight)} in flight at the kill, "
            f"{len(on_victim)} running on the killed instance, running per pid {dict(running_on)}; "
            f"lost {len(lost)}; last completion {recovery_s:.2f}s after the kill (seen by polling after "
            f"{observed_s:.2f}s)"
        )
        assert lost == [], lost[:5]
        not_completed = {task_id: task for task_id, task in final.items() if task["status"] != "completed"}
        assert not_completed == {}, list(not_completed.values())[:3]
        assert on_victim, "the killed instance was running no task"
        finished_by = {task_id: pid_in(result_text(final[task_id])) for task_id in task_ids}
        assert set(finished_by.values()) <= {server.process.pid for server in cluster.servers}, finished_by
        # Whatever was not finished at the kill (running on the victim, elsewhere, or queued) finished on a survivor.
        wrong = {task_id: finished_by[task_id] for task_id in in_flight if finished_by[task_id] not in survivor_pids}
        assert wrong == {}, f"in-flight tasks finished by a pid other than the survivors {survivor_pids}: {wrong}"
        # Run twice only where the attempt count says so: exactly the runs the killed instance held.
        attempts = {task_id: final[task_id]["_meta"]["dev.ext-tasks/runAttempts"] for task_id in task_ids}
        twice = {task_id for task_id, count in attempts.items() if count > 1}
        print(f"tasks run twice (attempt count 2): {len(twice)}; on the killed instance: {len(on_victim)}")
        assert on_victim <= twice, "a run lost with the killed instance was redone without counting it"
        assert set(attempts.values()) <= {1, 2}, attempts


# --- e. ext-tasks worker alone runs the tasks of a server without workers -----------------------------


def test_a_separate_worker_runs_the_tasks_of_a_server_without_workers(tmp_path: Path, api: TaskApi) -> None:
    with running_valkey(tmp_path / "valkey") as valkey:
        shared = fleet_env(keygen(), {"EXT_TASKS_LEASE_S": "2", "EXT_TASKS_SHUTDOWN_GRACE_S": "1"})
        server_env = {**shared, "EXT_TASKS_NO_WORKERS": "true"}
        with running_servers(tmp_path, count=1, tools=TASK_TOOLS, valkey=valkey, env=server_env) as [server]:
            task_id = api.create(server.url, "sleepy", {"seconds": 0.1})["taskId"]

            # Without a worker nothing runs it: it stays working and unstarted (no pid) for a while. The
            # server's own worker would have taken it at once, so two seconds of this is conclusive.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                task = api.get(server.url, task_id)
                assert task["status"] == "working", task
                assert pid_in(task.get("statusMessage")) is None, task
                time.sleep(0.1)

            with running_worker(tmp_path, tools=TASK_TOOLS, valkey=valkey, env=shared) as worker:

                def finished() -> dict[str, Any] | None:
                    task = api.get(server.url, task_id)
                    return task if task["status"] in TERMINAL else None

                def why() -> str:
                    state = (
                        "exited " + str(worker.process.returncode) if worker.process.poll() is not None else "running"
                    )
                    return f"task {task_id} terminal; worker {state}, its log:\n{worker.log()}\nserver:\n{server.log()}"

                done = wait_for(finished, 30, message=why)
                assert done["status"] == "completed", done
                assert result_text(done) == f"slept 0.1s in pid {worker.process.pid}", done
                assert worker.process.poll() is None, worker.log()
