"""Retry-safe task creation across a fleet: three servers on one Valkey behind nginx round-robin.

Several clients resend the same call with the same idempotency key at the same time; whichever
instances the resends reach, exactly one run starts and every caller is told the same task id.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import INVALID_PARAMS
from tests.e2e.conftest import STORES, store_url_for
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.mcp_http import post

pytestmark = pytest.mark.e2e

TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
TOKENS = {"alice": "token-alice-1", "bob": "token-bob-1"}
CLIENTS = 6
RESENDS_PER_CLIENT = 5


@pytest.fixture(scope="module", params=STORES)
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tokens = ",".join(f"{token}={principal}" for principal, token in TOKENS.items())
    directory = tmp_path_factory.mktemp(f"idempotency-{request.param}")
    env = {"EXT_TASKS_TOKENS": tokens}
    url = store_url_for(request, request.param)
    with running_cluster(directory, tools="tests.e2e.idempotency_tools", env=env, valkey_url=url) as cluster:
        yield cluster


def send(url: str, principal: str, arguments: dict[str, Any], key: str) -> dict[str, Any]:
    with httpx.Client(timeout=15.0, headers={"Authorization": f"Bearer {TOKENS[principal]}"}) as client:
        _, message = post(
            client,
            url,
            "tools/call",
            {"name": "record_run", "arguments": arguments},
            capabilities=TASKS,
            extra_meta={"dev.ext-tasks/idempotencyKey": key},
        )
    return message


def runs_in(log_path: Path) -> list[str]:
    return log_path.read_text().splitlines() if log_path.exists() else []


def test_concurrent_resends_through_the_balancer_start_exactly_one_run(fleet: Cluster, tmp_path: Path) -> None:
    log_path = tmp_path / "runs.log"
    arguments = {"log_path": str(log_path), "label": "deploy-42"}
    start = threading.Barrier(CLIENTS)

    def client(_: int) -> list[str]:
        start.wait(timeout=10)  # every client resends at the same moment
        ids = []
        for _ in range(RESENDS_PER_CLIENT):
            reply = send(fleet.url, "alice", arguments, "deploy-42-attempt-1")
            assert reply["result"]["resultType"] == "task", reply
            ids.append(reply["result"]["taskId"])
        return ids

    with ThreadPoolExecutor(CLIENTS) as pool:
        answered = [task_id for ids in pool.map(client, range(CLIENTS)) for task_id in ids]
    task_ids = set(answered)
    assert len(answered) == CLIENTS * RESENDS_PER_CLIENT
    assert len(task_ids) == 1, task_ids
    (task_id,) = task_ids

    def finished() -> bool:
        return bool(send_get(fleet, task_id)["result"]["status"] == "completed")

    wait_for(finished, 20, message="the task to complete")
    runs = runs_in(log_path)
    served_by = fleet.balancer.upstreams_used()
    print(
        f"{len(answered)} resends from {CLIENTS} clients -> {len(task_ids)} task id, {len(runs)} run(s) started; "
        f"requests per upstream so far: {dict(served_by)}"
    )
    assert len(served_by) == len(fleet.servers), "the resends must have reached every instance"
    assert [line.split()[0] for line in runs] == [task_id]


def send_get(fleet: Cluster, task_id: str) -> dict[str, Any]:
    with httpx.Client(timeout=10.0, headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as client:
        _, message = post(client, fleet.url, "tasks/get", {"taskId": task_id}, capabilities=TASKS)
    return message


def test_the_same_key_with_other_arguments_is_refused_on_any_instance(fleet: Cluster, tmp_path: Path) -> None:
    first = {"log_path": str(tmp_path / "a.log"), "label": "a"}
    assert "result" in send(fleet.url, "alice", first, "shared-key-7")
    for _ in range(3):  # round robin: the refusal comes from every instance alike
        refused = send(fleet.url, "alice", {**first, "label": "b"}, "shared-key-7")
        assert refused["error"]["code"] == INVALID_PARAMS
        assert "different tool or different arguments" in refused["error"]["message"]


def test_another_principal_with_the_same_key_gets_its_own_task(fleet: Cluster, tmp_path: Path) -> None:
    arguments = {"log_path": str(tmp_path / "p.log"), "label": "p"}
    alices = send(fleet.url, "alice", arguments, "common-key")["result"]["taskId"]
    bobs = send(fleet.url, "bob", arguments, "common-key")["result"]["taskId"]
    assert alices != bobs
    assert send(fleet.url, "bob", arguments, "common-key")["result"]["taskId"] == bobs
