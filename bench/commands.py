"""What one task operation costs the store: Valkey commands (``INFO commandstats``, summed over the
primaries, commands run inside scripts included; ``WAIT``, the replica acknowledgement, also counted
apart) and Valkey CPU (``/proc`` schedstat of the valkey-server processes, a replica's included), per
operation, over sequential operations against a running server.

Operations, each repeated ``count`` times one after the other (a client at a time, so nothing else is
counted):

* ``lifecycle``: ``tools/call`` of a task whose body returns at once, then ``tasks/get`` every
  millisecond until it is ``completed`` (the polls are counted and reported with it);
* ``lifecycle_input``: the same with one ``input_required`` answered through ``tasks/update``;
* ``tasks_get``: one ``tasks/get`` of a finished task.

The server's own background traffic (its workers' blocking reads, heartbeats, reclaim) is part of the
count, measured alone for a second first and reported as commands per second. Used by ``python -m
bench`` for every ext-tasks stack on Valkey (once per run, in the first round).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from ext_tasks.loadgen.mcp import CAPABILITIES, CLIENT_INFO, answers_for
from ext_tasks.loadgen.workloads import TERMINAL
from ext_tasks.protocol.versions import MODERN_2026_07_28 as PROTOCOL_VERSION

from .procs import ValkeyStore, admin

#: Commands that are not the server's: our own, and a replica's ``REPLCONF ACK`` (about once a second, and
#: in answer to the ``REPLCONF GETACK`` a ``WAIT`` sends; the replica's CPU stays counted).
_OURS = frozenset({"info", "config|resetstat", "replconf"})
POLL_S = 0.001
POLL_TIMEOUT_S = 10.0


@dataclass
class Cost:
    operations: int
    commands: float
    scripts: float
    #: ``WAIT`` commands (a server asked for replica acknowledgements: one per creation and per commit).
    waits: float
    valkey_cpu_us: float
    requests: float
    top: dict[str, float]


class _Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(timeout=10.0)
        self.ids = itertools.count(1)

    def call(self, method: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
        meta = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
            "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
            "Mcp-Method": method,
            "Mcp-Name": name,
        }
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": {**params, "_meta": meta}}
        reply = self.http.post(self.url, json=body, headers=headers)
        result = reply.json().get("result")
        if reply.status_code != 200 or not isinstance(result, dict):
            raise RuntimeError(f"{method}: HTTP {reply.status_code}: {reply.text[:300]}")
        return result

    def poll(self, task_id: str, wanted: frozenset[str]) -> tuple[dict[str, Any], int]:
        polls = 0
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while time.monotonic() < deadline:
            task = self.call("tasks/get", task_id, {"taskId": task_id})
            polls += 1
            if task.get("status") in wanted:
                return task, polls
            if task.get("status") in TERMINAL:
                raise RuntimeError(f"task ended {task.get('status')}")
            time.sleep(POLL_S)
        raise RuntimeError(f"task {task_id} not {sorted(wanted)} within {POLL_TIMEOUT_S:g} s")


class _Stats:
    """Command counts and CPU of the store's primaries."""

    def __init__(self, store: ValkeyStore) -> None:
        self.store = store
        # The primaries only: a replica counts again every write it is sent.
        self.clients: list[Any] = [admin(node) for node in store.nodes]

    def reset(self) -> float:
        for client in self.clients:
            client.config_resetstat()
        return self.store.cpu()

    def read(self) -> Counter[str]:
        calls: Counter[str] = Counter()
        for client in self.clients:
            for name, stats in client.info("commandstats").items():
                command = name.removeprefix("cmdstat_")
                if command not in _OURS:
                    calls[command] += int(stats["calls"])
        return calls

    def close(self) -> None:
        for client in self.clients:
            client.close()


def _measure(stats: _Stats, count: int, operation: Callable[[], int]) -> Cost:
    cpu0 = stats.reset()
    requests = sum(operation() for _ in range(count))
    calls = stats.read()
    cpu = stats.store.cpu() - cpu0
    scripts = calls["evalsha"] + calls["eval"] + calls["fcall"]
    top = {name: round(n / count, 2) for name, n in calls.most_common(8)}
    waits = calls["wait"] / count
    return Cost(count, sum(calls.values()) / count, scripts / count, waits, 1e6 * cpu / count, requests / count, top)


def measure(url: str, store: ValkeyStore, count: int = 100) -> dict[str, Any]:
    """The cost of each operation against the server at ``url`` (MCP endpoint) on ``store``."""
    client = _Client(url)
    stats = _Stats(store)
    try:
        stats.reset()
        time.sleep(1.0)
        idle_per_s = sum(stats.read().values())

        def lifecycle() -> int:
            created = client.call("tools/call", "instant", {"name": "instant", "arguments": {"label": "count"}})
            _, polls = client.poll(created["taskId"], frozenset({"completed"}))
            return 1 + polls

        def lifecycle_input() -> int:
            created = client.call("tools/call", "ask_in_task", {"name": "ask_in_task", "arguments": {"label": "n"}})
            task_id = created["taskId"]
            waiting, polls = client.poll(task_id, frozenset({"input_required"}))
            answers = answers_for(waiting["inputRequests"])
            client.call("tasks/update", task_id, {"taskId": task_id, "inputResponses": answers})
            _, more = client.poll(task_id, frozenset({"completed"}))
            return 2 + polls + more

        finished = client.call("tools/call", "instant", {"name": "instant", "arguments": {"label": "read"}})["taskId"]
        client.poll(finished, frozenset({"completed"}))

        def tasks_get() -> int:
            client.call("tasks/get", finished, {"taskId": finished})
            return 1

        costs = {
            "lifecycle": _measure(stats, count, lifecycle),
            "lifecycle_input": _measure(stats, count, lifecycle_input),
            "tasks_get": _measure(stats, count, tasks_get),
        }
        return {"idle_commands_per_s": idle_per_s, **{name: asdict(cost) for name, cost in costs.items()}}
    finally:
        stats.close()
        client.http.close()
