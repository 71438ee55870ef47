"""Picking a task up again after the terminal closed: ``ext-tasks call`` records the task it started
before waiting for it, so a ``call`` killed outright (SIGKILL: no cleanup runs) leaves the task findable;
``ext-tasks task wait ID`` without ``--url`` finds its server in the record, and ``task list`` shows the
task with its final status. An id the record does not have, without ``--url``, is a usage error."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ext_tasks.client.records import RECORD_FILE
from tests.support.processes import REPO, ServerProcess, running_server

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "ext_tasks"]
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("fixtures"), tools="ext_tasks.examples.conformance") as served:
        yield served


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "EXT_TASKS_STATE_DIR": str(state)}


def _run(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO,
                          stdin=subprocess.DEVNULL, env=_env(state))  # fmt: skip


def _recorded(state: Path) -> list[dict[str, Any]]:
    try:
        document = json.loads((state / RECORD_FILE).read_text())
    except FileNotFoundError:
        return []
    tasks: list[dict[str, Any]] = document["tasks"]
    return tasks


def _until_started(calling: subprocess.Popen[str]) -> str:
    """The task's id, from the call's "task ... started" line (said once the task is recorded)."""
    assert calling.stderr is not None
    ready, _, _ = select.select([calling.stderr], [], [], TIMEOUT_S)
    assert ready, "no 'task ... started' line"
    started = re.search(r"task (\S+) started", calling.stderr.readline())
    assert started is not None
    return started.group(1)


def test_a_task_is_picked_up_again_after_its_call_was_killed(fixtures: ServerProcess, state: Path) -> None:
    calling = subprocess.Popen(
        [*CLI, "call", "slow_compute", "seconds:=3", "label=again", "--url", fixtures.url, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO,
        env=_env(state),
    )  # fmt: skip
    try:
        task_id = _until_started(calling)
        [entry] = _recorded(state)
        calling.kill()  # the terminal closed: nothing of the call runs again
        calling.communicate(timeout=TIMEOUT_S)
    finally:
        if calling.poll() is None:
            calling.kill()
            calling.wait()
    assert entry["taskId"] == task_id
    assert (entry["server"], entry["tool"], entry["lastStatus"]) == (fixtures.url, "slow_compute", "working")
    assert "label" not in json.dumps(entry) and "again" not in json.dumps(entry)  # never the arguments

    waited = _run(state, "task", "wait", task_id, "--json")

    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["content"][0]["text"] == "again: computed after 3s"
    assert f"{fixtures.url} (from the task record)" in waited.stderr  # the URL used is said
    [after] = _recorded(state)
    assert (after["taskId"], after["lastStatus"]) == (task_id, "completed")

    listed = _run(state, "task", "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["SERVER", "TOOL", "TASK", "ID", "STARTED", "STATUS", "EXPIRES"]
    assert row.split()[:3] == [fixtures.url, "slow_compute", task_id]
    assert row.split()[5] == "completed"
    as_json = _run(state, "task", "list", "--json")
    assert [(task["taskId"], task["lastStatus"]) for task in json.loads(as_json.stdout)] == [(task_id, "completed")]
    elsewhere = _run(state, "task", "list", "--url", "http://127.0.0.1:9/mcp")
    assert elsewhere.returncode == 0 and elsewhere.stdout == ""
    assert "no tasks recorded" in elsewhere.stderr


def test_a_call_records_its_task_and_its_end(fixtures: ServerProcess, state: Path) -> None:
    done = _run(state, "call", "slow_compute", "seconds:=0.2", "--url", fixtures.url, "--json")
    assert done.returncode == 0, done.stderr

    [entry] = _recorded(state)
    assert (entry["server"], entry["tool"], entry["lastStatus"]) == (fixtures.url, "slow_compute", "completed")
    assert entry["expiresAt"] is not None  # the server gave a ttlMs
    got = _run(state, "task", "get", entry["taskId"])
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "completed"


def test_an_unknown_task_without_url_is_a_usage_error(fixtures: ServerProcess, state: Path) -> None:
    for action in ("wait", "get", "cancel"):
        done = _run(state, "task", action, "no-such-task")
        assert done.returncode == 2, (action, done.stdout, done.stderr)
        assert "task no-such-task is not in the local task record: pass --url" in done.stderr
    # With --url, as before: the server is asked (and does not know the task either).
    asked = _run(state, "task", "get", "no-such-task", "--url", fixtures.url)
    assert asked.returncode == 2 and "not in the local task record" not in asked.stderr
    assert "error:" in asked.stderr


def test_an_empty_record_lists_nothing(state: Path) -> None:
    listed = _run(state, "task", "list")
    assert listed.returncode == 0 and listed.stdout == ""
    assert "no tasks recorded" in listed.stderr
    assert json.loads(_run(state, "task", "list", "--json").stdout) == []
    needs_id = _run(state, "task", "wait")
    assert needs_id.returncode == 2 and "needs a TASK_ID" in needs_id.stderr


def test_an_unusable_record_never_fails_the_call(fixtures: ServerProcess, tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")

    done = _run(not_a_directory, "call", "slow_compute", "seconds:=0.1", "--url", fixtures.url, "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["content"][0]["text"] == "job: computed after 0.1s"
    assert "warning:" in done.stderr
