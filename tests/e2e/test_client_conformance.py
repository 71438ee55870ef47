"""The official referee's *client* suite for ``ext_tasks.client``: ``conformance client --suite all
--spec-version 2026-07-28`` with ``tests/e2e/conformance_client.py`` as the client.

The referee starts a mock server per scenario and runs the adapter against it; every check must pass
(no FAILURE, no WARNING). ``--suite all`` also runs the ``auth/*`` scenarios; their results sit one
directory deeper (``auth/<name>-<time>/checks.json``) and are counted by the authorization test, which
runs ``--suite auth`` and, a few at a time, the 2026-07-28 authorization scenarios outside that suite and
the extension scenarios for client credentials and DPoP. The mock servers listen on loopback only:
``tests/support/bindlocal.cjs`` is preloaded into Node for that.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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
#: The ``--suite auth`` scenarios (14).
AUTH_SUITE = frozenset({
    "metadata-default", "metadata-var1", "metadata-var2", "metadata-var3", "basic-cimd",
    "scope-from-www-authenticate", "scope-from-scopes-supported", "scope-omitted-when-undefined",
    "scope-step-up", "scope-retry-limit", "token-endpoint-auth-basic", "token-endpoint-auth-post",
    "token-endpoint-auth-none", "pre-registration",
})  # fmt: skip
#: The 2026-07-28 authorization scenarios outside the suite, each run with ``--scenario auth/NAME``.
AUTH_2026 = (
    "resource-mismatch", "offline-access-scope", "offline-access-not-supported", "authorization-server-migration",
    "iss-supported", "iss-not-advertised", "iss-supported-missing", "iss-wrong-issuer", "iss-unexpected",
    "iss-normalized", "metadata-issuer-mismatch",
)  # fmt: skip
#: Extension scenarios (``io.modelcontextprotocol/oauth-client-credentials``, ``.../auth/dpop``): not on
#: the spec's timeline, so the referee runs them at 2026-07-28 only with ``--force``.
AUTH_EXTENSIONS = ("client-credentials-basic", "client-credentials-jwt", "dpop", "dpop-nonce")
TIMEOUT_S = 300
#: Single scenarios run this many at a time (each starts its own mock servers and adapter).
PARALLEL = 6
_RESULT_DIR = re.compile(r"^(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def _referee(arguments: str, out_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = (
        f"conformance client --command '{sys.executable} {ADAPTER}' {arguments} --spec-version 2026-07-28 "
        f"--timeout 60000 -o {out_dir}"
    )
    env = {**os.environ, "NODE_OPTIONS": f"--require {BIND_LOCAL}"}
    return subprocess.run(
        [npx(), "-y", "-p", "node@22", "-p", REFEREE, "-c", command],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
        env=env,
        check=False,
    )


def _results(checks_files: list[Path]) -> tuple[dict[str, Counter[str]], list[str]]:
    """Each scenario's check counts by status, and every FAILURE or WARNING."""
    results: dict[str, Counter[str]] = {}
    problems: list[str] = []
    for checks_file in sorted(checks_files):
        match = _RESULT_DIR.match(checks_file.parent.name)
        assert match is not None, checks_file
        name = match[1]
        counts: Counter[str] = Counter()
        for check in json.loads(checks_file.read_text()):
            counts[check["status"]] += 1
            if check["status"] in ("FAILURE", "WARNING"):
                problems.append(f"{name}: {check['id']} {check['status']}: {check.get('errorMessage')}")
        results[name] = counts
    return results, problems


def test_every_non_auth_client_scenario_passes(tmp_path: Path) -> None:
    out_dir = tmp_path / "client-suite"
    completed = _referee("--suite all", out_dir, tmp_path)
    summary = completed.stdout[completed.stdout.find("=== SUITE SUMMARY ===") :]
    results, problems = _results(list(out_dir.glob("*/checks.json")))  # auth/* results sit one level deeper
    print(f"$ npx ... conformance client --suite all\n{summary}")
    assert set(results) == SCENARIOS, f"scenarios run: {sorted(results)}\n{completed.stdout[-3000:]}"
    assert problems == [], "\n".join(problems)
    passed = sum(counts["SUCCESS"] for counts in results.values())
    print(f"client suite, 2026-07-28, without auth/*: {len(results)} scenarios, {passed} checks passed, 0 failed")
    assert all(counts["SUCCESS"] > 0 for counts in results.values()), results


def test_every_authorization_scenario_passes(tmp_path: Path) -> None:
    runs = [("--suite auth", tmp_path / "suite")]
    runs += [(f"--scenario auth/{name}", tmp_path / name) for name in AUTH_2026]
    runs += [(f"--scenario auth/{name} --force", tmp_path / name) for name in AUTH_EXTENSIONS]
    with ThreadPoolExecutor(PARALLEL) as pool:
        completed = list(pool.map(lambda run: _referee(run[0], run[1], tmp_path), runs))
    results, problems = _results([path for _, out_dir in runs for path in out_dir.glob("auth/*/checks.json")])
    expected = {*AUTH_SUITE, *AUTH_2026, *AUTH_EXTENSIONS}
    outputs = "\n".join(run.stdout[-2000:] for run in completed if run.returncode != 0)
    assert set(results) == expected, f"missing: {sorted(expected - set(results))}\n{outputs}"
    assert problems == [], "\n".join(problems)
    assert all(counts["SUCCESS"] > 0 for counts in results.values()), results
    for name, counts in sorted(results.items()):
        print(f"auth/{name}: {counts['SUCCESS']} passed, 0 failed")
    passed = sum(counts["SUCCESS"] for counts in results.values())
    print(f"authorization scenarios, 2026-07-28: {len(results)} scenarios, {passed} checks passed, 0 failed")
    assert [run.returncode for run in completed] == [0] * len(runs), outputs
