"""A requestState issued by one server process is honoured by another exactly when they share a key.

Raw HTTP (httpx) against real processes: the client side here is the wire itself, so every request
carries the 2026-07-28 headers and ``_meta`` built by ``tests.support.mcp_http``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_PARAMS
from tests.support.cluster import keygen
from tests.support.mcp_http import post
from tests.support.processes import REPO, ServerProcess, free_port, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.mrtr_tools"
CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}
INVALID_STATE = "Invalid or expired requestState"
CLI_TIMEOUT_S = 30


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as client:
        yield client


def call_introduce(
    http: httpx.Client,
    server: ServerProcess,
    *,
    responses: dict[str, Any] | None = None,
    state: str | None = None,
) -> dict[str, Any]:
    """One round of ``tools/call introduce``; returns the JSON-RPC response message."""
    params: dict[str, Any] = {"name": "introduce", "arguments": {"greeting": "Hi"}}
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    response, message = post(http, server.url, "tools/call", params, capabilities=CAPABILITIES)
    assert response.status_code in (200, 400), f"HTTP {response.status_code}: {response.text}\n{server.log()}"
    return message


def accept(field: str, value: str) -> dict[str, Any]:
    return {field: {"action": "accept", "content": {field: value}}}


def expect_question(message: dict[str, Any], key: str) -> str:
    """Assert an ``input_required`` result asking exactly ``key``; return its requestState."""
    assert "result" in message, message
    result = message["result"]
    assert result["resultType"] == "input_required", result
    assert list(result["inputRequests"]) == [key], result
    assert result["inputRequests"][key]["method"] == "elicitation/create"
    state = result["requestState"]
    assert isinstance(state, str)
    assert state
    return state


def expect_invalid_state(message: dict[str, Any]) -> None:
    assert "error" in message, message
    assert message["error"]["code"] == INVALID_PARAMS, message
    assert message["error"]["message"] == INVALID_STATE, message


def test_retry_on_another_instance_with_the_same_keys_completes(tmp_path: Path, http: httpx.Client) -> None:
    env = {"EXT_TASKS_STATE_KEYS": keygen()}
    with (
        running_server(tmp_path, tools=TOOLS, env=env) as a,
        running_server(tmp_path, tools=TOOLS, env=env) as b,
    ):
        state = expect_question(call_introduce(http, a), "name")
        # Round 2 on B: B unseals A's state and asks the second question.
        state = expect_question(call_introduce(http, b, responses=accept("name", "Ada"), state=state), "colour")
        assert b.log().count("requestState rejected") == 0
        # Round 3 back on A: the answers collected on both instances travel in the state.
        final = call_introduce(http, a, responses=accept("colour", "teal"), state=state)
        assert "result" in final, final
        assert final["result"]["resultType"] == "complete", final
        assert final["result"]["isError"] is False
        assert final["result"]["content"] == [{"type": "text", "text": "Hi, Ada! Your favourite colour is teal."}]


def test_single_round_retry_on_another_instance_completes(tmp_path: Path, http: httpx.Client) -> None:
    """The brief's exact shape: round 1 on A, the retry with every answer on B, complete."""
    env = {"EXT_TASKS_STATE_KEYS": keygen()}
    with (
        running_server(tmp_path, tools=TOOLS, env=env) as a,
        running_server(tmp_path, tools=TOOLS, env=env) as b,
    ):
        state = expect_question(call_introduce(http, a), "name")
        answers = {**accept("name", "Grace"), **accept("colour", "plum")}
        final = call_introduce(http, b, responses=answers, state=state)
        assert "result" in final, final
        assert final["result"]["resultType"] == "complete", final
        assert final["result"]["content"][0]["text"] == "Hi, Grace! Your favourite colour is plum."


def test_retry_on_an_instance_with_different_keys_is_rejected(tmp_path: Path, http: httpx.Client) -> None:
    with (
        running_server(tmp_path, tools=TOOLS, env={"EXT_TASKS_STATE_KEYS": keygen()}) as a,
        running_server(tmp_path, tools=TOOLS, env={"EXT_TASKS_STATE_KEYS": keygen()}) as b,
    ):
        state = expect_question(call_introduce(http, a), "name")
        rejected = call_introduce(http, b, responses=accept("name", "Ada"), state=state)
        expect_invalid_state(rejected)
        # The same state is still good where it was issued.
        expect_question(call_introduce(http, a, responses=accept("name", "Ada"), state=state), "colour")


def test_key_rotation_accepts_state_sealed_with_the_old_key(tmp_path: Path, http: httpx.Client) -> None:
    old, new = keygen(), keygen()
    with (
        running_server(tmp_path, tools=TOOLS, env={"EXT_TASKS_STATE_KEYS": old}) as before,
        running_server(tmp_path, tools=TOOLS, env={"EXT_TASKS_STATE_KEYS": f"{new},{old}"}) as rotated,
    ):
        old_state = expect_question(call_introduce(http, before), "name")
        # [new, old] still opens what [old] sealed ...
        new_state = expect_question(
            call_introduce(http, rotated, responses=accept("name", "Ada"), state=old_state), "colour"
        )
        final = call_introduce(http, rotated, responses=accept("colour", "teal"), state=new_state)
        assert final["result"]["resultType"] == "complete", final
        assert final["result"]["content"][0]["text"] == "Hi, Ada! Your favourite colour is teal."
        # ... and seals with the newest key, which an instance that only knows [old] cannot open.
        expect_invalid_state(call_introduce(http, before, responses=accept("colour", "teal"), state=new_state))


def test_workers_sharing_keys_accept_each_others_state(tmp_path: Path) -> None:
    """``--workers 2`` (which needs a shared store) with EXT_TASKS_STATE_KEYS: rounds on fresh
    connections (so any worker process) all complete."""
    with running_valkey(tmp_path / "valkey") as valkey:
        env = {"EXT_TASKS_STATE_KEYS": keygen(), "EXT_TASKS_VALKEY_URL": valkey.url}
        with running_server(tmp_path, tools=TOOLS, env=env, extra_args=("--workers", "2")) as server:
            _rounds_on_fresh_connections_complete(server)


def test_several_workers_without_a_shared_store_refuse_to_start(tmp_path: Path) -> None:
    env = {**os.environ, "EXT_TASKS_STATE_KEYS": keygen()}
    env.pop("EXT_TASKS_VALKEY_URL", None)
    completed = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "serve", "--port", str(free_port()), "--tools", TOOLS, "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert completed.returncode == 2
    assert "EXT_TASKS_VALKEY_URL" in completed.stderr
    assert "Running on" not in completed.stdout + completed.stderr


def _rounds_on_fresh_connections_complete(server: ServerProcess) -> None:
    for attempt in range(12):
        # A new connection per round lets the kernel hand each round to either worker.
        with httpx.Client(timeout=10.0) as first:
            state = expect_question(call_introduce(first, server), "name")
        with httpx.Client(timeout=10.0) as second:
            answers = {**accept("name", f"Ada{attempt}"), **accept("colour", "teal")}
            final = call_introduce(second, server, responses=answers, state=state)
        assert "result" in final, (attempt, final)
        assert final["result"]["content"][0]["text"] == f"Hi, Ada{attempt}! Your favourite colour is teal."


def test_several_workers_without_state_keys_refuse_to_start(tmp_path: Path) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("EXT_TASKS_STATE_KEYS", "EXT_TASKS_STATE_KEYS_FILE", "EXT_TASKS_WORKERS")
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ext_tasks",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--tools",
            TOOLS,
            "--workers",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,  # its own process group, so a server that did start is stopped whole
    )
    try:
        stdout, stderr = process.communicate(timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"`ext-tasks serve --workers 2` started without EXT_TASKS_STATE_KEYS:\n{stdout}\n{stderr}")
    assert process.returncode != 0, f"exit 0:\n{stdout}\n{stderr}"
    assert "EXT_TASKS_STATE_KEYS" in stderr, f"exit {process.returncode}:\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert "Running on" not in stdout + stderr
