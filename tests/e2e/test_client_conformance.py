"""The official referee's *client* suite for ``ext_tasks.client``: ``conformance client --suite all
--spec-version 2026-07-28`` with ``tests/e2e/conformance_client.py`` as the client.

The referee starts a mock server per scenario and runs the adapter against it. Every scenario but the
25 ``auth/*`` ones must pass every check (no FAILURE, no WARNING): the client has no OAuth, so those
are left out (the adapter declines them and they fail; they are not counted). The mock servers listen
on loopback only: ``tests/support/bindlocal.cjs`` is preloaded into Node for that.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.test_conformance import REFEREE, npx
from tests.support.processes import REPO

pytestmark = pytest.mark.e2e

ADAPTER = REPO / "tests" / "e2e" / "conformance_client.py"
BIND_LOCAL = REPO / "tests" / "support" / "bindlocal.cjs"
#: The 2026-07-28 client scenarios outside ``auth/*`` (the referee's list for that revision).
SCENARIOS = frozenset({
    "tools_call",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
})  # fmt: skip
TIMEOUT_S = 300
_RESULT_DIR = re.compile(r"^(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def test_every_non_auth_client_scenario_passes(tmp_path: Path) -> None:
    out_dir = tmp_path / "client-suite"
    command = (
        f"conformance client --command '{sys.executable} {ADAPTER}' --suite all --spec-version 2026-07-28 "
        f"--timeout 60000 -o {out_dir}"
    )
    env = {**os.environ, "NODE_OPTIONS": f"--require {BIND_LOCAL}"}
    completed = subprocess.run(
        [npx(), "-y", "-p", "node@22", "-p", REFEREE, "-c", command],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    summary = completed.stdout[completed.stdout.find("=== SUITE SUMMARY ===") :]
    results: dict[str, Counter[str]] = {}
    problems: list[str] = []
    for checks_file in sorted(out_dir.glob("*/checks.json")):  # auth/* results sit one level deeper
        match = _RESULT_DIR.match(checks_file.parent.name)
        assert match is not None, checks_file
        name = match[1]
        counts: Counter[str] = Counter()
        for check in json.loads(checks_file.read_text()):
            counts[check["status"]] += 1
            if check["status"] in ("FAILURE", "WARNING"):
                problems.append(f"{name}: {check['id']} {check['status']}: {check.get('errorMessage')}")
        results[name] = counts
    print(f"$ npx ... {command}\n{summary}")
    assert set(results) == SCENARIOS, f"scenarios run: {sorted(results)}\n{completed.stdout[-3000:]}"
    assert problems == [], "\n".join(problems)
    passed = sum(counts["SUCCESS"] for counts in results.values())
    print(f"client suite, 2026-07-28, without auth/*: {len(results)} scenarios, {passed} checks passed, 0 failed")
    assert all(counts["SUCCESS"] > 0 for counts in results.values()), results
