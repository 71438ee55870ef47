"""The conformance referee's three server runs against a server that requires a static bearer token
(``EXT_TASKS_TOKENS``): what passes anonymously passes the same with authentication switched on.

The referee has no option to send a header, so ``tests/support/bearer.cjs`` is preloaded into its Node
(as ``bindlocal.cjs`` is for the client suite): every fetch to the server's origin carries the token.
The server answers 401 to anything without it, so a passing run is one whose every request was
authenticated.

* ``--requirements 2026-07-28``: the 37 scored scenarios;
* ``--suite all --spec-version 2026-07-28``: those and the 3 pending ones;
* ``--requirements 2025-11-25``: the 30 scored scenarios of the stateful wire, through the migration shim.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_REQUEST
from tests.e2e.test_conformance import (
    PENDING_SCENARIOS,
    SCORED_SCENARIOS,
    TOOLS,
    assert_all_passed,
    run_referee,
    warnings_in,
)
from tests.e2e.test_conformance_legacy import SCORED_SCENARIOS as LEGACY_SCORED_SCENARIOS
from tests.support.mcp_http import post
from tests.support.processes import REPO, ServerProcess, running_server

pytestmark = pytest.mark.e2e

TOKEN = "referee-" + secrets.token_urlsafe(16)
BEARER = REPO / "tests" / "support" / "bearer.cjs"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("conformance-token")
    with running_server(directory, tools=TOOLS, env={"EXT_TASKS_TOKENS": f"{TOKEN}=referee"}) as running:
        yield running


def referee_env(server: ServerProcess) -> dict[str, str]:
    parts = urlsplit(server.url)
    return {
        "NODE_OPTIONS": f"--require {BEARER}",
        "BEARER_TOKEN": TOKEN,
        "BEARER_ORIGIN": f"{parts.scheme}://{parts.netloc}",
    }


def test_the_server_refuses_a_request_without_the_token(server: ServerProcess) -> None:
    with httpx.Client(timeout=10.0) as client:
        response, message = post(client, server.url, "server/discover", {})
    assert response.status_code == 401
    assert message["error"]["code"] == INVALID_REQUEST


@pytest.mark.parametrize(
    ("run", "selection", "expected"),
    [
        ("requirements-2026-07-28", ("--requirements", "2026-07-28"), SCORED_SCENARIOS),
        (
            "suite-all-2026-07-28",
            ("--suite", "all", "--spec-version", "2026-07-28"),
            SCORED_SCENARIOS + len(PENDING_SCENARIOS),
        ),
        ("requirements-2025-11-25", ("--requirements", "2025-11-25"), LEGACY_SCORED_SCENARIOS),
    ],
)
def test_the_referee_passes_with_a_bearer_token(
    server: ServerProcess, tmp_path: Path, run: str, selection: tuple[str, ...], expected: int
) -> None:
    out_dir = tmp_path / run
    result = run_referee(server, out_dir, *selection, env=referee_env(server))
    scored = set(result.scenarios) - result.not_scored
    assert len(scored) == expected, sorted(scored)
    assert_all_passed(result, scored, server)
    assert result.returncode == 0, result.summary()
    if run != "requirements-2025-11-25":
        assert warnings_in(out_dir, scored) == []
        assert result.failing_unscored == set(), result.summary()
