"""The conformance referee's 2025-11-25 requirements against the same ``/mcp`` endpoint, through the shim.

``--requirements 2025-11-25`` runs every scenario over the stateful 2025-11-25 wire (``initialize``,
``Mcp-Session-Id``), so each request takes the migration shim (``migration/``) into the 2026-07-28
engine. The server is the one the 2026-07-28 referee runs against (``ext_tasks.examples.conformance``),
with nothing switched: one endpoint, both eras. Sampling and elicitation (tools-call-sampling,
tools-call-elicitation, elicitation-sep1034-defaults, elicitation-sep1330-enums) are relayed as real
server→client requests on the POST's SSE stream; tools-call-with-logging needs ``logging/setLevel``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_conformance import REFEREE, REFEREE_TIMEOUT_S, npx, parse
from tests.support.processes import running_server

pytestmark = pytest.mark.e2e

TOOLS = "ext_tasks.examples.conformance"
SCORED_SCENARIOS = 30
#: The scenarios whose fixtures live in ``ext_tasks.examples.conformance_legacy``.
LEGACY_FIXTURE_SCENARIOS = {
    "tools-call-with-logging",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
}


def test_scored_2025_11_25_requirements_all_pass_on_the_same_endpoint(tmp_path: Path) -> None:
    out_dir = tmp_path / "requirements-2025-11-25"
    with running_server(tmp_path, tools=TOOLS) as server:
        command = f"conformance server --url {server.url} --requirements 2025-11-25 -o {out_dir}"
        try:
            completed = subprocess.run(
                [npx(), "-y", "-p", "node@22", "-p", REFEREE, "-c", command],
                capture_output=True,
                text=True,
                timeout=REFEREE_TIMEOUT_S,
                cwd=tmp_path,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the referee did not finish within {REFEREE_TIMEOUT_S}s\nstdout:\n{exc.stdout!r}")
        run = parse(completed.returncode, completed.stdout, completed.stderr)
        print(f"$ npx ... {command}\n{run.summary()}\nexit code {run.returncode}")
        details = f"{run.summary()}\nserver log:\n{server.log()[-6000:]}"

        scored = set(run.scenarios) - run.not_scored
        assert len(scored) == SCORED_SCENARIOS, f"expected {SCORED_SCENARIOS} scored scenarios: {sorted(scored)}"
        assert scored >= LEGACY_FIXTURE_SCENARIOS, sorted(scored)
        failing = {name: run.scenarios[name] for name in scored if not run.scenarios[name].ok}
        failing |= {name: run.scenarios[name] for name in scored if run.scenarios[name].failed}
        assert not failing, f"failing scored scenarios: {failing}\n{details}"
        assert all(run.scenarios[name].passed > 0 for name in scored), details
        scored_passed = sum(run.scenarios[name].passed for name in scored)
        print(f"scored: {len(scored)} scenarios passed ({scored_passed} checks), 0 failed")
        assert run.returncode == 0, details
