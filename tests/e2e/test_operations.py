"""What an operator needs beyond correctness: task notifications across instances, metrics, health,
and logs that never carry secrets."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from ext_tasks.protocol.resume import generate_key
from tests.e2e.conftest import STORES, store_url_for
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.mcp_http import modern_request, post
from tests.support.processes import ServerProcess, free_port, running_server
from tests.support.valkey import running_valkey, start_valkey

pytestmark = pytest.mark.e2e

TASKS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
TOOLS = "tests.e2e.ops_tools"


class Listener:
    """A ``subscriptions/listen`` stream read in a thread; messages arrive on ``messages``."""

    def __init__(self, url: str, params: dict[str, Any]) -> None:
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        headers, body = modern_request("subscriptions/listen", params, capabilities=TASKS)
        self._thread = threading.Thread(target=self._read, args=(url, headers, body), daemon=True)
        self._thread.start()

    def _read(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10.0, read=30.0)) as client,
                client.stream("POST", url, headers=headers, json=body) as response,
            ):
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("data:"):
                        self.messages.put(json.loads(line[5:]))
        except httpx.TransportError:
            if not self._stop.is_set():
                raise  # the stream broke while the test still listened

    def next(self, timeout_s: float = 10.0) -> dict[str, Any]:
        return self.messages.get(timeout=timeout_s)

    def close(self) -> None:
        self._stop.set()


def call(server_url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    with httpx.Client(timeout=10.0) as client:
        _, message = post(client, server_url, method, params, capabilities=TASKS)
    return message


@pytest.fixture(scope="module", params=STORES)
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp(f"ops-{request.param}")
    with running_cluster(directory, tools=TOOLS, valkey_url=store_url_for(request, request.param)) as cluster:
        yield cluster


def test_a_listener_on_one_instance_gets_every_transition_of_a_task_run_and_answered_elsewhere(
    fleet: Cluster,
) -> None:
    a, b, c = (server.url for server in fleet.servers)
    task_id = call(b, "tools/call", {"name": "two_questions", "arguments": {}})["result"]["taskId"]
    waiting = wait_for(
        lambda: (t := call(c, "tasks/get", {"taskId": task_id})["result"])["status"] == "input_required" and t,
        15,
        message="the first question",
    )
    listener = Listener(a, {"notifications": {"taskIds": [task_id, "not-a-task-of-mine"]}})
    try:
        ack = listener.next()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        assert ack["params"]["notifications"]["taskIds"] == [task_id]  # only the caller's own tasks

        seen: list[dict[str, Any]] = []

        def collect_until(status: str) -> None:
            while True:
                message = listener.next()
                assert message["method"] == "notifications/tasks"
                assert message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == subscription
                seen.append(message["params"])
                if message["params"]["status"] == status:
                    return

        answer = {"action": "accept", "content": {"text": "one"}}
        call(c, "tasks/update", {"taskId": task_id, "inputResponses": {"first": answer}})
        collect_until("input_required")
        answer = {"action": "accept", "content": {"text": "two"}}
        call(c, "tasks/update", {"taskId": task_id, "inputResponses": {"second": answer}})
        collect_until("completed")
    finally:
        listener.close()

    statuses = [notification["status"] for notification in seen]
    print("notification stream on A:", json.dumps([{k: n.get(k) for k in ("status", "statusMessage")} for n in seen]))
    # Every committed change after the subscription, in order: the answer resumes the task, the re-run
    # sets its status message and asks the second question; then the same again, ending completed.
    # (Taking a run writes nothing: the stream counts its attempts.)
    round_trip = ["working", "working"]
    assert statuses == [*round_trip, "input_required", *round_trip, "completed"]
    assert seen[-1]["result"]["content"][0]["text"] == "one then two"
    assert list(seen[2]["inputRequests"]) == ["second"]
    times = [notification["lastUpdatedAt"] for notification in seen]
    assert times == sorted(times)
    assert waiting["status"] == "input_required"


def test_metrics_are_scraped_from_each_instance(fleet: Cluster) -> None:
    a = fleet.servers[0]
    call(a.url, "tools/list", {})
    call(a.url, "no/such/method", {})
    scrape = httpx.get(a.url.replace("/mcp", "/metrics"), timeout=5.0)
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    lines = [line for line in scrape.text.splitlines() if line.startswith("ext_tasks_") and not line.startswith("#")]
    print("metrics scrape of instance A (excerpt):\n" + "\n".join(lines[:40]))
    text = scrape.text
    assert 'ext_tasks_requests_total{method="tools/list",outcome="ok"}' in text
    # Unknown method names share one label.
    assert f'ext_tasks_requests_total{{method="other",outcome="{METHOD_NOT_FOUND}"}}' in text
    assert "ext_tasks_request_seconds_bucket" in text
    assert "ext_tasks_run_queue_depth" in text
    assert "ext_tasks_lease_reclaims_total" in text
    assert "ext_tasks_request_state_rejections_total" in text or "ext_tasks_task_transitions_total" in text


def test_readiness_follows_the_store_and_liveness_does_not(tmp_path: Path) -> None:
    valkey = start_valkey(tmp_path / "valkey")
    env = {"EXT_TASKS_VALKEY_URL": valkey.url, "EXT_TASKS_STATE_KEYS": generate_key()}
    try:
        with running_server(tmp_path, tools=TOOLS, env=env) as server:
            base = server.url.removesuffix("/mcp")
            assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
            valkey.process.terminate()
            valkey.process.wait(timeout=10)
            wait_for(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 503, 10, message="not ready")
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
            valkey = start_valkey(tmp_path / "valkey", port=valkey.port)
            wait_for(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, 15, message="ready again")
    finally:
        valkey.process.kill()
        valkey.process.wait(timeout=10)


def test_no_log_line_carries_a_secret_or_a_request_state(tmp_path: Path) -> None:
    key = generate_key()
    token = "tok-" + generate_key()
    with running_valkey(tmp_path / "valkey") as valkey:
        env = {
            "EXT_TASKS_VALKEY_URL": valkey.url,
            "EXT_TASKS_STATE_KEYS": key,
            "EXT_TASKS_TOKENS": f"{token}=alice",
            "EXT_TASKS_LOG_LEVEL": "debug",
        }
        with running_server(tmp_path, tools=TOOLS, env=env) as server:
            states = exercise(server, token)
            log = server.log_path
    text = log.read_text()
    for secret in (key, token, *states):
        assert secret not in text
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    lifecycle = [event for event in events if event.get("logger") == "ext_tasks.lifecycle"]
    names = {event["event"] for event in lifecycle}
    assert {"task.created", "task.completed", "task.result_retrieved"} <= names
    # Only a sensitive task's first terminal read is an event (and a write); a plain one's reads are not.
    retrieved = {event["tool"] for event in lifecycle if event["event"] == "task.result_retrieved"}
    assert retrieved == {"quick_secret"}
    assert all(event["principal"] != "alice" and len(event["principal"]) == 12 for event in lifecycle)
    assert any(event.get("reason") == "bad signature or unknown key" for event in events)


def exercise(server: ServerProcess, token: str) -> list[str]:
    """An MRTR round, a tampered retry and two tasks (one sensitive), as alice; returns the states the
    server handed out."""
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10.0, headers=auth) as client:
        _, first = post(client, server.url, "tools/call", {"name": "ask_once", "arguments": {}}, capabilities=TASKS)
        state = first["result"]["requestState"]
        tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
        params = {
            "name": "ask_once",
            "arguments": {},
            "inputResponses": {"word": {"action": "accept", "content": {"text": "x"}}},
            "requestState": tampered,
        }
        _, refused = post(client, server.url, "tools/call", params, capabilities=TASKS)
        assert refused["error"]["code"] == INVALID_PARAMS
        for tool in ("quick", "quick_secret"):
            _, created = post(client, server.url, "tools/call", {"name": tool, "arguments": {}}, capabilities=TASKS)
            task_id = created["result"]["taskId"]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                _, got = post(client, server.url, "tasks/get", {"taskId": task_id}, capabilities=TASKS)
                if got["result"]["status"] == "completed":
                    break
                time.sleep(0.05)
    return [state, tampered]


def test_sigterm_ends_listen_streams_with_their_final_result(tmp_path: Path) -> None:
    with running_server(tmp_path, tools=TOOLS) as server:
        listener = Listener(server.url, {"notifications": {"toolsListChanged": True}})
        ack = listener.next()
        subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        started = time.monotonic()
        server.process.terminate()
        final = listener.next()
        assert final["result"]["resultType"] == "complete"
        assert final["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == subscription
        server.process.wait(timeout=15)
        listener.close()
    assert time.monotonic() - started < 5  # not cut at hypercorn's graceful timeout


def test_an_instance_started_before_its_valkey_recovers_by_itself(tmp_path: Path) -> None:
    port = free_port()
    env = {"EXT_TASKS_VALKEY_URL": f"valkey://127.0.0.1:{port}/0", "EXT_TASKS_STATE_KEYS": generate_key()}
    with running_server(tmp_path, tools=TOOLS, env=env) as server:
        base = server.url.removesuffix("/mcp")
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 503
        refused = call(server.url, "tools/call", {"name": "quick", "arguments": {}})
        assert refused["error"]["message"] == "Task store unavailable; retry later"
        valkey = start_valkey(tmp_path / "valkey", port=port)
        try:
            wait_for(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, 15, message="ready")
            task_id = call(server.url, "tools/call", {"name": "quick", "arguments": {}})["result"]["taskId"]
            wait_for(
                lambda: call(server.url, "tasks/get", {"taskId": task_id})["result"]["status"] == "completed",
                15,
                message="the task to run once the store is there",
            )
        finally:
            valkey.process.kill()
            valkey.process.wait(timeout=10)
