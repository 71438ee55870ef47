"""Resharding under load: slots move between the primaries of a Valkey Cluster while tasks are created,
run, asked for input, answered, cancelled and polled through three instances behind nginx.

The moves cover the slots of six of the sixteen run-queue partitions (records, streams with their
consumer groups, idempotency keys and the tasks' sharded channels all move with them), away and back
again: with Valkey 9's atomic slot migration, and once the classic way (``SETSLOT``/``MIGRATE``, a few
keys at a time), during which commands meet ``ASK`` and scripts whose keys are split meet
``TRYAGAIN``. What clients may see is what the history rules allow (``tests.support.history``): no
acknowledged task lost, terminal is final, attempts bounded, and, beyond that, no error at all: a
redirected command is retried inside the store client.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_balancer import TERMINAL, TaskApi, checked_api
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.valkey_cluster import ValkeyCluster

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.task_tools"
CLIENTS = 6
#: The slot ranges moved: partitions 0-2 (slots 0-3071) and 6-8 (6144-9215), each to another primary
#: and back with atomic slot migration; then partition 0's sixteenth (0-1023) the classic way, keys
#: migrated a few at a time, so clients meet ASK and TRYAGAIN while it happens.
MOVES = ((0, 3071, "atomic"), (6144, 9215, "atomic"), (0, 1023, "classic"))
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture
def api() -> Iterator[TaskApi]:
    with checked_api() as api:
        yield api


@pytest.fixture
def fleet(tmp_path: Path, valkey_cluster: ValkeyCluster) -> Iterator[Cluster]:
    env = {"EXT_TASKS_LEASE_S": "2", "EXT_TASKS_SHUTDOWN_GRACE_S": "1"}
    with running_cluster(tmp_path, tools=TOOLS, env=env, valkey_url=valkey_cluster.url) as cluster:
        yield cluster


class Load:
    """``CLIENTS`` threads, each creating a task through nginx and polling it to the end, again and again:
    mostly short sleeps, every fourth one asks for input (answered through the balancer), every
    seventh is cancelled while it runs."""

    def __init__(self, cluster: Cluster, api: TaskApi) -> None:
        self.cluster = cluster
        self.api = api
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.outcomes: Counter[str] = Counter()
        self.task_ids: list[str] = []
        self._lock = threading.Lock()

    def finished(self) -> int:
        with self._lock:
            return sum(self.outcomes.values())

    def wait_for_more(self, count: int) -> None:
        """Until ``count`` more tasks finished (the load goes on through whatever just happened)."""
        target = self.finished() + count
        wait_for(lambda: self.finished() >= target, 30, message=lambda: f"{count} more finished: {self.errors[:3]}")

    def client(self, index: int) -> None:
        round_ = 0
        while not self.stop.is_set():
            round_ += 1
            try:
                self.one_task(index, round_)
            except (AssertionError, httpx.HTTPError, TimeoutError) as exc:
                with self._lock:
                    self.errors.append(f"client {index} round {round_}: {type(exc).__name__}: {exc}")

    def one_task(self, index: int, round_: int) -> None:
        url = self.cluster.url
        asks = (index + round_) % 4 == 0
        cancels = not asks and (index + round_) % 7 == 0
        if asks:
            task_id = self.api.create(url, "ask_then_finish", {"label": f"c{index}r{round_}"})["taskId"]
        else:
            task_id = self.api.create(url, "sleepy", {"seconds": 5.0 if cancels else 0.2})["taskId"]
        with self._lock:
            self.task_ids.append(task_id)
        if cancels:
            message = self.api.message(url, "tasks/cancel", {"taskId": task_id})
            assert "result" in message, message
        answered = False
        deadline = time.monotonic() + 30
        while True:
            task = self.api.get(url, task_id)
            if task["status"] in TERMINAL:
                break
            if task["status"] == "input_required" and not answered:
                self.api.update(url, task_id, {"name": {"action": "accept", "content": {"name": "Ada"}}})
                answered = True
            assert time.monotonic() < deadline, f"{task_id} still {task['status']} after 30 s"
            time.sleep(0.05)
        expected = "cancelled" if cancels else "completed"
        assert task["status"] == expected, task
        with self._lock:
            self.outcomes[task["status"]] += 1


def test_moving_slots_between_primaries_under_load_loses_nothing(
    fleet: Cluster, valkey_cluster: ValkeyCluster, api: TaskApi
) -> None:
    load = Load(fleet, api)
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        clients = [pool.submit(load.client, index) for index in range(CLIENTS)]
        try:
            load.wait_for_more(20)
            moved: list[str] = []
            for lo, hi, how in MOVES:
                home = valkey_cluster.owner_of(lo)
                away = next(node for node in valkey_cluster.primaries if node is not home)
                for target in (away, home):  # away, then back: the layout ends as it began
                    started = time.monotonic()
                    if how == "atomic":
                        valkey_cluster.move_slots(lo, hi, target)
                        keys = ""
                    else:
                        keys = f", {valkey_cluster.move_slots_classic(lo, hi, target)} keys"
                    moved.append(f"{how} {lo}-{hi} -> :{target.port} in {time.monotonic() - started:.2f}s{keys}")
                    load.wait_for_more(10)
        finally:
            load.stop.set()
            for future in clients:
                future.result(timeout=60)

    created = list(load.task_ids)
    print(f"\nslot moves: {moved}; {len(created)} tasks, outcomes {dict(load.outcomes)}; {api.history.summary()}")
    assert load.errors == [], load.errors[:5]

    # Every acknowledged task is still there and finished, on every instance.
    final: dict[str, dict[str, Any]] = {}
    for index, task_id in enumerate(created):
        final[task_id] = api.get(fleet.servers[index % 3].url, task_id)
    unfinished = {task_id: task["status"] for task_id, task in final.items() if task["status"] not in TERMINAL}
    assert unfinished == {}, unfinished
    assert sum(load.outcomes.values()) == len(created)
    assert load.outcomes["completed"] > 0 and load.outcomes["cancelled"] > 0, load.outcomes
    # The moved partitions really carried tasks.
    assert any(task_id.split(".")[0] in {"bd", "ai", "b9", "b8", "a1", "bb"} for task_id in created)
