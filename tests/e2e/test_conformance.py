"""The official MCP conformance referee against a real server serving ``ext_tasks.examples.conformance``.

Runs ``@modelcontextprotocol/conformance@0.2.0-alpha.12`` through ``npx`` (Node 22 is fetched as a
package, so any Node with npx works). Without npx the tests fail rather than skip: conformance is a
release gate, and a silently skipped gate is worse than a red one.

* ``--requirements 2026-07-28``: the frozen, scored 2026-07-28 set (37 scenarios) must all pass. The
  run also reports unscored scenarios (the tasks extension, three pending ones) that do not count.
* ``--suite all --spec-version 2026-07-28``: the 37 plus the 3 pending scenarios (json-schema-2020-12,
  http-header-validation, http-custom-header-server-validation); every check must pass.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from tests.support.processes import running_server

pytestmark = pytest.mark.e2e

REFEREE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
TOOLS = "ext_tasks.examples.conformance"
REFEREE_TIMEOUT_S = 600
SCORED_SCENARIOS = 37
PENDING_SCENARIOS = ("json-schema-2020-12", "http-header-validation", "http-custom-header-server-validation")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SCENARIO_LINE = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed$")
_TOTAL_LINE = re.compile(r"^Total: (\d+) passed, (\d+) failed$")
_NOT_SCORED_LINE = re.compile(r"^\s+([✓✗]) (\S+) \(([^)]+)\)$")
_RESULT_DIR = re.compile(r"^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


class Served(Protocol):
    """What the referee is pointed at: one server, or a fleet behind its balancer."""

    @property
    def url(self) -> str: ...

    def log(self) -> str: ...


@dataclass
class ScenarioCount:
    ok: bool
    passed: int
    failed: int


@dataclass
class RefereeRun:
    returncode: int
    output: str
    scenarios: dict[str, ScenarioCount]
    total: tuple[int, int]
    not_scored: set[str]
    failing_unscored: set[str]

    def summary(self) -> str:
        """The referee's own summary block (what CI logs should show)."""
        start = self.output.find("=== SUMMARY ===")
        return self.output[start:] if start >= 0 else self.output[-4000:]


def npx() -> str:
    found = shutil.which("npx")
    if found is None:
        pytest.fail(
            "npx is not on PATH: install Node.js (any version with npx; the test fetches node@22 itself) "
            "to run the MCP conformance referee",
            pytrace=False,
        )
    return found


def parse(returncode: int, output: str, stderr: str = "") -> RefereeRun:
    """Read the summary block the referee prints on stdout after its last scenario."""
    lines = _ANSI.sub("", output).splitlines()
    scenarios: dict[str, ScenarioCount] = {}
    total: tuple[int, int] | None = None
    not_scored: set[str] = set()
    failing_unscored: set[str] = set()
    in_summary = in_not_scored = False
    for line in lines:
        if line.startswith("=== SUMMARY ==="):
            in_summary = True
            continue
        if not in_summary:
            continue
        if line.startswith("Not scored for"):
            in_not_scored = True
            continue
        if in_not_scored and (match := _NOT_SCORED_LINE.match(line)):
            not_scored.add(match[2])
            if match[1] != "✓":
                failing_unscored.add(match[2])
        elif match := _SCENARIO_LINE.match(line.strip()):
            scenarios[match[2]] = ScenarioCount(match[1] == "✓", int(match[3]), int(match[4]))
        elif match := _TOTAL_LINE.match(line.strip()):
            total = (int(match[1]), int(match[2]))
    assert total is not None, (
        f"no 'Total: N passed, M failed' line in the referee output:\n{output[-4000:]}\nstderr:\n{stderr[-4000:]}"
    )
    return RefereeRun(returncode, output, scenarios, total, not_scored, failing_unscored)


def run_referee(server: Served, out_dir: Path, *selection: str, env: Mapping[str, str] | None = None) -> RefereeRun:
    """One referee run against ``server``; ``env`` is added to the referee's environment."""
    command = f"conformance server --url {server.url} {' '.join(selection)} -o {out_dir}"
    argv = [npx(), "-y", "-p", "node@22", "-p", REFEREE, "-c", command]
    try:
        completed = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=REFEREE_TIMEOUT_S,
            cwd=out_dir.parent,
            env=None if env is None else {**os.environ, **env},
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"the conformance referee did not finish within {REFEREE_TIMEOUT_S}s\n"
            f"stdout:\n{exc.stdout!r}\nserver log:\n{server.log()}"
        )
    run = parse(completed.returncode, completed.stdout, completed.stderr)
    print(f"$ npx ... {command}\n{run.summary()}\nexit code {run.returncode}")
    return run


def warnings_in(out_dir: Path, scenarios: set[str]) -> list[str]:
    """WARNING checks (SHOULD-level, not counted as failures by the referee) of ``scenarios``."""
    found = []
    for checks_file in sorted(out_dir.glob("server-*/checks.json")):
        match = _RESULT_DIR.match(checks_file.parent.name)
        if match is None or match[1] not in scenarios:
            continue
        for check in json.loads(checks_file.read_text()):
            if check.get("status") == "WARNING":
                found.append(f"{match[1]}: {check.get('id')}: {check.get('errorMessage') or check.get('description')}")
    return found


def assert_all_passed(run: RefereeRun, names: set[str], server: Served) -> None:
    failing = {name: run.scenarios[name] for name in names if not run.scenarios[name].ok or run.scenarios[name].failed}
    assert not failing, f"failing scenarios: {failing}\n{run.summary()}\nserver log:\n{server.log()}"


def test_scored_2026_07_28_requirements_all_pass(tmp_path: Path) -> None:
    out_dir = tmp_path / "requirements-2026-07-28"
    with running_server(tmp_path, tools=TOOLS) as server:
        run = run_referee(server, out_dir, "--requirements", "2026-07-28")
        scored = set(run.scenarios) - run.not_scored
        assert len(scored) == SCORED_SCENARIOS, f"expected {SCORED_SCENARIOS} scored scenarios: {sorted(scored)}"
        assert_all_passed(run, scored, server)
        scored_passed = sum(run.scenarios[name].passed for name in scored)
        print(f"scored: {len(scored)} scenarios, {scored_passed} checks passed, 0 failed")
        assert run.returncode == 0, run.summary()
        assert warnings_in(out_dir, scored) == []
        # The unscored tasks scenarios run too (in-memory store here); none of them may fail either.
        assert run.failing_unscored == set(), run.summary()


def test_all_2026_07_28_scenarios_including_pending_pass(tmp_path: Path) -> None:
    out_dir = tmp_path / "suite-all-2026-07-28"
    with running_server(tmp_path, tools=TOOLS) as server:
        run = run_referee(server, out_dir, "--suite", "all", "--spec-version", "2026-07-28")
        assert set(PENDING_SCENARIOS) <= set(run.scenarios), sorted(run.scenarios)
        assert len(run.scenarios) == SCORED_SCENARIOS + len(PENDING_SCENARIOS), sorted(run.scenarios)
        assert_all_passed(run, set(run.scenarios), server)
        assert run.total[1] == 0, run.summary()
        assert run.returncode == 0, run.summary()
        assert warnings_in(out_dir, set(run.scenarios)) == []
