"""``ext-tasks proxy`` in front of a hostile upstream (``tests.support.hostile``, a real HTTP server on
loopback): whatever the upstream sends, the proxy reads a bounded amount of it, waits a bounded time, and
answers a JSON-RPC error in the caller's era rather than relaying it, growing, hanging or failing bare.

The proxy runs with ``EXT_TASKS_PROXY_MAX_ANSWER_BYTES`` = 1 MiB (the upstream's huge answers are 32 MiB)
and ``EXT_TASKS_PROXY_READ_TIMEOUT_S`` = 2 (the upstream stays quiet for 3 s where it is allowed to).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from tests.support.cluster import wait_for
from tests.support.hostile import CHALLENGE, HostileServer
from tests.support.mcp_http import modern_request
from tests.support.memory import peak_rss_mib, rss_mib
from tests.support.processes import REPO, free_port, stop

pytestmark = pytest.mark.e2e

CAP = 1024 * 1024
READ_TIMEOUT_S = 2.0
QUIET_S = 3.0
#: What reading a 32 MiB answer may cost the proxy, at most (it used to hold it whole several times over).
GROWTH_BOUND_MIB = 24.0


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileServer]:
    with HostileServer(huge_bytes=32 * 1024 * 1024, quiet_s=QUIET_S, quiet_listen=True) as hostile:
        yield hostile


@pytest.fixture(scope="module")
def proxy(upstream: HostileServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The proxy's URL and PID."""
    env = {
        **os.environ,
        "EXT_TASKS_PROXY_MAX_ANSWER_BYTES": str(CAP),
        "EXT_TASKS_PROXY_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
    }
    port = free_port()
    log = tmp_path_factory.mktemp("proxy") / "proxy.log"
    command = [sys.executable, "-m", "ext_tasks", "proxy", "--upstream", upstream.url, "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for(lambda: _listening(url), 30, message=lambda: f"the proxy to listen: {log.read_text()}")
        yield url, process.pid
    finally:
        stop(process)


def _listening(url: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        httpx.get(url, timeout=0.5)
        return True
    return False


def _call(url: str, tool: str, **extra: Any) -> httpx.Response:
    headers, body = modern_request("tools/call", {"name": tool, "arguments": {}}, **extra)
    return httpx.post(url, headers=headers, json=body, timeout=30)


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text[:300]
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.mark.parametrize("tool", ["huge", "endless-line", "endless-event"])
def test_a_huge_upstream_answer_is_a_502_and_the_proxy_stays_small(proxy: tuple[str, int], tool: str) -> None:
    url, pid = proxy
    baseline = rss_mib(pid)
    response = _call(url, tool, request_id=f"huge-{tool}")
    growth = peak_rss_mib(pid) - baseline
    print(f"{tool}: HTTP {response.status_code}, proxy peak RSS +{growth:.1f} MiB over {baseline:.1f}")
    assert response.status_code == 502
    assert response.json()["id"] == f"huge-{tool}"
    assert "Upstream answer too large" in _error(response)["message"]
    assert growth < GROWTH_BOUND_MIB


def test_a_silent_upstream_is_a_504_within_the_read_timeout(proxy: tuple[str, int]) -> None:
    url, _ = proxy
    started = time.monotonic()
    response = _call(url, "stall")
    waited = time.monotonic() - started
    assert response.status_code == 504 and _error(response)["code"] == INTERNAL_ERROR, response.text[:300]
    assert READ_TIMEOUT_S <= waited < READ_TIMEOUT_S + 3, f"answered after {waited:.1f}s"
    # Silence is measured between reads: keep-alives for longer than the timeout keep a stream open ...
    kept = _call(url, "keepalives")
    assert kept.status_code == 200 and "kept alive" in kept.text
    # ... and a listen may stay silent longer (a subscription is quiet while nothing changes).
    headers, body = modern_request("subscriptions/listen", {"notifications": {}})
    listened = httpx.post(url, headers=headers, json=body, timeout=30)
    assert listened.status_code == 200 and "notifications/subscriptions/acknowledged" in listened.text


@pytest.mark.parametrize(("tool", "status"), [("redirect", 307), ("empty-502", 502)])
def test_an_empty_answer_is_a_502_not_a_202(proxy: tuple[str, int], tool: str, status: int) -> None:
    response = _call(proxy[0], tool, request_id=tool)
    assert response.status_code == 502, response.text[:300]
    assert response.json()["id"] == tool
    assert _error(response)["message"] == f"Upstream answered HTTP {status} without a body"


def test_deep_json_is_a_parse_error_not_a_bare_500(proxy: tuple[str, int]) -> None:
    response = _call(proxy[0], "deep", request_id="deep")
    assert response.status_code == 502, response.text[:300]
    assert response.json()["id"] == "deep"
    error = _error(response)
    assert error["code"] == PARSE_ERROR and "nested deeper than 100 levels" in error["message"]


def test_a_legacy_caller_gets_the_same_answers_in_its_era(proxy: tuple[str, int]) -> None:
    url, pid = proxy
    accept = {"Accept": "application/json, text/event-stream"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "1"}}
    opened = httpx.post(url, headers=accept, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    headers = {**accept, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    baseline = rss_mib(pid)

    def call(tool: str) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": tool, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
        return httpx.post(url, headers=headers, json=body, timeout=30)

    expected = {
        "huge": (502, "Upstream answer too large"),
        "endless-line": (502, "Upstream answer too large"),
        "stall": (504, "Upstream server sent nothing"),
        "redirect": (502, "Upstream answered HTTP 307 without a body"),
        "empty-502": (502, "Upstream answered HTTP 502 without a body"),
        "deep": (502, "nested deeper than 100 levels"),
        # Read into the result type of its method before it is translated: a wrong shape is refused there.
        "malformed": (502, "Upstream answered tools/call with a malformed result: Expected `array`, got `str`"),
    }
    for tool, (status, text) in expected.items():
        response = call(tool)
        assert (response.status_code, response.json()["id"]) == (status, tool), response.text[:300]
        assert text in _error(response)["message"]
    assert peak_rss_mib(pid) - baseline < GROWTH_BOUND_MIB


def test_the_upstreams_challenge_reaches_the_client(proxy: tuple[str, int]) -> None:
    """The upstream is the resource server: its 401 and the challenge naming its metadata come back as
    they are, so an OAuth client behind the proxy can find the authorization server."""
    response = _call(proxy[0], "unauthorized")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == CHALLENGE
    assert _error(response)["code"] == INVALID_REQUEST
