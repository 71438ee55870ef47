"""The README's walkthrough, for real: the demo server (``ext-tasks serve`` without ``--tools``) on a
real Valkey, driven over HTTP: a deploy with an idempotency key, a resend after a "dropped
connection", confirmation through ``input_required``, progress in ``statusMessage``; a sensitive
``migrate`` whose record is gone a grace period after its result was read; a non-sensitive task that
stays readable for its whole ``ttlMs``, counted from its end once it has ended."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_PARAMS
from ext_tasks.protocol.resume import generate_key
from tests.support.cluster import wait_for as poll_until
from tests.support.mcp_http import post
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TASKS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
TTL_MS = 6_000
GRACE_MS = 1_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("demo")
    with running_valkey(directory / "valkey") as valkey:
        env = {
            "EXT_TASKS_VALKEY_URL": valkey.url,
            "EXT_TASKS_STATE_KEYS": generate_key(),
            "EXT_TASKS_TASK_TTL_MS": str(TTL_MS),
            "EXT_TASKS_SENSITIVE_GRACE_MS": str(GRACE_MS),
        }
        # No --tools: the demo release desk is the default.
        with running_server(directory, tools="ext_tasks.examples.demo", env=env) as server:
            yield server


def call(client: httpx.Client, server: ServerProcess, method: str, params: dict[str, Any], **options: Any) -> Any:
    _, message = post(client, server.url, method, params, capabilities=TASKS, **options)
    return message


def wait_for(check: Callable[[], Any], timeout_s: float = 15.0) -> Any:
    return poll_until(check, timeout_s)


def get(client: httpx.Client, server: ServerProcess, task_id: str) -> dict[str, Any]:
    return call(client, server, "tasks/get", {"taskId": task_id})  # type: ignore[no-any-return]


def test_a_resent_deploy_is_the_same_task_and_deploys_once(demo: ServerProcess) -> None:
    deploy = {"name": "deploy", "arguments": {"service": "billing", "ref": "v1.2", "environment": "production"}}
    key = {"dev.ext-tasks/idempotencyKey": f"deploy-billing-{time.time_ns()}"}
    with httpx.Client(timeout=10.0) as client:
        first = call(client, demo, "tools/call", deploy, extra_meta=key)["result"]
        # The connection "dropped": resend the very same request, with the same key.
        resent = call(client, demo, "tools/call", deploy, extra_meta=key)["result"]
        assert resent["resultType"] == "task"
        assert resent["taskId"] == first["taskId"]
        task_id = first["taskId"]

        waiting = wait_for(lambda: (t := get(client, demo, task_id)["result"])["status"] == "input_required" and t)
        assert list(waiting["inputRequests"]) == ["confirm"]
        ack = call(
            client,
            demo,
            "tasks/update",
            {"taskId": task_id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}}},
        )
        assert ack["result"]["resultType"] == "complete"

        progress = wait_for(lambda: "rolling out" in (get(client, demo, task_id)["result"].get("statusMessage") or ""))
        assert progress
        done = wait_for(lambda: (t := get(client, demo, task_id)["result"])["status"] == "completed" and t)
        text = done["result"]["content"][0]["text"]
        assert text.startswith("Deployed billing@v1.2 to production as billing-v1.2-#")
        # A resend after completion still names the same task, now completed; nothing new starts.
        late = call(client, demo, "tools/call", deploy, extra_meta=key)["result"]
        assert (late["taskId"], late["status"]) == (task_id, "completed")


def test_the_same_key_for_another_deploy_is_refused(demo: ServerProcess) -> None:
    key = {"dev.ext-tasks/idempotencyKey": f"k-{time.time_ns()}"}
    with httpx.Client(timeout=10.0) as client:
        call(client, demo, "tools/call", {"name": "deploy", "arguments": {"service": "a", "ref": "1"}}, extra_meta=key)
        refused = call(
            client, demo, "tools/call", {"name": "deploy", "arguments": {"service": "b", "ref": "1"}}, extra_meta=key
        )
    assert refused["error"]["code"] == INVALID_PARAMS
    assert "different tool or different arguments" in refused["error"]["message"]


def test_a_sensitive_result_is_gone_a_grace_period_after_it_was_read(demo: ServerProcess) -> None:
    with httpx.Client(timeout=10.0) as client:
        task_id = call(client, demo, "tools/call", {"name": "migrate", "arguments": {"database": "orders"}})["result"][
            "taskId"
        ]
        done = wait_for(lambda: (t := get(client, demo, task_id)["result"])["status"] == "completed" and t)
        read_at = time.monotonic()
        assert done["result"]["structuredContent"]["rowsTouched"] == 1840
        assert done["ttlMs"] < TTL_MS  # already the truth in the response that delivered the result

        def expired() -> bool:
            reply = get(client, demo, task_id)
            return "error" in reply and reply["error"]["message"].endswith("Task has expired")

        wait_for(expired, timeout_s=GRACE_MS / 1000 + 1.5)
        assert time.monotonic() - read_at >= GRACE_MS / 1000 - 0.1


def test_a_non_sensitive_task_stays_readable_for_its_whole_ttl(demo: ServerProcess) -> None:
    with httpx.Client(timeout=10.0) as client:
        created = call(client, demo, "tools/call", {"name": "deploy", "arguments": {"service": "s", "ref": "r"}})
        task_id = created["result"]["taskId"]
        assert created["result"]["ttlMs"] == TTL_MS
        done = wait_for(lambda: (t := get(client, demo, task_id)["result"])["status"] == "completed" and t)
        ended_at = datetime.fromisoformat(done["lastUpdatedAt"].replace("Z", "+00:00")).timestamp()
        # Kept its lifetime from its end (the default completed retention): the same in every read.
        kept_ms = done["ttlMs"]
        created_at = datetime.fromisoformat(done["createdAt"].replace("Z", "+00:00")).timestamp()
        assert round((created_at + kept_ms / 1000 - ended_at) * 1000) == TTL_MS
        last_readable = ended_at
        while "result" in (reply := get(client, demo, task_id)):
            assert reply["result"]["ttlMs"] == kept_ms  # reading it never shortens a normal task
            last_readable = time.time()
            assert last_readable - ended_at < TTL_MS / 1000 + 2, "the task outlived its ttl"
            time.sleep(0.1)
        assert reply["error"]["message"].endswith("Task has expired")
        assert last_readable - ended_at >= TTL_MS / 1000 - 0.5


