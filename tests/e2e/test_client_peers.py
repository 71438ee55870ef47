"""``ext_tasks.client`` against servers that are not this one: it is a client for any 2026-07-28 server.

* FastMCP 4 (``fastmcp[tasks]==4.1.4``, ``tests/e2e/peers/fastmcp4_server.py``): an independent Tasks
  extension. A plain call, a task (polled: FastMCP offers no ``subscriptions/listen`` for tasks), a task
  that asks inside it (answered with ``tasks/update``), and a multi round-trip call.
* The Python SDK 2.3.0 server (``bench/peers/sdk_server.py``, uvicorn, ``mcp==2.3.0``): MRTR without
  tasks, its ``requestState`` sealed by the SDK and verified on the retry.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ext_tasks.client import Client
from tests.e2e.test_legacy_client_fastmcp import SERVER, _process, fastmcp4_python
from tests.support.clients import mcp2_python
from tests.support.cluster import wait_for
from tests.support.processes import REPO, free_port, stop

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SDK_SERVER = REPO / "bench" / "peers" / "sdk_server.py"
__all__ = ["fastmcp4_python"]  # a fixture, used by name below


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fastmcp(fastmcp4_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [str(fastmcp4_python), str(SERVER), "--host", "127.0.0.1", "--port", str(port)]
    with _process(command, tmp_path_factory.mktemp("fastmcp") / "fastmcp4.log", url):
        yield url


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    command = [str(mcp2_python()), str(SDK_SERVER), "--port", str(port), "--key", secrets.token_hex(32)]
    log_path = tmp_path_factory.mktemp("sdk") / "sdk.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        # Its GET /mcp is an endless stream, so "listening" is a socket that accepts.
        wait_for(
            lambda: _accepts(port, process), 60, message=lambda: f"the SDK server to listen:\n{log_path.read_text()}"
        )
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


def _accepts(port: int, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"the SDK server exited with {process.returncode}")
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


async def _confirm(params: dict[str, Any]) -> dict[str, Any]:
    field = next(iter(params["requestedSchema"]["properties"]))
    return {"action": "accept", "content": {field: True if field == "confirm" else "Ada"}}


def _text(result: dict[str, Any]) -> str:
    return " ".join(item["text"] for item in result["content"] if item["type"] == "text")


async def test_fastmcp_plain_call_and_task(fastmcp: str) -> None:
    async with Client(fastmcp) as client:
        assert _text(await client.call_tool("greet", {"name": "Ada"})) == "Hello, Ada!"
        handle = await client.start_tool("slow_compute", {"seconds": 1, "label": "peer"})
        assert handle.task_id is not None
        statuses = [state["status"] async for state in handle.updates()]
        assert statuses[-1] == "completed" and "working" in statuses
        assert _text(await handle.wait()) == "peer: computed after 1s"


async def test_fastmcp_task_asking_inside_it(fastmcp: str) -> None:
    async with Client(fastmcp, elicitation=_confirm) as client:
        handle = await client.start_tool("confirm_delete", {"filename": "old.log"})
        assert handle.task_id is not None
        assert _text(await handle.wait()) == "Deleted old.log."


async def test_fastmcp_multi_round_call(fastmcp: str) -> None:
    async with Client(fastmcp, elicitation=_confirm) as client:
        assert _text(await client.call_tool("test_input_required_result_elicitation", {})) == "Hello, Ada!"


async def test_sdk_server_multi_round_call(sdk_server: str) -> None:
    async with Client(sdk_server, elicitation=_confirm) as client:
        assert [tool["name"] for tool in await client.list_tools()] == ["ask_once"]
        assert _text(await client.call_tool("ask_once", {"item": "invoice"})) == "invoice: accept"
