"""The notifications of an inline request wait for their client in a bounded buffer (``ext_tasks.outbox``).

A real server runs ``spew``, a tool that reports progress as fast as it can (1 KB a report). A client that
sends the request over a raw socket and never reads must not grow the server (it did by ~55 MB a second),
in either era (a 2025-11-25 session's call is the engine's stream relayed by the shim);
a client that reads slowly loses the oldest progress, counted in ``ext_tasks_notifications_dropped_total``,
and still gets the final result, after the progress that was kept, in order.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.cluster import wait_for
from tests.support.mcp_http import modern_request
from tests.support.memory import rss_mib
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

TOOLS = "investigations.hardening.figtools"  # ``spew``, also measured by investigations/hardening/fig5_buffers.py
SPEW_S = 3.0
#: What a stream that nobody reads may cost the server, at most: the buffer holds 256 reports of ~1 KB,
#: and the socket's buffers a few MB more. The unbounded queue grew past this within the first second.
GROWTH_BOUND_MIB = 24.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("buffers"), tools=TOOLS) as served:
        yield served


def _dropped(server: ServerProcess, kind: str = "progress") -> float:
    text = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10).text
    found = re.search(rf'^ext_tasks_notifications_dropped_total{{kind="{kind}"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _spew_request(arguments: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    return modern_request("tools/call", {"name": "spew", "arguments": arguments, "_meta": {"progressToken": "spew"}})


def _legacy_spew_request(server: ServerProcess, arguments: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """The same call in a 2025-11-25 session (the shim relays the engine's stream)."""
    accept = {"Accept": "application/json, text/event-stream"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "buffers", "version": "1"}}
    opened = httpx.post(
        server.url, headers=accept, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
    )
    headers = {**accept, "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"}
    headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    params = {"name": "spew", "arguments": arguments, "_meta": {"progressToken": "spew"}}
    return headers, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
def test_a_client_that_never_reads_does_not_grow_the_server(server: ServerProcess, era: str) -> None:
    arguments = {"seconds": SPEW_S, "pad": 1000}
    headers, body = _spew_request(arguments) if era == "2026-07-28" else _legacy_spew_request(server, arguments)
    payload = json.dumps(body).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{head}Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    dropped_before = _dropped(server)
    baseline = rss_mib(server.process.pid)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(request)  # ... and never read a byte of the answer
        peak = baseline
        ends = time.monotonic() + SPEW_S + 1.0
        while time.monotonic() < ends:
            peak = max(peak, rss_mib(server.process.pid))
            time.sleep(0.1)  # sampling the server's memory as the tool runs
        dropped = _dropped(server) - dropped_before
    growth = peak - baseline
    print(f"server RSS {baseline:.1f} -> peak {peak:.1f} MiB (+{growth:.1f}); progress dropped: {dropped:.0f}")
    assert growth < GROWTH_BOUND_MIB, f"the server grew by {growth:.1f} MiB behind a client that does not read"
    assert dropped > 0, "the reports the client could not take were not counted"
    # The server still answers (the tool did not hold the event loop).
    headers, body = modern_request("tools/list")
    assert httpx.post(server.url, headers=headers, json=body, timeout=10).status_code == 200


def test_a_slow_reader_gets_the_final_result_after_the_kept_progress(server: ServerProcess) -> None:
    count = 30_000
    headers, body = _spew_request({"count": count, "seconds": 60, "pad": 1000})
    dropped_before = _dropped(server)
    with httpx.Client(timeout=30) as client, client.stream("POST", server.url, headers=headers, json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.iter_lines())
        first = next(events)
        # Reading stops until the tool has outrun the client: it must not wait for the reader.
        wait_for(lambda: _dropped(server) > dropped_before, 30, message="progress dropped for the slow reader")
        rest = list(events)
    messages = [first, *rest]
    final = messages[-1]
    progress = [message["params"]["progress"] for message in messages[:-1]]
    print(f"{len(progress)} of {count} progress notifications delivered, then the result")
    assert final["id"] == body["id"] and final["result"]["content"][0]["text"] == f"reported {count}"
    assert all(message.get("method") == "notifications/progress" for message in messages[:-1])
    assert progress == sorted(progress) and len(set(progress)) == len(progress), "kept in order, none twice"
    assert progress[-1] == count, "the newest progress is kept (the oldest goes first)"
    assert len(progress) < count


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data:"):
            yield json.loads(line[5:])
