"""The real 2025-11-25 client (``mcp==1.27.2``, its experimental tasks API) against the migration shim.

Same client, same checks, four deployments: (a) one server, (b) three servers on one Valkey behind
nginx round-robin (sessions and relayed answers cross instances), (c) ``ext-tasks proxy`` in front of a
server. The client runs in its own interpreter (``EXT_TASKS_MCP1_PYTHON``, default
``.venvs/mcp1/bin/python``), so mcp 1.x never shares an environment with mcp 2.x or the dev tools.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import METHOD_NOT_FOUND
from tests.support.clients import mcp1_python, run_json_client
from tests.support.cluster import running_cluster, wait_for
from tests.support.processes import REPO, free_port, running_server, stop

pytestmark = pytest.mark.e2e

TOOLS = "ext_tasks.examples.conformance"
CLIENT = REPO / "tests" / "e2e" / "clients" / "mcp1_client.py"


def run_client(url: str) -> dict[str, Any]:
    observed = run_json_client(mcp1_python(), CLIENT, url)
    print(json.dumps(observed))
    return observed


def assert_legacy_flow(observed: dict[str, Any], *, policies_known: bool = True, ttl: int = 90_000) -> None:
    """The flow of ``mcp1_client.py``; ``ttl`` is the task lifetime the server reports for the client's
    90 s hint (a server that does not take the hint reports its own)."""
    assert observed["protocolVersion"] == "2025-11-25"
    assert observed["tasksCapability"] is True
    if policies_known:
        assert observed["taskSupport"] == {
            "greet": "forbidden",
            "slow_compute": "optional",
            "confirm_delete": "required",
        }
    assert observed["created"] == {"status": "working", "ttl": ttl}  # by default: the client's ttl hint was honoured
    assert observed["polled"][-1] == "completed"
    assert set(observed["polled"][:-1]) <= {"working"}
    assert observed["result"] == "job: computed after 1s"
    assert observed["relatedTask"] is not None
    assert observed["inputTask"] == "Deleted old.log."
    assert observed["inputTaskStatus"] == "completed"
    assert observed["listed"] == observed["expectedListed"]
    assert observed["cancelled"] == observed["afterCancel"] == "cancelled"
    assert observed["mrtr"] == "Hello, Grace!"
    # A forbidden tool asked for as a task: -32601 where the policy is known; through a proxy (policy not on
    # the wire) the upstream answers inline and the shim hands the answer over as a completed task.
    assert observed["forbiddenAsTask"] == (METHOD_NOT_FOUND if policies_known else "Hello, Ada!")
    assert observed["elicitations"] == ["Delete old.log?", "What is your name?"]


def test_legacy_client_against_the_server(tmp_path: Path) -> None:
    with running_server(tmp_path, tools=TOOLS) as server:
        assert_legacy_flow(run_client(server.url))


def test_legacy_client_through_the_three_instance_balancer(tmp_path: Path, store_url: str | None) -> None:
    with running_cluster(tmp_path, tools=TOOLS, valkey_url=store_url) as cluster:
        assert_legacy_flow(run_client(cluster.url))
        used = cluster.balancer.upstreams_used()
        assert len(used) == len(cluster.servers), f"every instance must have served the session: {used}"


@pytest.fixture
def proxied_server(tmp_path: Path) -> Iterator[str]:
    with running_server(tmp_path, tools=TOOLS) as upstream:
        port = free_port()
        log = (tmp_path / "proxy.log").open("wb")
        proxy = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ext_tasks",
                "proxy",
                "--upstream",
                upstream.url,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            wait_for(lambda: _answers(url), 30, message="the proxy to listen")
            yield url
        finally:
            stop(proxy)
            log.close()


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=0.5)
    except httpx.TransportError:
        return False
    return True


def test_legacy_client_through_the_proxy(proxied_server: str) -> None:
    # Task policies are not on the 2026-07-28 wire, so through a proxy every tool is offered as optional.
    observed = run_client(proxied_server)
    assert_legacy_flow(observed, policies_known=False)
    assert set(observed["taskSupport"].values()) == {"optional"}
