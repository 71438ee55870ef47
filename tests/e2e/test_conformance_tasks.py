"""The nine ``tasks-*`` referee scenarios, by name, against a server backed by a real Valkey.

``--requirements 2026-07-28`` runs the tasks scenarios but never scores them (they belong to an
extension), so they are gated here one by one; a single-scenario run exits non-zero on any failure.
``tasks-status-notifications`` is left out: the referee always skips it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ext_tasks.protocol.resume import generate_key
from tests.e2e.test_conformance import REFEREE, REFEREE_TIMEOUT_S, TOOLS, npx
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TASK_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
_PASSED = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def valkey_backed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("tasks-conformance")
    with running_valkey(directory / "valkey") as valkey:
        env = {"EXT_TASKS_VALKEY_URL": valkey.url, "EXT_TASKS_STATE_KEYS": generate_key()}
        with running_server(directory, tools=TOOLS, env=env) as server:
            yield server


@pytest.mark.parametrize("scenario", TASK_SCENARIOS)
def test_tasks_scenario_passes_on_valkey(scenario: str, valkey_backed_server: ServerProcess, tmp_path: Path) -> None:
    command = f"conformance server --url {valkey_backed_server.url} --scenario {scenario} -o {tmp_path / 'out'}"
    package = os.environ.get("EXT_TASKS_CONFORMANCE_PKG", REFEREE)
    completed = subprocess.run(
        [npx(), "-y", "-p", "node@22", "-p", package, "-c", command],
        capture_output=True,
        text=True,
        timeout=REFEREE_TIMEOUT_S,
        cwd=tmp_path,
        check=False,
    )
    output = _ANSI.sub("", completed.stdout)
    counts = _PASSED.search(output)
    assert counts is not None, f"no 'Passed:' line:\n{output[-4000:]}\n{completed.stderr[-2000:]}"
    print(f"{scenario}: {counts[0]}")
    failures = [line for line in output.splitlines() if "FAILURE" in line]
    assert counts[3] == "0" and not failures, "\n".join(failures) + "\n" + valkey_backed_server.log()[-4000:]
    assert int(counts[1]) == int(counts[2]) > 0
    assert completed.returncode == 0
