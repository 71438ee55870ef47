"""The official TypeScript Tasks client, ``@modelcontextprotocol/ext-tasks@0.2.2`` on
``@modelcontextprotocol/client@2.4.0``, against real server processes, in both protocol eras.

``ts_tasks/driver.mjs`` (plain ESM, run by Node 22) drives the package: a task run to completion,
input asked inside a task and answered through the client's input callback, the cancel of a
long task, a tool error, a JSON-RPC failure, an inline result, a task handed off by one session
and resumed by another, and a handed-off task that then asks the resuming session a question. It
prints what the package reported (outcomes, task views, input requests) and a log of every HTTP
request its SDK clients sent; this test asserts on that.

- ``modern``: the SDK client pins 2026-07-28 (``server/discover``); the task session gets the raw
  dispatch and the request framing the package requires for the Tasks extension.
- ``legacy``: the SDK client does the 2025-11-25 ``initialize``; the package takes its
  experimental-tasks path through the migration shim (``tasks/get`` polling, ``tasks/result`` once
  terminal, input as server→client requests).

Runs against one in-memory server, and the modern era again through nginx round-robin over three
instances on one Valkey. Node 22 and the driver's packages come from ``bash scripts/test.sh``
(``npm ci`` in ``tests/e2e/ts_tasks``); without them the test fails, saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ext_tasks.protocol.errors import INTERNAL_ERROR
from tests.e2e.ts_tools import BROKEN_DATA, BROKEN_MESSAGE, CANCELLED_LINE
from tests.support.clients import run_json_client
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.node import node22 as node22_binary
from tests.support.node import require_packages
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

TS_DIR = Path(__file__).parent / "ts_tasks"
DRIVER = TS_DIR / "driver.mjs"
TOOLS = "tests.e2e.ts_tools"
PINNED = {"@modelcontextprotocol/ext-tasks": "0.2.2", "@modelcontextprotocol/client": "2.4.0"}
SERVER_ENV = {"EXT_TASKS_POLL_INTERVAL_MS": "50"}
SCENARIO_TIMEOUT_MS = 15_000
INPUT_GRACE_MS = 5_000
DRIVER_TIMEOUT_S = 90
CANCEL_SEEN_TIMEOUT_S = 10
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
HANDOFF_QUESTION = "Who reviews quarterly-report?"
HANDOFF_TEXT = re.compile(r"^nightly-report done \(started in pid (\d+), finished in pid (\d+)\)$")
SETUP_HINT = "run bash scripts/test.sh (it fetches Node 22 and runs npm ci in tests/e2e/ts_tasks)"


# --- Node 22 and the driver's packages ------------------------------------------------------------


@pytest.fixture(scope="module")
def node22() -> Path:
    """The Node 22 binary (resolved once through npx), with the driver's pinned packages installed."""
    require_packages(TS_DIR, PINNED, SETUP_HINT)
    return node22_binary(SETUP_HINT)


# --- Targets and runs -----------------------------------------------------------------------------


@dataclass
class Run:
    """One run of the driver: which era, against what, and what the package observed."""

    mode: str
    target: str
    observed: dict[str, Any]
    logs: Callable[[], str]
    cluster: Cluster | None = None

    def scenario(self, name: str) -> dict[str, Any]:
        """The record of one scenario; fails with the client's error and what it saw, if it failed."""
        record: dict[str, Any] = self.observed["scenarios"][name]
        if not record["ok"]:
            seen = {key: record[key] for key in ("kind", "taskId", "events", "questions") if key in record}
            rpcs = [entry.get("rpc") for entry in record.get("wire", []) if "http" in entry]
            pytest.fail(
                f"[{self.target}/{self.mode}] scenario {name!r} failed in the TypeScript client: "
                f"{record['error']}\nit saw: {json.dumps(seen)}\nits requests: {rpcs}\n"
                f"--- server log (tail)\n{self.logs()[-6000:]}",
                pytrace=False,
            )
        return record


def drive(node: Path, url: str, mode: str, logs: Callable[[], str]) -> dict[str, Any]:
    return run_json_client(
        node,
        DRIVER,
        "--url",
        url,
        "--mode",
        mode,
        "--scenario-timeout-ms",
        str(SCENARIO_TIMEOUT_MS),
        "--input-grace-ms",
        str(INPUT_GRACE_MS),
        timeout_s=DRIVER_TIMEOUT_S,
        context=lambda: f"--- server log (tail)\n{logs()[-6000:]}",
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("ts-tasks"), tools=TOOLS, env=SERVER_ENV) as process:
        yield process


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three instances of the same tools on one Valkey, behind nginx round-robin."""
    with running_cluster(tmp_path_factory.mktemp("ts-tasks-fleet"), tools=TOOLS, env=SERVER_ENV) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, node22: Path) -> Callable[[str, str], Run]:
    """Runs the driver once per (target, mode) in this module, starting the target on first use."""
    done: dict[tuple[str, str], Run] = {}

    def get(target: str, mode: str) -> Run:
        if (target, mode) not in done:
            if target == "memory":
                process: ServerProcess = request.getfixturevalue("server")
                done[target, mode] = Run(mode, target, drive(node22, process.url, mode, process.log), process.log)
            else:
                cluster: Cluster = request.getfixturevalue("fleet")
                observed = drive(node22, cluster.url, mode, cluster.logs)
                done[target, mode] = Run(mode, target, observed, cluster.logs, cluster)
        return done[target, mode]

    return get


@pytest.fixture(
    scope="module",
    params=[("memory", "modern"), ("memory", "legacy"), ("balancer", "modern")],
    ids=["memory-2026-07-28", "memory-2025-11-25", "balancer-2026-07-28"],
)
def run(request: pytest.FixtureRequest, runs: Callable[[str, str], Run]) -> Run:
    target, mode = request.param
    return runs(target, mode)


# --- Helpers over the wire log --------------------------------------------------------------------


def http(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The HTTP requests a scenario's clients sent, in order."""
    return [entry for entry in record["wire"] if "http" in entry]


def calls(record: dict[str, Any], rpc: str) -> list[dict[str, Any]]:
    return [entry for entry in http(record) if entry.get("rpc") == rpc]


def untimed(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries without the driver's timestamps (``t``, milliseconds since it started)."""
    return [{key: value for key, value in entry.items() if key != "t"} for entry in entries]


def statuses(record: dict[str, Any]) -> list[str]:
    return [event["status"] for event in record["events"] if event["type"] == "task"]


def assert_task_wire(run: Run, record: dict[str, Any], tool: str) -> None:
    """How the package asked for the task and followed it, in each era."""
    task_id = record["taskId"]
    (call,) = calls(record, "tools/call")
    assert call["name"] == tool
    gets = calls(record, "tasks/get")
    assert all(entry["taskId"] == task_id for entry in gets)
    pushed = [note for note in record["notifications"] if note["method"] == "notifications/tasks/status"]
    # Every request was answered 200 (202 for notifications and responses), or aborted by the package
    # (it drops an in-flight poll once a pushed notification has settled the task).
    assert all(entry.get("status") in (200, 202) or entry.get("aborted") for entry in http(record)), http(record)
    if run.mode == "modern":
        # The package frames every task request with the extension, and names the task in Mcp-Name.
        assert call["metaProtocolVersion"] == "2026-07-28"
        assert TASKS_EXTENSION in call["metaExtensions"]
        assert "task" not in call
        for entry in calls(record, "tasks/get") + calls(record, "tasks/update") + calls(record, "tasks/cancel"):
            assert entry["headers"]["mcp-name"] == task_id
            assert entry["headers"]["mcp-method"] == entry["rpc"]
            assert TASKS_EXTENSION in entry["metaExtensions"]
        assert gets, "the package never polled tasks/get"
        assert not pushed
        assert not calls(record, "tasks/result")
        assert not calls(record, "tasks/list")
    else:
        # The package follows the task with tasks/get, or with the notifications/tasks/status the shim
        # pushes on the session's GET stream (only about the task this session created).
        assert gets or pushed, "the package saw the task neither through tasks/get nor notifications"
        assert {note["taskId"] for note in pushed} <= {task_id}
        # The 2025-11-25 path: params.task on the call, no 2026 headers or _meta, within one session.
        assert call["task"] == {}
        assert all(entry["session"] for entry in http(record)[1:])
        assert all("mcp-name" not in entry["headers"] for entry in http(record))
        assert all("metaProtocolVersion" not in entry for entry in http(record))
        assert not calls(record, "tasks/update")


def assert_result_once_terminal(record: dict[str, Any]) -> None:
    """The legacy path calls tasks/result exactly once, after tasks/get showed the task completed."""
    sequence = [entry.get("rpc") for entry in http(record)]
    assert sequence.count("tasks/result") == 1
    assert sequence[-1] == "tasks/result"
    assert "completed" in statuses(record)


# --- Connection -----------------------------------------------------------------------------------


def test_the_sdk_client_connects_in_the_intended_era(run: Run) -> None:
    record = run.scenario("complete")
    connection = record["connection"]
    sequence = [entry.get("rpc") for entry in http(record)]
    if run.mode == "modern":
        assert connection["era"] == "modern"
        assert connection["protocolVersion"] == "2026-07-28"
        # The package enables tasks only because server/discover lists the extension with exactly {}.
        assert connection["serverExtensions"] == {TASKS_EXTENSION: {}}
        assert connection["serverTasks"] is None
        assert connection["sessionCapabilities"]["inputResponses"] is True
        assert sequence[:2] == ["server/discover", "tools/list"]
        assert "initialize" not in sequence
    else:
        assert connection["era"] == "legacy"
        assert connection["protocolVersion"] == "2025-11-25"
        assert connection["serverExtensions"] is None
        assert connection["serverTasks"]["requests"] == {"tools": {"call": {}}}
        assert "cancel" in connection["serverTasks"]
        assert connection["sessionCapabilities"]["cancellation"] is True
        (initialize, *_) = http(record)
        assert initialize["rpc"] == "initialize"
        assert initialize["protocolVersion"] == "2025-11-25"
        # The session's GET stream is open (where the shim pushes task notifications and input).
        assert [entry["status"] for entry in http(record) if entry["http"] == "GET"] == [200]
        assert "server/discover" not in sequence


# --- Scenarios ------------------------------------------------------------------------------------


def test_a_task_runs_to_completion(run: Run) -> None:
    record = run.scenario("complete")
    assert record["kind"] == "task"
    assert isinstance(record["taskId"], str)
    assert len(record["taskId"]) >= 16
    seen = statuses(record)
    assert seen[0] == "working"
    assert seen[-1] == "completed"
    assert set(seen) <= {"working", "completed"}
    outcome = record["outcome"]
    assert outcome["status"] == "completed"
    assert outcome["result"]["texts"] == ["2 + 3 = 5"]
    assert outcome["result"]["isError"] is False
    assert outcome["unwrapped"] == outcome["result"]
    assert outcome["task"]["taskId"] == record["taskId"]
    assert outcome["task"]["status"] == "completed"
    assert outcome["task"]["suggestedPollIntervalMs"] >= 50
    assert untimed(record["events"])[-1] == {"type": "outcome", "status": "completed"}
    assert record["backgroundErrors"] == []
    assert_task_wire(run, record, "quick_sum")
    if run.mode == "modern":
        assert outcome["result"]["resultType"] == "complete"  # the package requires it on an inlined result
    else:
        assert_result_once_terminal(record)
        assert RELATED_TASK in outcome["result"]["metaKeys"]


def test_input_asked_inside_a_task_is_answered_through_the_input_callback(run: Run) -> None:
    # 2025-11-25: the package follows the task with tasks/get only and waits on the session's GET
    # stream for the shim to relay the task's elicitations (with related-task _meta).
    record = run.scenario("input")
    task_id = record["taskId"]
    assert record["kind"] == "task"
    questions = record["questions"]
    assert sorted(question["message"] for question in questions) == [
        "Ship release 1.2.3?",
        "Who approves release 1.2.3?",
    ]
    for question in questions:
        assert question["kind"] == "elicitation"
        assert question["scope"] == "task"
        assert question["taskId"] == task_id
    seen = statuses(record)
    assert "input_required" in seen
    assert seen[-1] == "completed"
    outcome = record["outcome"]
    assert outcome["status"] == "completed"
    assert outcome["result"]["texts"] == ["Release 1.2.3 approved by Ada."]
    assert outcome["result"]["isError"] is False
    assert outcome["task"]["statusMessage"] == "Shipping 1.2.3"
    assert record["backgroundErrors"] == []
    assert_task_wire(run, record, "approve_release")
    if run.mode == "modern":
        # Each input key went to the callback; the package answered both in one tasks/update.
        assert sorted(question["inputId"] for question in questions) == ["approver", "confirm"]
        assert all(question["delivery"] == "task-update" for question in questions)
        (update,) = calls(record, "tasks/update")
        assert update["inputResponseKeys"] == ["approver", "confirm"]
    else:
        assert all(question["delivery"] == "peer-request" for question in questions)
        assert all(question["relatedTask"] == task_id for question in questions)
        answers = calls(record, "response")
        assert len(answers) == 2
        assert all("errorCode" not in answer for answer in answers)
        assert_result_once_terminal(record)


def test_a_long_task_is_cancelled_and_the_server_stops_it(run: Run) -> None:
    record = run.scenario("cancel")
    task_id = record["taskId"]
    assert record["kind"] == "task"
    assert record["statusBeforeCancel"] == "working"
    assert any(event.get("statusMessage", "").startswith("exporting") for event in record["events"])
    outcome = record["outcome"]
    assert outcome["status"] == "cancelled"
    assert outcome["unwrapThrew"]["name"] == "TaskCancelledError"
    assert record["afterCancel"]["taskId"] == task_id
    assert record["afterCancel"]["status"] == "cancelled"
    (cancel,) = calls(record, "tasks/cancel")
    assert cancel["taskId"] == task_id
    assert_task_wire(run, record, "long_export")
    assert not calls(record, "tasks/result")
    # The worker running the tool cancelled its coroutine (the tool logs it when it sees that).
    line = f"{CANCELLED_LINE} (task {task_id})"
    wait_for(lambda: line in run.logs(), CANCEL_SEEN_TIMEOUT_S, message=lambda: f"{line!r} in\n{run.logs()[-6000:]}")


def test_a_tool_error_is_reported_as_the_era_defines_it(run: Run) -> None:
    record = run.scenario("tool_error")
    assert record["kind"] == "task"
    outcome = record["outcome"]
    assert_task_wire(run, record, "failing_check")
    if run.mode == "modern":
        # 2026-07-28: a tool error is a completed task whose result has isError.
        assert outcome["status"] == "completed"
        assert outcome["task"]["status"] == "completed"
        assert outcome["result"] == {
            "texts": ["Check of 1.2.3 failed: 2 tests are red."],
            "isError": True,
            "resultType": "complete",
        }
        assert outcome["unwrapped"] == outcome["result"]
    else:
        # 2025-11-25: the shim reports it failed; the package does not fetch a failed task's result.
        assert outcome["status"] == "failed"
        assert outcome["task"]["status"] == "failed"
        assert outcome["error"]["name"] == "TaskFailedError"
        assert outcome["unwrapThrew"]["name"] == "TaskFailedError"
        assert statuses(record)[-1] == "failed"
        assert not calls(record, "tasks/result")


def test_a_json_rpc_failure_ends_the_task_failed(run: Run) -> None:
    record = run.scenario("failed")
    assert record["kind"] == "task"
    outcome = record["outcome"]
    assert outcome["status"] == "failed"
    assert outcome["task"]["status"] == "failed"
    assert BROKEN_MESSAGE in outcome["task"]["statusMessage"]
    assert outcome["error"]["name"] == "TaskFailedError"
    assert outcome["unwrapThrew"]["name"] == "TaskFailedError"
    assert_task_wire(run, record, "broken_job")
    if run.mode == "modern":
        # The package carries the task's JSON-RPC error through.
        assert outcome["error"]["message"] == BROKEN_MESSAGE
        assert outcome["error"]["code"] == INTERNAL_ERROR
        assert outcome["error"]["data"] == {**BROKEN_DATA, "job": "nightly"}
    else:
        # The legacy path has only the task's statusMessage to report.
        assert BROKEN_MESSAGE in outcome["error"]["message"]
        assert not calls(record, "tasks/result")


def test_a_tool_that_never_runs_as_a_task_answers_inline(run: Run) -> None:
    record = run.scenario("immediate")
    assert record["kind"] == "immediate"
    assert record["taskId"] is None
    assert untimed(record["events"]) == [{"type": "outcome", "status": "completed"}]
    outcome = record["outcome"]
    assert outcome["status"] == "completed"
    assert outcome["task"] is None
    assert outcome["result"]["texts"] == ["echo: hello"]
    assert outcome["result"]["isError"] is False
    (call,) = calls(record, "tools/call")
    assert call["name"] == "echo_inline"
    assert not [entry for entry in http(record) if str(entry.get("rpc", "")).startswith("tasks/")]
    if run.mode == "modern":
        # The request declared the extension; the server still chose to answer inline.
        assert TASKS_EXTENSION in call["metaExtensions"]
        assert outcome["result"]["resultType"] == "complete"
    else:
        # tools/list said taskSupport "forbidden", so the package sent a plain call.
        assert "task" not in call


def test_a_second_session_resumes_a_task_handed_off_by_the_first(run: Run) -> None:
    record = run.scenario("handoff")
    task_id = record["taskId"]
    first, second = record["first"], record["second"]
    assert first["kind"] == "task"
    assert first["statusAtHandoff"] == "working"
    assert record["reference"] == {
        "endpointId": record["reference"]["endpointId"],
        "generation": "v2" if run.mode == "modern" else "v1",
        "taskId": task_id,
        "originalOperation": "tools/call",
    }
    assert record["reference"]["endpointId"].startswith("ext-tasks-e2e:v1:sha256:")
    # Handing off ended the first session's execution locally; closing that session cancelled nothing.
    assert first["localOutcome"]["status"] == "failed"
    assert first["localOutcome"]["error"]["message"] == "Task execution is closed"
    assert not calls(first, "tasks/cancel")
    assert [entry["name"] for entry in calls(first, "tools/call")] == ["handoff_job"]
    # The second session (another SDK client, another connection) only follows the task.
    assert second["kind"] == "task"
    assert second["taskId"] == task_id
    assert statuses(second)[0] == "working"
    assert statuses(second)[-1] == "completed"
    assert not calls(second, "tools/call")
    assert calls(second, "tasks/get")[0]["taskId"] == task_id
    outcome = record["outcome"]
    assert outcome["status"] == "completed"
    assert outcome["task"]["taskId"] == task_id
    (text,) = outcome["result"]["texts"]
    match = HANDOFF_TEXT.match(text)
    assert match, text
    if run.cluster is not None:
        pids = {server.process.pid for server in run.cluster.servers}
        assert {int(match.group(1)), int(match.group(2))} <= pids
    if run.mode == "modern":
        assert all(entry["headers"]["mcp-name"] == task_id for entry in calls(second, "tasks/get"))
    else:
        assert_result_once_terminal(second)
        assert second["connection"]["protocolVersion"] == "2025-11-25"


def test_input_asked_inside_a_handed_off_task_reaches_the_session_that_resumed_it(run: Run) -> None:
    # handoff_approval works for a second, then asks one question. Session A handed the task off right
    # after creating it and closed; session B resumed it, and must be the one asked. 2025-11-25: B's
    # tasks/get makes B's GET stream follow the task, which is where the shim relays the question.
    record = run.scenario("handoff_input")
    task_id = record["taskId"]
    first, second = record["first"], record["second"]
    assert record["reference"] == {
        "endpointId": record["reference"]["endpointId"],
        "generation": "v2" if run.mode == "modern" else "v1",
        "taskId": task_id,
        "originalOperation": "tools/call",
    }
    # Session A: created the task, handed it off while it worked, and sent nothing after tools/call
    # (no tasks/cancel on close, no answer to any question); nothing was asked of it.
    assert first["kind"] == "task"
    assert first["statusAtHandoff"] == "working"
    assert first["localOutcome"]["error"]["message"] == "Task execution is closed"
    assert [entry["name"] for entry in calls(first, "tools/call")] == ["handoff_approval"]
    assert http(first)[-1]["rpc"] == "tools/call"
    assert not calls(first, "tasks/cancel")
    assert not calls(first, "response")
    assert first["questions"] == []
    assert first["unroutedRequests"] == []
    assert first["backgroundErrors"] == []
    # Session B: only followed the task, and got its one question, after A had closed.
    assert second["kind"] == "task"
    assert second["taskId"] == task_id
    assert not calls(second, "tools/call")
    assert all(entry["taskId"] == task_id for entry in calls(second, "tasks/get"))
    assert all(entry.get("status") in (200, 202) for entry in http(second)), http(second)
    (question,) = second["questions"]
    assert question["kind"] == "elicitation"
    assert question["message"] == HANDOFF_QUESTION
    assert question["scope"] == "task"
    assert question["taskId"] == task_id
    assert question["t"] > first["closedAt"]
    assert second["unroutedRequests"] == []
    assert second["backgroundErrors"] == []
    seen = statuses(second)
    assert seen[0] == "working"
    assert "input_required" in seen
    assert seen[-1] == "completed"
    outcome = record["outcome"]
    assert outcome["status"] == "completed"
    assert outcome["task"]["taskId"] == task_id
    assert outcome["result"]["texts"] == ["quarterly-report reviewed by Grace."]
    assert outcome["result"]["isError"] is False
    if run.mode == "modern":
        # The package took the question from tasks/get's inputRequests and answered it with tasks/update.
        # It hands the callback the request as the server sent it, and the server's inputRequests carry
        # no related-task _meta: the task is named in the callback's context only.
        assert question["delivery"] == "task-update"
        assert question["inputId"] == "reviewer"
        assert question["relatedTask"] is None
        (update,) = calls(second, "tasks/update")
        assert update["inputResponseKeys"] == ["reviewer"]
        assert all(entry["headers"]["mcp-name"] == task_id for entry in [*calls(second, "tasks/get"), update])
        assert not calls(second, "tasks/result")
    else:
        # A server→client elicitation/create on B's GET stream, naming the task in related-task _meta;
        # B answered it once (a JSON-RPC response POST), then fetched the result once terminal.
        assert question["delivery"] == "peer-request"
        assert question["relatedTask"] == task_id
        (answer,) = calls(second, "response")
        assert "errorCode" not in answer
        assert not calls(second, "tasks/update")
        assert {note["taskId"] for note in second["notifications"]} <= {task_id}
        assert_result_once_terminal(second)
        assert RELATED_TASK in outcome["result"]["metaKeys"]


def test_through_the_balancer_every_instance_served_the_client(runs: Callable[[str, str], Run]) -> None:
    """Round-robin spread the package's requests over the three instances, so each task was created,
    run, polled, answered and cancelled by whichever instance a request reached."""
    run = runs("balancer", "modern")
    assert run.cluster is not None
    assert all(record["ok"] for record in run.observed["scenarios"].values())
    used = run.cluster.balancer.upstreams_used()
    assert set(used) == {f"127.0.0.1:{server.port}" for server in run.cluster.servers}, used
    assert all(server.process.poll() is None for server in run.cluster.servers)
