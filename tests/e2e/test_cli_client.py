"""``ext-tasks call``, ``ext-tasks task`` and ``ext-tasks tools`` as a person and a script use them.

In a real pseudo-terminal (pexpect): the demo's production deploy shows its live status line, asks its
confirmation (answered by typing), and prints the result; Ctrl-C once cancels the task on the server,
twice leaves it running and prints its id. Without a terminal: ``--json`` output a script parses, and
the exit status of each outcome.
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pexpect
import pytest

from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY
from tests.support.processes import REPO, ServerProcess, running_server

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "ext_tasks"]
TIMEOUT_S = 30
_TASK_STARTED = re.compile(r"task (\S+) started")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("demo"), tools="ext_tasks.examples.demo") as served:
        yield served


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("fixtures"), tools="ext_tasks.examples.conformance") as served:
        yield served


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO, stdin=subprocess.DEVNULL
    )


def _terminal(*args: str) -> pexpect.spawn:
    return pexpect.spawn(CLI[0], [*CLI[1:], *args], cwd=str(REPO), encoding="utf-8", timeout=TIMEOUT_S,
                         dimensions=(40, 160))  # fmt: skip


def _state(server: ServerProcess, task_id: str) -> dict[str, Any]:
    done = _run("task", "get", task_id, "--url", server.url)
    assert done.returncode == 0, done.stderr
    state: dict[str, Any] = json.loads(done.stdout)
    return state


# --- in a terminal ------------------------------------------------------------------------------------


def test_a_production_deploy_in_a_terminal(demo: ServerProcess) -> None:
    child = _terminal("call", "deploy", "service=billing", "ref=v1.2", "environment=production", "--url", demo.url)
    child.expect(_TASK_STARTED)
    child.expect(r"Deploy billing@v1\.2 to production\?")
    child.expect(r"\[y/n\]")
    child.sendline("y")
    # The live line follows the task's statusMessage, the elapsed time ticking beside it.
    child.expect(r"working · billing-v1\.2-#\d+: pulling image \(1/3\) · \d+\.\ds")
    child.expect(r"working · billing-v1\.2-#\d+: rolling out \(2/3\) · \d+\.\ds")
    child.expect(r"working · billing-v1\.2-#\d+: checking health \(3/3\) · \d+\.\ds")
    child.expect(r"Deployed billing@v1\.2 to production as billing-v1\.2-#\d+\.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_declining_in_the_terminal_changes_nothing(demo: ServerProcess) -> None:
    child = _terminal("call", "deploy", "service=ledger", "ref=v9", "environment=production", "--url", demo.url)
    child.expect(r"\[y/n\]")
    child.sendline("n")
    child.expect(r"was not confirmed; nothing changed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_at_a_question_cancels_the_task(demo: ServerProcess) -> None:
    child = _terminal("call", "deploy", "service=audit", "ref=v3", "environment=production", "--url", demo.url)
    child.expect(_TASK_STARTED)
    task_id = child.match.group(1)
    child.expect(r"\[y/n\]")
    child.sendintr()
    child.expect(rf"task {re.escape(task_id)} was cancelled")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert _state(demo, task_id)["status"] == "cancelled"


def test_ctrl_c_once_cancels_the_task_on_the_server(fixtures: ServerProcess) -> None:
    child = _terminal("call", "slow_compute", "seconds:=60", "--url", fixtures.url)
    child.expect(_TASK_STARTED)
    task_id = child.match.group(1)
    child.expect(r"working · \d+\.\ds")
    child.sendintr()
    child.expect(r"Ctrl-C again to leave it running")
    child.expect(rf"task {re.escape(task_id)} was cancelled")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert _state(fixtures, task_id)["status"] == "cancelled"


def test_ctrl_c_twice_leaves_the_task_running(fixtures: ServerProcess) -> None:
    child = _terminal("call", "slow_compute", "seconds:=3", "label=kept", "--url", fixtures.url)
    child.expect(_TASK_STARTED)
    task_id = child.match.group(1)
    child.expect(r"working · \d+\.\ds")
    child.sendintr()
    child.expect(r"Ctrl-C again to leave it running")
    child.sendintr()
    child.expect(rf"left task {re.escape(task_id)} running")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert _state(fixtures, task_id)["status"] == "working"
    waited = _run("task", "wait", task_id, "--url", fixtures.url, "--json")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["content"][0]["text"] == "kept: computed after 3s"


# --- without a terminal -------------------------------------------------------------------------------


def test_json_output_is_the_result_and_nothing_else(fixtures: ServerProcess) -> None:
    done = _run("call", "slow_compute", "seconds:=0.5", "label=json", "--url", fixtures.url, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["content"] == [{"type": "text", "text": "json: computed after 0.5s"}]
    assert _TASK_STARTED.search(done.stderr)  # what a person would see, kept off stdout


@pytest.mark.parametrize(
    ("args", "status", "where", "says"),
    [
        (("greet", "name=Ada"), 0, "stdout", "Hello, Ada!"),
        (("failing_job",), 1, "stdout", "The job failed: the input file is corrupt"),
        (("protocol_error_job",), 1, "stderr", f"failed: Upstream API rate limit exceeded (JSON-RPC {INTERNAL_ERROR})"),
        (("no_such_tool",), 2, "stderr", f"Unknown tool: no_such_tool (JSON-RPC {INVALID_PARAMS})"),
        (("greet", "name"), 2, "stderr", "expected key=value or key:=json"),
        (("greet", "n:={oops"), 2, "stderr", "not JSON"),
        (("test_missing_capability",), 2, "stderr", f"JSON-RPC {MISSING_REQUIRED_CLIENT_CAPABILITY}"),
    ],
    ids=["completed", "is-error", "failed", "unknown-tool", "bad-item", "bad-json", "missing-capability"],
)
def test_exit_status_per_outcome(fixtures: ServerProcess, args: tuple[str, ...], status: int, where: str,
                                 says: str) -> None:  # fmt: skip
    done = _run("call", *args, "--url", fixtures.url)
    assert done.returncode == status, (done.stdout, done.stderr)
    assert says in (done.stdout if where == "stdout" else done.stderr)


def test_a_task_cancelled_elsewhere_exits_1_for_the_one_waiting(fixtures: ServerProcess) -> None:
    waiting = subprocess.Popen(
        [*CLI, "call", "slow_compute", "seconds:=60", "--url", fixtures.url, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert waiting.stderr is not None
        ready, _, _ = select.select([waiting.stderr], [], [], TIMEOUT_S)
        assert ready, "no 'task ... started' line"
        started = _TASK_STARTED.search(waiting.stderr.readline())
        assert started is not None
        cancelled = _run("task", "cancel", started.group(1), "--url", fixtures.url)
        assert cancelled.returncode == 0, cancelled.stderr
        out, err = waiting.communicate(timeout=TIMEOUT_S)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 1 and out == ""
    assert f"task {started.group(1)} was cancelled" in err


def test_tools_lists_names_and_descriptions(fixtures: ServerProcess) -> None:
    listed = _run("tools", "--url", fixtures.url)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^slow_compute +Works for `seconds` seconds", listed.stdout, re.MULTILINE)
    as_json = _run("tools", "--url", fixtures.url, "--json")
    assert "slow_compute" in {tool["name"] for tool in json.loads(as_json.stdout)}
