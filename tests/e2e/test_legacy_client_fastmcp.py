"""Deployment (d): the real 2025-11-25 client through ``ext-tasks proxy`` in front of an independent server.

The upstream is FastMCP 4 (``fastmcp[tasks]==4.1.4``), a 2026-07-28 server with its own implementation
of the Tasks extension (``io.modelcontextprotocol/tasks``), running ``tests/e2e/peers/fastmcp4_server.py``
in its own interpreter (``EXT_TASKS_FASTMCP4_PYTHON``, default ``.venvs/fastmcp4/bin/python``, created
on demand when that default is missing). The client is ``mcp==1.27.2`` (``mcp1_client.py``), the same
script and the same checks as deployments (a)-(c) in ``test_legacy_client.py``.

What differs from deployment (a), neither of it the shim's doing:

* the task lifetime: SEP-2663 has no client-requested ttl; FastMCP never reads one (``create_task``
  reports ``ttlMs = docket.execution_ttl``, Docket's 15 min default, which ``TasksExtension`` does not
  let a server change), so the legacy client's 90 s hint is reported back as 900000 ms;
* task policies are not on the 2026-07-28 wire, so through the proxy every tool is offered ``optional``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_legacy_client import assert_legacy_flow, run_client
from tests.support.cluster import wait_for
from tests.support.processes import REPO, free_port, stop

pytestmark = pytest.mark.e2e

SERVER = REPO / "tests" / "e2e" / "peers" / "fastmcp4_server.py"
FASTMCP_REQUIREMENT = "fastmcp[tasks]==4.1.4"
DEFAULT_VENV = REPO / ".venvs" / "fastmcp4"
#: Docket's default ``execution_ttl`` (15 min), which FastMCP reports as every task's ``ttlMs``.
FASTMCP_TASK_TTL_MS = 900_000
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


@pytest.fixture(scope="session")
def fastmcp4_python() -> Path:
    """The FastMCP 4 interpreter; the default virtualenv is created if missing, a configured one must exist."""
    configured = os.environ.get("EXT_TASKS_FASTMCP4_PYTHON")
    if configured:
        python = Path(configured)
        if not python.exists():
            pytest.fail(
                f"EXT_TASKS_FASTMCP4_PYTHON={configured} does not exist: point it at a Python that has "
                f"{FASTMCP_REQUIREMENT} installed, or unset it to create {DEFAULT_VENV}.",
                pytrace=False,
            )
        return python
    python = DEFAULT_VENV / "bin" / "python"
    DEFAULT_VENV.parent.mkdir(parents=True, exist_ok=True)
    with (DEFAULT_VENV.parent / ".fastmcp4.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one creator when several test processes start at once
        if not _has_fastmcp(python):
            _create_venv(python)
    return python


def _has_fastmcp(python: Path) -> bool:
    if not python.exists():
        return False
    check = [str(python), "-c", "import fastmcp, fastmcp_tasks; assert fastmcp.__version__ == '4.1.4'"]
    return subprocess.run(check, capture_output=True, timeout=120, check=False).returncode == 0


def _create_venv(python: Path) -> None:
    steps = [
        [sys.executable, "-m", "venv", str(DEFAULT_VENV)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", FASTMCP_REQUIREMENT],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            pytest.fail(
                f"could not create the FastMCP 4 virtualenv ({' '.join(step)}):\n{done.stdout}\n{done.stderr[-4000:]}"
                "\nRun bash scripts/test.sh, or point EXT_TASKS_FASTMCP4_PYTHON at a Python with "
                f"{FASTMCP_REQUIREMENT}.",
                pytrace=False,
            )


@contextlib.contextmanager
def _process(command: list[str], log_path: Path, url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start one process on 127.0.0.1, wait until ``url`` answers HTTP, stop it by PID afterwards."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    try:

        def listening() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"{command[:3]} exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                httpx.get(url, timeout=0.5)
            except httpx.TransportError:
                return False
            return True

        wait_for(listening, 60, message=lambda: f"{url} to listen:\n{log_path.read_text()}")
        yield process
    finally:
        stop(process)


@pytest.fixture
def fastmcp_upstream(fastmcp4_python: Path, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [str(fastmcp4_python), str(SERVER), "--host", "127.0.0.1", "--port", str(port)]
    with _process(command, tmp_path / "fastmcp4.log", url):
        yield url


@pytest.fixture
def proxy_to_fastmcp(fastmcp_upstream: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [
        sys.executable,
        "-m",
        "ext_tasks",
        "proxy",
        "--upstream",
        fastmcp_upstream,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with _process(command, tmp_path / "proxy.log", url):
        yield url


def _upstream_task(url: str, task_id: str) -> dict[str, Any]:
    """``tasks/get`` straight to FastMCP (2026-07-28, anonymous: the scope the proxy's calls ran in)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id, "_meta": meta}}
    headers = {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
        "Mcp-Name": task_id,
        "Accept": "application/json, text/event-stream",
    }
    response = httpx.post(url, json=body, headers=headers, timeout=10)
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        message: dict[str, Any] = json.loads(data[-1])
    else:
        message = response.json()
    assert "result" in message, message
    task: dict[str, Any] = message["result"]
    return task


def test_legacy_client_through_the_proxy_in_front_of_fastmcp(fastmcp_upstream: str, proxy_to_fastmcp: str) -> None:
    observed = run_client(proxy_to_fastmcp)

    # The whole legacy flow of deployments (a)-(c): tasks/get polling, blocking tasks/result with the
    # related-task _meta, input inside a task relayed as elicitation/create and answered upstream with
    # tasks/update, tasks/list, a sticky tasks/cancel, and MRTR on a plain call as a real elicitation.
    # FastMCP reports its own task lifetime (the 90 s hint has no carrier in SEP-2663).
    assert_legacy_flow(observed, policies_known=False, ttl=FASTMCP_TASK_TTL_MS)
    assert observed["taskSupport"] == dict.fromkeys(("greet", "slow_compute", "confirm_delete"), "optional")

    # The same tasks as FastMCP itself reports them: the work really ran (and re-entered) there, and
    # the cancellation reached it, it is not only the shim's sticky legacy status.
    computed_id = observed["relatedTask"]["taskId"]
    asked_id = next(task_id for task_id in observed["expectedListed"] if task_id != computed_id)
    computed = _upstream_task(fastmcp_upstream, computed_id)
    assert computed["status"] == "completed"
    assert computed["result"]["content"][0]["text"] == "job: computed after 1s"
    assert computed["ttlMs"] == FASTMCP_TASK_TTL_MS
    asked = _upstream_task(fastmcp_upstream, asked_id)
    assert asked["status"] == "completed"
    assert asked["result"]["content"][0]["text"] == "Deleted old.log."
    assert _upstream_task(fastmcp_upstream, observed["cancelledTaskId"])["status"] == "cancelled"
