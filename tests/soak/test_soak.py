"""Soak: a mixed load (MRTR round trips, tasks polled to completion, tasks answered through
``tasks/update``, tasks cancelled) against two instances sharing one Valkey.

It passes when every operation ends the way the load asked (no other error response), and the
resident memory of each server process stays within the documented bound: at most
``RSS_GROWTH_LIMIT_MIB`` above what it was after warm-up, and under ``RSS_LIMIT_MIB`` overall.

CI runs it for 30 s (the default). On demand: ``EXT_TASKS_SOAK_SECONDS=600 bash scripts/soak.sh``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.resume import generate_key
from tests.support.mcp_http import modern_request, parse_reply
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("EXT_TASKS_SOAK_SECONDS", "30"))
CONCURRENCY = 16
WARMUP_S = min(5.0, SECONDS / 6)
RSS_GROWTH_LIMIT_MIB = 64
RSS_LIMIT_MIB = 400
CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    directory = tmp_path_factory.mktemp("soak")
    with running_valkey(directory / "valkey") as valkey:
        env = {
            "EXT_TASKS_VALKEY_URL": valkey.url,
            "EXT_TASKS_STATE_KEYS": generate_key(),
            "EXT_TASKS_LOG_LEVEL": "warning",
            "EXT_TASKS_TASK_TTL_MS": "60000",
        }
        with (
            running_server(directory, tools="ext_tasks.examples.conformance", env=env) as first,
            running_server(directory, tools="ext_tasks.examples.conformance", env=env) as second,
        ):
            yield [first, second]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Load:
    def __init__(self, servers: list[ServerProcess]) -> None:
        self.urls = itertools.cycle([server.url for server in servers])
        self.done: Counter[str] = Counter()
        self.unexpected: list[str] = []

    async def send(self, client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
        headers, body = modern_request(method, params, capabilities=CAPS)
        response = await client.post(next(self.urls), headers=headers, json=body)
        message = parse_reply(response)
        if "error" in message:
            self.unexpected.append(f"{method}: {message['error']}")
            return {}
        result: dict[str, Any] = message["result"]
        return result

    async def mrtr(self, client: httpx.AsyncClient) -> None:
        first = await self.send(client, "tools/call", {"name": "test_input_required_result_elicitation"})
        answer = {"user_name": {"action": "accept", "content": {"name": "Soak"}}}
        params = {"name": "test_input_required_result_elicitation", "inputResponses": answer}
        final = await self.send(client, "tools/call", {**params, "requestState": first.get("requestState")})
        self.expect(final.get("content", [{}])[0].get("text") == "Hello, Soak!", "mrtr", final)

    async def task(self, client: httpx.AsyncClient) -> None:
        created = await self.send(client, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2}})
        final = await self.poll(client, created.get("taskId"), {"completed"})
        self.expect(final.get("status") == "completed", "task", final)

    async def answered(self, client: httpx.AsyncClient) -> None:
        created = await self.send(client, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "f"}})
        waiting = await self.poll(client, created.get("taskId"), {"input_required"})
        answer = {key: {"action": "accept", "content": {"confirm": True}} for key in waiting.get("inputRequests", {})}
        await self.send(client, "tasks/update", {"taskId": created.get("taskId"), "inputResponses": answer})
        final = await self.poll(client, created.get("taskId"), {"completed"})
        self.expect(final.get("result", {}).get("content", [{}])[0].get("text") == "Deleted f.", "answered", final)

    async def cancelled(self, client: httpx.AsyncClient) -> None:
        created = await self.send(client, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}})
        await self.send(client, "tasks/cancel", {"taskId": created.get("taskId")})
        final = await self.poll(client, created.get("taskId"), {"cancelled"})
        self.expect(final.get("status") == "cancelled", "cancelled", final)

    async def poll(self, client: httpx.AsyncClient, task_id: object, wanted: set[str]) -> dict[str, Any]:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            task = await self.send(client, "tasks/get", {"taskId": task_id})
            if task.get("status") in wanted or not task:
                return task
            await asyncio.sleep(0.05)
        return {"status": "timed out"}

    def expect(self, ok: bool, kind: str, detail: object) -> None:
        if ok:
            self.done[kind] += 1
        else:
            self.unexpected.append(f"{kind}: {str(detail)[:300]}")

    async def run(self, seconds: float) -> None:
        kinds = [self.mrtr, self.mrtr, self.mrtr, self.task, self.task, self.answered, self.cancelled]
        deadline = time.monotonic() + seconds

        async def worker(offset: int) -> None:
            async with httpx.AsyncClient(timeout=30.0) as client:
                for step in itertools.count(offset):
                    if time.monotonic() >= deadline:
                        return
                    await kinds[step % len(kinds)](client)

        await asyncio.gather(*(worker(index) for index in range(CONCURRENCY)))


def test_mixed_load_on_two_instances_keeps_memory_bounded_and_answers_as_asked(pair: list[ServerProcess]) -> None:
    load = Load(pair)
    asyncio.run(load.run(WARMUP_S))
    start = {server.process.pid: rss_mib(server.process.pid) for server in pair}
    asyncio.run(load.run(SECONDS - WARMUP_S))
    end = {server.process.pid: rss_mib(server.process.pid) for server in pair}
    report = {pid: f"{start[pid]:.1f} -> {end[pid]:.1f} MiB" for pid in start}
    summary = f"soak {SECONDS:.0f}s, {CONCURRENCY} clients: {dict(load.done)}"
    print(f"{summary}; RSS {report}; unexpected {len(load.unexpected)}")
    assert load.unexpected == []
    assert sum(load.done.values()) > 0
    for pid in start:
        assert end[pid] - start[pid] <= RSS_GROWTH_LIMIT_MIB, report
        assert end[pid] <= RSS_LIMIT_MIB, report
