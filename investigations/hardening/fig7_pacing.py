"""Figure 7: one principal's costly requests against another's polls (issue 24, item 6).

    python -m investigations.hardening fig7 [--store valkey|memory] [--flooders 100] [--ids 1000] [--samples 100]
                                   [--before REV|DIR] [--after REV|DIR]

One server (``EXT_TASKS_TOKENS`` with two principals, on its own valkey-server or in memory). Principal B
creates one task and polls it with ``tasks/get`` ``--samples`` times, 10 ms apart: B's median alone.
Then principal A opens ``subscriptions/listen`` naming ``--ids`` task ids from ``--flooders``
connections, each sent again as soon as it is answered (an acknowledgement read, or any refusal:
``Retry-After`` is ignored, as an attacker would), and B polls again: B's median while A floods, B's
answers other than 200, and what A got (HTTP statuses). Every wait is bounded; processes are stopped by
PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from .figlib import Checkout, check_shadowing, modern_request, parser, run_figure, running_server, say
from .figlib import running_valkey as valkey_process

#: The last commit before costly requests were paced (the default ``--before`` of this figure).
BEFORE = "217690e"
TIMEOUT_S = 60.0


def request(method: str, params: dict[str, Any], token: str) -> tuple[dict[str, str], bytes]:
    headers, body = modern_request(method, params)
    return {**headers, "Authorization": f"Bearer {token}"}, json.dumps(body).encode()


async def polls(client: httpx.AsyncClient, url: str, task_id: str, samples: int) -> tuple[float, Counter[int]]:
    """B's tasks/get median (seconds) over ``samples`` polls 10 ms apart, and the statuses answered."""
    headers, body = request("tasks/get", {"taskId": task_id}, "tb")
    seconds: list[float] = []
    statuses: Counter[int] = Counter()
    for _ in range(samples):
        started = time.perf_counter()
        response = await client.post(url, headers=headers, content=body)
        seconds.append(time.perf_counter() - started)
        statuses[response.status_code] += 1
        await asyncio.sleep(0.01)
    return statistics.median(seconds), statuses


async def flood(
    url: str, args: argparse.Namespace, stop: asyncio.Event, got: Counter[str], all_in: asyncio.Event
) -> None:
    """A's connection; ``all_in`` is set once every connection has been answered once."""
    ids = args.ids
    listen = {"notifications": {"taskIds": [f"bd.{index:024d}" for index in range(ids)]}}
    headers, body = request("subscriptions/listen", listen, "ta")
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        while not stop.is_set():
            try:
                async with client.stream("POST", url, headers=headers, content=body) as response:
                    got[str(response.status_code)] += 1
                    if sum(got.values()) >= args.flooders:
                        all_in.set()
                    if response.status_code == 200:
                        async for _ in response.aiter_lines():
                            break
                    else:
                        await response.aread()
            except httpx.HTTPError as exc:
                got[type(exc).__name__] += 1


async def measure(url: str, args: argparse.Namespace) -> str:
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        headers, body = request("tools/call", {"name": "slow", "arguments": {"seconds": 0}}, "tb")
        task_id = (await client.post(url, headers=headers, content=body)).json()["result"]["taskId"]
        alone, alone_statuses = await polls(client, url, task_id, args.samples)
        stop, all_in, got = asyncio.Event(), asyncio.Event(), Counter[str]()
        flooders = [asyncio.create_task(flood(url, args, stop, got, all_in)) for _ in range(args.flooders)]
        try:
            async with asyncio.timeout(TIMEOUT_S):
                await all_in.wait()
            during, during_statuses = await polls(client, url, task_id, args.samples)
        finally:
            stop.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TIMEOUT_S):
                    await asyncio.gather(*flooders, return_exceptions=True)
    return (
        f"B's tasks/get median alone {alone * 1000:.1f} ms {dict(alone_statuses)}, while A floods "
        f"{during * 1000:.1f} ms {dict(during_statuses)} ({during / alone:.1f}x); A got {dict(got)}"
    )


def run(checkout: Checkout, root: Path, args: argparse.Namespace) -> None:
    work = root / f"fig7-{checkout.label}-{args.store}"
    work.mkdir(parents=True, exist_ok=True)
    say(checkout.label, "imports:", check_shadowing(checkout, work))
    env = {"EXT_TASKS_TOKENS": "ta=alice,tb=bob", "EXT_TASKS_LOG_LEVEL": "warning"}
    with contextlib.ExitStack() as stack:
        valkey = stack.enter_context(valkey_process(work / "valkey")) if args.store == "valkey" else None
        server = stack.enter_context(running_server(checkout, work, valkey=valkey, env=env))
        line = asyncio.run(measure(server.url, args))
    say(f"[{checkout.label}, {args.store}, {args.flooders} connections x {args.ids} ids] {line}")


def build_parser() -> argparse.ArgumentParser:
    p = parser("fig7", __doc__ or "")
    p.set_defaults(before=BEFORE)
    p.add_argument("--store", choices=("valkey", "memory"), default="valkey")
    p.add_argument("--flooders", type=int, default=100, help="A's connections (default 100)")
    p.add_argument("--ids", type=int, default=1000, help="task ids per listen (default 1000, the most allowed)")
    p.add_argument("--samples", type=int, default=100, help="B's polls per median (default 100)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_figure(build_parser(), argv, run)
