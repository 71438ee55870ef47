"""Callers kept apart: two principals (bearer tokens) on one server. Every attempt by one on the other's
tasks or state is answered exactly like an unknown id or a bad state: counted, and no leak allowed."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_REQUEST
from ext_tasks.protocol.resume import generate_key
from tests.support.mcp_http import modern_request, post
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TOKENS = {"alice": "token-a-" + secrets.token_hex(8), "bob": "token-b-" + secrets.token_hex(8)}
CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
TASKS = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("principals")
    tokens = ",".join(f"{token}={name}" for name, token in TOKENS.items())
    with running_valkey(directory / "valkey") as valkey:
        env = {"EXT_TASKS_VALKEY_URL": valkey.url, "EXT_TASKS_STATE_KEYS": generate_key(), "EXT_TASKS_TOKENS": tokens}
        with running_server(directory, tools="ext_tasks.examples.conformance", env=env) as running:
            yield running


def as_(who: str) -> httpx.Client:
    return httpx.Client(timeout=10.0, headers={"Authorization": f"Bearer {TOKENS[who]}"})


def rpc(client: httpx.Client, server: ServerProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    _, message = post(client, server.url, method, params, capabilities=CAPS)
    message.pop("id", None)
    return message


def test_no_request_of_one_principal_reaches_the_other_principals_tasks_or_state(server: ServerProcess) -> None:
    with as_("alice") as alice, as_("bob") as bob:
        owned = [
            rpc(alice, server, "tools/call", {"name": "confirm_delete", "arguments": {"filename": f"{n}"}})["result"][
                "taskId"
            ]
            for n in range(TASKS)
        ]
        state = rpc(alice, server, "tools/call", {"name": "test_input_required_result_elicitation"})["result"][
            "requestState"
        ]
        attempts = leaks = 0
        for task_id in owned:
            unknown = secrets.token_urlsafe(18)
            for method, params in (
                ("tasks/get", {}),
                ("tasks/update", {"inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}}}),
                ("tasks/cancel", {}),
            ):
                foreign = rpc(bob, server, method, {"taskId": task_id, **params})
                never = rpc(bob, server, method, {"taskId": unknown, **params})
                attempts += 1
                leaks += foreign != never  # anything but the very same answer would tell bob something
        listen_ack = _listen_ack(bob, server, owned[:5])
        attempts += 1
        leaks += listen_ack["taskIds"] != []
        retry = {
            "name": "test_input_required_result_elicitation",
            "requestState": state,
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Mallory"}}},
        }
        replayed = rpc(bob, server, "tools/call", retry)
        attempts += 1
        leaks += replayed.get("error", {}).get("message") != "Invalid or expired requestState"
        # Alice's tasks are untouched: still waiting for her answer.
        statuses = {rpc(alice, server, "tasks/get", {"taskId": task_id})["result"]["status"] for task_id in owned}
    print(f"cross-principal attempts: {attempts}, leaks: {leaks}")
    assert attempts == 3 * TASKS + 2
    assert leaks == 0
    assert statuses <= {"working", "input_required"}


def test_requests_without_a_known_token_are_refused(server: ServerProcess) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {TOKENS['alice']}"}):
        with httpx.Client(timeout=10.0, headers=headers) as client:
            response, message = post(client, server.url, "tools/list", {}, capabilities=CAPS)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert message["error"]["code"] == INVALID_REQUEST


def _listen_ack(client: httpx.Client, server: ServerProcess, task_ids: list[str]) -> dict[str, Any]:
    headers, body = modern_request("subscriptions/listen", {"notifications": {"taskIds": task_ids}}, capabilities=CAPS)
    with client.stream("POST", server.url, headers=headers, json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                message: dict[str, Any] = json.loads(line[5:])
                notifications: dict[str, Any] = message["params"]["notifications"]
                return notifications
    raise AssertionError("no acknowledgement")


def test_a_legacy_session_of_another_principal_is_not_found(server: ServerProcess, tmp_path: Path) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
    with as_("alice") as alice, as_("bob") as bob:
        session = alice.post(server.url, json=body, headers={"Accept": "application/json, text/event-stream"})
        session_id = session.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}
        legacy_headers = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        assert alice.post(server.url, json=ping, headers=legacy_headers).status_code == 200
        hijack = bob.post(server.url, json=ping, headers=legacy_headers)
        unknown = bob.post(server.url, json=ping, headers={**legacy_headers, "Mcp-Session-Id": "no-such-session"})
    assert hijack.status_code == unknown.status_code == 404
    assert hijack.json() == unknown.json()
