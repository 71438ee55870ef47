"""``python -m bench --fairness``: what fair scheduling buys a principal while another floods the server
(``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL``, ``ext_tasks.flow``; issue 29).

Two principals (static bearer tokens) on one server (run concurrency 16). Principal B, the probe, sends
one ``stamp`` task at a time and measures its **create-to-start latency**: from just before its
``tools/call`` is sent to the instant the tool's body started, which the tool answers (the same wall
clock: everything runs on this machine). Principal A floods ``--flood`` creations of ``busy`` (60 ms
each) as fast as four keep-alive connections send them (``bench.flood``, a process of its own). Each
stack is measured twice, each time on a fresh server (and store):

* **cap 4**: ``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL=4``: A's runs past its fourth wait in A's own line,
  outside the shared run queue; then
* **no cap**: a server without it: A's flood queues in the shared queue, in front of B.

On each, B is measured (a) **alone**, then (b) **during the flood**: from once a tenth of the flood is
created until A has sent all of it (at least one sample, at most ``PROBE_BUDGET_S``; without the cap a
sample waits behind the flood's backlog, so that phase has fewer samples). Its p50 and p95, and flood ÷
alone, are reported; the issue's bar is B's p50 during the flood within twice alone with the cap on.
Each sample is split in two, reported beside it: until B's create was answered (the server's request
handling, shared with A's requests on the same core: no run queue makes that fair), and from then until
the run started (the queue's part, which fair scheduling governs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from ext_tasks.loadgen.http import REQUEST_TIMEOUT_S, Connection
from ext_tasks.loadgen.mcp import Failure, Mcp

from . import procs
from .flood import TOKEN_VARIABLE
from .plan import Stack
from .stacks import Running, running_stack

if TYPE_CHECKING:
    from .run import Options

#: The stacks the scenario runs on (``--stacks`` picks among them).
STACKS: Final = {
    "ext-hc-mem": Stack("ext-hc-mem", "ext-tasks, hypercorn, in-memory", "ext", "hypercorn", "memory", 1, "pinned",
                        "main", None),
    "ext-hc-vk": Stack("ext-hc-vk", "ext-tasks, hypercorn, Valkey", "ext", "hypercorn", "valkey", 1, "pinned",
                       "main", None),
}  # fmt: skip
#: ``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL`` when on, and the workers' run concurrency (the default).
CAP, RUN_CONCURRENCY = 4, 16
#: How long each of A's tasks runs (long enough that, without the cap, its runs drain slower than it
#: creates them: a backlog builds), and the connections it floods from.
BUSY_MS, SENDERS = 60.0, 4
#: The probe stops taking samples after this long in a phase (the sample under way is finished).
PROBE_BUDGET_S: Final = 15.0
#: The longest one sample may wait for its task to start (a flood's whole backlog, at worst).
SAMPLE_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True)
class Scenario:
    flood: int = 5000
    samples: int = 50
    stacks: tuple[str, ...] = tuple(STACKS)


def run(scenario: Scenario, options: Options) -> tuple[dict[str, Any], list[str]]:
    """Every stack, cap on then off: the figures (by stack, by setting, alone and during the flood) and
    what did not run."""
    figures: dict[str, Any] = {}
    failures: list[str] = []
    state_key = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "keygen"], capture_output=True, text=True, check=True, cwd=procs.REPO
    ).stdout.strip()
    with _pinned_beside_the_server():
        for key in scenario.stacks:
            for setting, cap in (("cap", CAP), ("no_cap", 0)):
                print(f"fairness: {key}, {setting.replace('_', ' ')}", flush=True)
                try:
                    figures.setdefault(key, {})[setting] = _measure(key, cap, scenario, options, state_key)
                except (Failure, RuntimeError, TimeoutError, OSError, EOFError, ValueError, KeyError,
                        subprocess.SubprocessError) as exc:  # fmt: skip
                    failures.append(f"{key}, {setting}: {type(exc).__name__}: {exc}"[:2000])
                    print(f"  FAILED {failures[-1][:500]}", flush=True)
    for settings in figures.values():
        for measured in settings.values():
            alone, flood = measured["alone"], measured["flood"]
            measured["ratio"] = ratios(alone, flood)
            measured["queued_ratio"] = ratios(alone["queued"], flood["queued"])
    return figures, failures


def _measure(key: str, cap: int, scenario: Scenario, options: Options, state_key: str) -> dict[str, Any]:
    flooder, prober = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    env = (
        ("EXT_TASKS_TOKENS", f"{flooder}=flooder,{prober}=prober"),
        ("EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL", str(cap)),
        ("EXT_TASKS_RUN_CONCURRENCY", str(RUN_CONCURRENCY)),
        ("EXT_TASKS_MAX_ACTIVE_TASKS", "0"),  # the flood is far past the default 1,000 unfinished a principal
    )
    with running_stack(replace(STACKS[key], env=env), options, state_key) as running:
        alone = asyncio.run(_probe(running, prober, scenario.samples, None))
        print(f"  alone        {describe(alone)}", flush=True)
        flood = asyncio.run(_probe_during_flood(running, prober, flooder, scenario))
        print(f"  during flood {describe(flood)}; A created {flood['flood']['per_s']:,.0f}/s", flush=True)
    return {"alone": alone, "flood": flood}


async def _probe(running: Running, token: str, samples: int, ended: asyncio.Event | None) -> dict[str, Any]:
    """B's samples: one ``stamp`` task at a time (a warm-up task first, not counted), until ``samples``
    or, during a flood, until the flood has ended (at least one sample; at most ``PROBE_BUDGET_S``)."""
    mcp = Mcp(running.path, token=token)
    conn = Connection("127.0.0.1", running.server.port)
    starts: list[float] = []
    replies: list[float] = []
    try:
        await _start_latency(mcp, conn)
        deadline = time.monotonic() + PROBE_BUDGET_S
        while len(starts) < samples and not (starts and ended is not None and ended.is_set()):
            if ended is not None and starts and time.monotonic() > deadline:
                break
            start_ms, reply_ms = await _start_latency(mcp, conn)
            starts.append(start_ms)
            replies.append(reply_ms)
    finally:
        conn.close()
    queued = [start - reply for start, reply in zip(starts, replies, strict=True)]
    return {**summary(starts), "create_reply": summary(replies), "queued": summary(queued)}


async def _start_latency(mcp: Mcp, conn: Connection) -> tuple[float, float]:
    """Create-to-start of one ``stamp`` task, and the part of it until the create was answered (ms)."""
    sent_ms = time.time() * 1000
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        created = await mcp.call(conn, "tools/call", {"name": "stamp", "arguments": {"label": "b"}})
    reply_ms = time.time() * 1000 - sent_ms
    task_id = str(created["taskId"])
    waited = time.monotonic()
    async with asyncio.timeout(SAMPLE_TIMEOUT_S):
        while True:
            state = await mcp.call(conn, "tasks/get", {"taskId": task_id})
            if state.get("status") == "completed":
                return float(state["result"]["content"][0]["text"]) - sent_ms, reply_ms
            if state.get("status") not in ("working", None):
                raise RuntimeError(f"the probe's task {task_id} ended {state.get('status')}")
            # Polled often while short, less as it grows: the figure is the tool's, not the poll's.
            await asyncio.sleep(min(0.05, max(0.002, (time.monotonic() - waited) / 20)))


async def _probe_during_flood(running: Running, prober: str, flooder: str, scenario: Scenario) -> dict[str, Any]:
    """B's samples once a tenth of A's flood is created, and what the flood did."""
    every = max(1, scenario.flood // 50)
    command = [
        sys.executable, "-m", "bench.flood", "--port", str(running.server.port), "--path", running.path,
        "--tool", "busy", "--args", json.dumps({"ms": BUSY_MS}), "--count", str(scenario.flood),
        "--senders", str(SENDERS), "--every", str(every),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *procs.pinned(running.loader_cpus, command),
        cwd=procs.REPO,
        env={**os.environ, TOKEN_VARIABLE: flooder},
        stdout=asyncio.subprocess.PIPE,
    )
    under_way, ended = asyncio.Event(), asyncio.Event()
    outcome: dict[str, Any] = {}

    async def follow() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            text = line.decode().strip()
            if text.startswith("created ") and int(text.split()[1]) >= scenario.flood // 10:
                under_way.set()
            elif text.startswith("{"):
                outcome.update(json.loads(text))
        under_way.set()  # ended (or failed) before: probe anyway, the outcome says what it did
        ended.set()

    follower = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(under_way.wait(), SAMPLE_TIMEOUT_S)
        probed = await _probe(running, prober, scenario.samples, ended)
        await asyncio.wait_for(follower, SAMPLE_TIMEOUT_S)
        await process.wait()
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    if not outcome:
        raise RuntimeError(f"the flood ended {process.returncode} without its outcome")
    seconds = float(outcome["seconds"]) or 1e-9
    probed["flood"] = {**outcome, "per_s": round(outcome["created"] / seconds, 1)}
    return probed


@contextlib.contextmanager
def _pinned_beside_the_server() -> Iterator[None]:
    """The probe on the loader's CPU (0), as the bench's loader is: the server has CPU 1 to itself."""
    if not procs.can_pin():
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# --- figures --------------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``None`` for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def summary(latencies: list[float]) -> dict[str, Any]:
    rounded = [round(value, 3) for value in latencies]
    figures = {name: percentile(rounded, fraction) for name, fraction in (("p50", 0.5), ("p95", 0.95))}
    return {"samples": len(rounded), **figures, "max": max(rounded, default=None), "latencies_ms": rounded}


def ratios(alone: dict[str, Any], flood: dict[str, Any]) -> dict[str, float | None]:
    """Flood ÷ alone, for p50 and p95 (``None`` when either is missing)."""
    return {
        name: round(flood[name] / alone[name], 2) if flood.get(name) and alone.get(name) else None
        for name in ("p50", "p95")
    }


def describe(measured: dict[str, Any]) -> str:
    if not measured["samples"]:
        return "no samples"
    return f"p50 {measured['p50']:.1f} ms, p95 {measured['p95']:.1f} ms ({measured['samples']} samples)"
