"""What both soaks share: the pair of instances on one Valkey, the well-behaved mixed load and its
memory bound.

The load (:class:`Load`) runs ``CONCURRENCY`` clients, each cycling through MRTR round trips, tasks
polled to completion, tasks answered through ``tasks/update`` and tasks cancelled, alternating between
the instances; anything but the answer the load asked for is recorded in ``Load.unexpected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from ext_tasks.protocol.resume import generate_key
from tests.support.mcp_http import modern_request, parse_reply
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import ValkeyServer, running_valkey

CONCURRENCY = 16
RSS_GROWTH_LIMIT_MIB = 64
RSS_LIMIT_MIB = 400
TOOLS = "ext_tasks.examples.conformance"
CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


def warmup_s(seconds: float) -> float:
    return min(5.0, seconds / 6)


@contextlib.contextmanager
def running_pair(
    directory: Path, env: Mapping[str, str] | None = None, *, tools: str = TOOLS
) -> Iterator[tuple[ValkeyServer, list[ServerProcess]]]:
    """One valkey-server and two ``ext-tasks serve`` of ``tools`` sharing it and one key; ``env`` adds
    settings."""
    with running_valkey(directory / "valkey") as valkey:
        shared = {
            "EXT_TASKS_VALKEY_URL": valkey.url,
            "EXT_TASKS_STATE_KEYS": generate_key(),
            "EXT_TASKS_LOG_LEVEL": "warning",
            "EXT_TASKS_TASK_TTL_MS": "60000",
            **(env or {}),
        }
        with (
            running_server(directory, tools=tools, env=shared) as first,
            running_server(directory, tools=tools, env=shared) as second,
        ):
            yield valkey, [first, second]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def rss_problems(start: Mapping[int, float], end: Mapping[int, float]) -> list[str]:
    """What breaks the documented memory bound, per server pid (empty when within it)."""
    problems = []
    for pid, before in start.items():
        if end[pid] - before > RSS_GROWTH_LIMIT_MIB:
            problems.append(f"pid {pid} grew {end[pid] - before:.1f} MiB (limit {RSS_GROWTH_LIMIT_MIB})")
        if end[pid] > RSS_LIMIT_MIB:
            problems.append(f"pid {pid} at {end[pid]:.1f} MiB (limit {RSS_LIMIT_MIB})")
    return problems


class Load:
    def __init__(self, servers: list[ServerProcess], headers: Mapping[str, str] | None = None) -> None:
        """``headers``: sent with every request (``Authorization``, when the servers require a token)."""
        self.urls = itertools.cycle([server.url for server in servers])
        self.headers = dict(headers or {})
        self.done: Counter[str] = Counter()
        self.unexpected: list[str] = []

    async def send(self, client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
        headers, body = modern_request(method, params, capabilities=CAPS)
        try:
            response = await client.post(next(self.urls), headers={**headers, **self.headers}, json=body)
        except httpx.HTTPError as exc:
            self.unexpected.append(f"{method}: {type(exc).__name__}: {exc}")
            return {}
        try:
            message = parse_reply(response)
        except (ValueError, AssertionError):
            self.unexpected.append(f"{method}: HTTP {response.status_code} {response.text[:300]!r}")
            return {}
        if "error" in message:
            self.unexpected.append(f"{method}: HTTP {response.status_code} {message['error']}")
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
