"""One step of a round: a running stack driven by ``ext_tasks.loadgen`` (the load generator of
``ext-tasks bench``: raw HTTP/1.1 on uvloop, one keep-alive connection per virtual user, closed loop, HDR
histograms), in its own process pinned with Valkey, while the server's, Valkey's and the box's CPU are
read at the edges of the timed window. wrk, when installed, drives the echo floor once as a cross-check.
"""

from __future__ import annotations

import asyncio
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ext_tasks.client import Client
from ext_tasks.loadgen.steps import Plan
from ext_tasks.loadgen.steps import run_step as run_loader
from ext_tasks.loadgen.workloads import ECHO_BODY

from . import procs
from .plan import TOOLS, Step

if TYPE_CHECKING:
    from .run import Options
    from .stacks import Running

#: The bench's workloads as ``ext_tasks.loadgen`` names them (``lifecycle_input`` is the lifecycle of a
#: tool that asks first: the loader answers with ``tasks/update``).
WORKLOADS: Final = {
    "echo": "echo",
    "mrtr": "mrtr",
    "replay": "replay",
    "tasks_get": "tasks-get",
    "lifecycle": "lifecycle",
    "lifecycle_input": "lifecycle",
}
#: The lifecycle polls every millisecond, the first poll right after the create answer.
POLL_MS: Final = 1.0
_FIGURES: Final = ("p50", "p90", "p99", "max", "mean")


async def _populate(url: str, token: str | None, size: int) -> list[str]:
    """``size`` completed ``instant`` tasks (each waited for), then ``size`` working ``hold`` tasks."""
    ids: list[str] = []
    async with Client(url, token=token) as client:
        for tool, arguments, finish in (("instant", {"label": "p"}, True), ("hold", {"seconds": 3000.0}, False)):
            for start in range(0, size, 16):
                handles = await asyncio.gather(
                    *(client.start_tool(tool, arguments) for _ in range(min(16, size - start)))
                )
                if finish:
                    await asyncio.gather(*(asyncio.wait_for(handle.wait(), 60.0) for handle in handles))
                ids += [str(handle.task_id) for handle in handles]
    return ids


def run_step(
    running: Running,
    step: Step,
    options: Options,
    round_index: int,
    *,
    on_window_start: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One step's record; ``on_window_start`` is called as the timed window opens (the profiler starts there)."""
    if step.workload == "echo_wrk":
        return _run_wrk(running, step, options, round_index)
    url = f"http://127.0.0.1:{running.server.port}{running.path}"
    if step.workload == "tasks_get" and not running.population:
        running.population = asyncio.run(_populate(url, running.token, options.shape.population))
    base: dict[str, Any] = {
        "workload": WORKLOADS[step.workload],
        "host": "127.0.0.1",
        "port": running.server.port,
        "path": running.path,
        "token": running.token,
        "tool": TOOLS.get(step.workload, ""),
        "poll_ms": POLL_MS,
        "poll_first": True,
        # An MRTR op is the round trip; its latency is the resume's (the second request) alone.
        "latency_from": "last" if step.workload == "mrtr" else None,
        "task_ids": running.population,
    }
    plan = Plan(url, WORKLOADS[step.workload], concurrency=(step.concurrency,), duration_s=options.seconds,
                warmup_s=options.warmup_s)  # fmt: skip
    window: dict[str, tuple[float, float, float, float]] = {}

    def marks() -> tuple[float, float, float, float]:
        valkey = 0.0 if running.valkey is None else running.valkey.cpu()
        return running.server.cpu(), valkey, time.monotonic(), procs.machine_busy_seconds()

    async def sample(start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at + options.warmup_s - time.time()))
        window["start"] = marks()
        if on_window_start is not None:
            on_window_start()
        await asyncio.sleep(max(0.0, start_at + options.warmup_s + options.seconds - time.time()))
        window["end"] = marks()

    async def measure() -> Any:
        samplers: list[asyncio.Task[None]] = []
        prefix = tuple(procs.pinned(running.loader_cpus, []))
        result = await run_loader(plan, base, float(step.concurrency), None, command_prefix=prefix,
                                  on_start=lambda at: samplers.append(asyncio.ensure_future(sample(at))))  # fmt: skip
        await asyncio.gather(*samplers)
        return result

    result = asyncio.run(measure())
    summary = result.merged.summary()
    (server0, valkey0, t0, busy0), (server1, valkey1, t1, busy1) = window["start"], window["end"]
    requests = max(1, summary["requests"])
    ours = (server1 - server0) + (valkey1 - valkey0) + result.loader_cpu_s
    extra = summary["extra_latency_ms"]
    return {
        "round": round_index,
        "stack": running.stack.key,
        "workload": step.workload,
        "concurrency": step.concurrency,
        "seconds": options.seconds,
        "ops": summary["ops"],
        "requests": summary["requests"],
        "errors": sum(summary["errors"].values()),
        "error_samples": [f"{key}: {sample}" for key, kept in summary["error_samples"].items() for sample in kept],
        "ops_per_s": summary["ops_per_s"],
        "requests_per_s": summary["requests_per_s"],
        "latency_ms": {name: summary["latency_ms"].get(name) for name in _FIGURES},
        "server_latency_ms": {name: extra["server"].get(name) for name in _FIGURES} if "server" in extra else None,
        # The lifecycle's create request alone: a WAIT on the creation shows here undiluted by the polls.
        "create_latency_ms": {name: extra["create"].get(name) for name in _FIGURES} if "create" in extra else None,
        "server_cpu_us_per_request": 1e6 * (server1 - server0) / requests,
        "server_cores": (server1 - server0) / max(1e-9, t1 - t0),
        "valkey_cpu_us_per_request": None if running.valkey is None else 1e6 * (valkey1 - valkey0) / requests,
        "loader_cpu_us_per_request": 1e6 * result.loader_cpu_s / requests,
        "population": len(running.population) if step.workload == "tasks_get" else None,
        # Cores busy with anything but this step's server, Valkey and loader (other jobs on the box).
        "foreign_cores": max(0.0, (busy1 - busy0) - ours) / max(1e-9, t1 - t0),
    }


def _run_wrk(running: Running, step: Step, options: Options, round_index: int) -> dict[str, Any]:
    wrk = shutil.which("wrk")
    assert wrk is not None
    script = options.scratch / "post.lua"
    body = ECHO_BODY.decode()
    script.write_text(f'wrk.method = "POST"\nwrk.body = \'{body}\'\nwrk.headers["Content-Type"] = "application/json"\n')
    url = f"http://127.0.0.1:{running.server.port}{running.path}"

    def command(seconds: float) -> list[str]:
        base = [wrk, "-t1", f"-c{step.concurrency}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script)]
        return procs.pinned(running.loader_cpus, [*base, url])

    subprocess.run(command(options.warmup_s), capture_output=True, check=False, timeout=120)
    server_cpu0, t0, children0 = running.server.cpu(), time.monotonic(), _children_cpu()
    done = subprocess.run(command(options.seconds), capture_output=True, text=True, check=False, timeout=300)
    server_cpu1, t1, children1 = running.server.cpu(), time.monotonic(), _children_cpu()
    text = done.stdout
    rate = float(search(r"Requests/sec:\s+([\d.]+)", text) or 0.0)
    total = int(search(r"(\d+) requests in", text) or 0)
    latency = {f"p{q}": _wrk_ms(search(rf"\s{q}%\s+([\d.]+\w+)", text)) for q in ("50", "90", "99")}
    return {
        "round": round_index,
        "stack": running.stack.key,
        "workload": "echo_wrk",
        "concurrency": step.concurrency,
        "seconds": t1 - t0,
        "ops": total,
        "requests": total,
        "errors": int(search(r"Non-2xx or 3xx responses:\s+(\d+)", text) or 0),
        "error_samples": [] if total else [text[-300:] + done.stderr[-300:]],
        "ops_per_s": rate,
        "requests_per_s": rate,
        "latency_ms": {**latency, "max": None, "mean": None},
        "server_latency_ms": None,
        "server_cpu_us_per_request": 1e6 * (server_cpu1 - server_cpu0) / max(1, total),
        "server_cores": (server_cpu1 - server_cpu0) / max(1e-9, t1 - t0),
        "valkey_cpu_us_per_request": None,
        "loader_cpu_us_per_request": 1e6 * (children1 - children0) / max(1, total),
        "population": None,
        "foreign_cores": None,
    }


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for children (wrk, once it has exited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def search(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text)
    return None if found is None else found.group(1)


def _wrk_ms(text: str | None) -> float | None:
    found = None if text is None else re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if found is None:
        return None
    return float(found.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[found.group(2)]
