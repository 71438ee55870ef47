"""One principal's costly requests do not take another's CPU (``ext_tasks.pacing``), against a real
server process on a real Valkey, with its default budget.

Principal A floods ``subscriptions/listen`` naming 1,000 task ids from 100 connections, sending again
as soon as an answer comes (ignoring ``Retry-After``); principal B polls ``tasks/get``. Without the
budget B's median went from ~6 ms to ~177 ms (memory) and B got 503s on Valkey (A's id checks held the
connection pool); with it, A is refused with 429 and B's median stays within 3x of B's median alone.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx
import pytest

from ext_tasks.protocol.resume import generate_key
from tests.support.mcp_http import modern_request, parse_reply
from tests.support.processes import running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TASKS: dict[str, object] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
FLOODERS = 100
LISTEN_IDS = 1000
SAMPLES = 100


def request(method: str, params: dict[str, object], token: str) -> tuple[dict[str, str], bytes]:
    headers, body = modern_request(method, params, capabilities=TASKS)
    return {**headers, "Authorization": f"Bearer {token}"}, json.dumps(body).encode()


async def poll_median(client: httpx.AsyncClient, url: str, task_id: str) -> float:
    """B's tasks/get median over ``SAMPLES`` polls, 10 ms apart; every one must succeed."""
    headers, body = request("tasks/get", {"taskId": task_id}, "tb")
    seconds = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        response = await client.post(url, headers=headers, content=body)
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        await asyncio.sleep(0.01)
    return statistics.median(seconds)


class Answers:
    """What A got back: HTTP statuses, ``Retry-After`` values, and an event once every connection got one."""

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.retry_after: set[str] = set()
        self.all_flooding = asyncio.Event()

    def count(self, response: httpx.Response) -> None:
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        if response.status_code == 429:
            self.retry_after.add(response.headers.get("retry-after", ""))
        if sum(self.statuses.values()) >= FLOODERS:
            self.all_flooding.set()


async def flood(url: str, stop: asyncio.Event, answers: Answers) -> None:
    """A's connection: listens of 1,000 ids, each sent as soon as the last was answered."""
    ids = [f"bd.{index:024d}" for index in range(LISTEN_IDS)]
    headers, body = request("subscriptions/listen", {"notifications": {"taskIds": ids}}, "ta")
    async with httpx.AsyncClient(timeout=30) as client:
        while not stop.is_set():
            async with client.stream("POST", url, headers=headers, content=body) as response:
                answers.count(response)
                if response.status_code != 200:
                    await response.aread()
                else:
                    async for _ in response.aiter_lines():
                        break  # the acknowledgement came: A closes and asks again


async def b_while_a_floods(url: str) -> tuple[float, float, Answers]:
    async with httpx.AsyncClient(timeout=30) as client:
        headers, body = request("tools/call", {"name": "sleepy", "arguments": {"seconds": 0}}, "tb")
        created = parse_reply(await client.post(url, headers=headers, content=body))
        task_id = created["result"]["taskId"]
        alone = await poll_median(client, url, task_id)
        stop = asyncio.Event()
        answers = Answers()
        flooders = [asyncio.create_task(flood(url, stop, answers)) for _ in range(FLOODERS)]
        try:
            async with asyncio.timeout(60):
                await answers.all_flooding.wait()
            during = await poll_median(client, url, task_id)
        finally:
            stop.set()
            async with asyncio.timeout(30):
                await asyncio.gather(*flooders)
        return alone, during, answers


def test_a_principal_flooding_costly_listens_leaves_another_principals_polls_alone(tmp_path: Path) -> None:
    with running_valkey(tmp_path / "valkey") as valkey:
        env = {
            "EXT_TASKS_VALKEY_URL": valkey.url,
            "EXT_TASKS_STATE_KEYS": generate_key(),
            "EXT_TASKS_TOKENS": "ta=alice,tb=bob",
        }
        with running_server(tmp_path, tools="tests.e2e.task_tools", env=env) as server:
            alone, during, answers = asyncio.run(b_while_a_floods(server.url))

    statuses = answers.statuses
    refused = statuses.get(429, 0)
    assert refused > FLOODERS, statuses  # A was refused, again and again
    assert set(statuses) <= {200, 429}, statuses
    assert answers.retry_after and all(value.isdigit() and int(value) >= 1 for value in answers.retry_after)
    # The default budget (1,000 units a second, 5,000 saved up) lets about one 1,000-id listen a second
    # through after the first five: A's successes are a small share of its attempts.
    assert statuses.get(200, 0) < refused / 5, statuses
    assert during <= 3 * alone, (
        f"B's tasks/get median {during * 1000:.1f} ms while A floods, {alone * 1000:.1f} ms alone"
    )
