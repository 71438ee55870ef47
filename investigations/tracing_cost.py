"""What tracing costs a server: throughput before the tracing code, with it off, and with it on, in one run.

Three servers (``ext-tasks serve`` on the in-memory store, the bench's tools), started one at a time and
measured with ``ext-tasks bench`` in interleaved rounds (so a machine that slows down slows all three):

* ``before``: the code of ``--before`` (default ``main``), unpacked with ``git archive``;
* ``off``: this tree, no ``OTEL_*`` variable (tracing off: the default);
* ``on``: this tree exporting every span (``always_on``) over OTLP/HTTP to a receiver in this process
  (:mod:`tests.support.otlp_receiver`), with the SDK's default batching;
* ``on10``: the same, sampling 10 % of the traces (``traceidratio``, 0.1).

Then the engine alone, in process (no HTTP, no loader): a plain ``tools/call`` and a ``tasks/get``, each
server's code in its own interpreter pinned to the same CPU, alternating, the best of the repetitions.

Workloads: ``replay`` (an MRTR retry verified and completed: the per-request path, one span each),
``tasks-get`` (a poll of a finished task: one span and one link) and ``lifecycle`` (create a task,
poll it to ``completed``: request spans plus the run attempt's span). The issue's bound: off within 2 %
of before.

Run::

    python -m investigations.tracing_cost                   # 2 rounds of 5 s per workload and server
    python -m investigations.tracing_cost --rounds 3 --seconds 8 --before e9b52a0
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.support.cluster import wait_listening
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.processes import REPO, ServerProcess, can_pin, cpu_seconds, free_port, pinned, stop

WORKLOADS = (("replay", "ask_once"), ("tasks-get", "instant"), ("lifecycle", "instant"))
CONCURRENCY = "16"
#: With two CPUs or more: the server on the first, the loader (and this process, the receiver) on the second.
SERVER_CPU, LOADER_CPU = "0", "1"


def unpack(revision: str, into: Path) -> Path:
    """The tree of ``revision`` (ext_tasks, migration, bench, ...) in ``into``."""
    archive = subprocess.run(["git", "archive", revision], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


@contextlib.contextmanager
def server(tree: Path, env: Mapping[str, str], logs: Path) -> Iterator[ServerProcess]:
    port = free_port()
    log_path = logs / f"server-{port}.log"
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("EXT_TASKS_", "OTEL_"))}
    argv = pinned(
        SERVER_CPU, [sys.executable, "-m", "ext_tasks", "serve", "--port", str(port), "--tools", "bench.tools"]
    )
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**inherited, **env}, cwd=tree)
    running = ServerProcess(process=process, port=port, log_path=log_path)
    try:
        wait_listening(running)
        yield running
    finally:
        stop(process)


def measure(url: str, workload: str, tool: str, seconds: float, out: Path, pid: int) -> tuple[float, float]:
    """Requests per second of one ``ext-tasks bench`` step, and the server's CPU microseconds per request
    (over the whole command, its setup included: the same bias for every server; a figure that other
    load on the machine moves much less than throughput)."""
    cpu_before = cpu_seconds([pid])
    argv = [sys.executable, "-m", "ext_tasks", "bench", workload, "--url", url, "--tool", tool]
    argv += ["--concurrency", CONCURRENCY, "--duration", str(seconds), "--warmup", "2", "--json", str(out)]
    if workload == "lifecycle":
        argv += ["--poll-ms", "1"]  # as the bench does: the task's own pace, not the advertised interval
    subprocess.run(pinned(LOADER_CPU, argv), cwd=REPO, capture_output=True, check=True, timeout=seconds * 4 + 60)
    cpu_s = cpu_seconds([pid]) - cpu_before
    step = json.loads(out.read_text())["steps"][0]
    errors = sum(step["errors"].values())
    assert errors == 0, step["errors"]
    return float(step["requests_per_s"]), cpu_s * 1e6 / max(1, int(step["requests"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="the revision measured as 'before' (default main)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--engine-repeats", type=int, default=3, help="alternating in-process runs per server")
    args = parser.parse_args()
    if can_pin():
        os.sched_setaffinity(0, {int(LOADER_CPU)})
    with tempfile.TemporaryDirectory() as scratch, OtlpReceiver() as receiver:
        base = Path(scratch)
        before = unpack(args.before, base / "before")
        variants = {
            "before": (before, {}),
            "off": (REPO, {}),
            "on": (REPO, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_TRACES_SAMPLER": "always_on"}),
            "on10": (
                REPO,
                {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                    "OTEL_TRACES_SAMPLER": "traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": "0.1",
                },
            ),
        }
        figures: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for round_number in range(args.rounds):
            for name, (tree, env) in variants.items():
                with server(tree, env, base) as running:
                    for workload, tool in WORKLOADS:
                        out = base / f"{name}-{workload}-{round_number}.json"
                        rate, us = measure(running.url, workload, tool, args.seconds, out, running.process.pid)
                        figures.setdefault((name, workload), []).append(rate)
                        cpu.setdefault((name, workload), []).append(us)
                        print(
                            f"round {round_number + 1} {name:>6} {workload:>10}: {rate:9,.0f} req/s, "
                            f"{us:6.1f} server CPU us/request",
                            flush=True,
                        )
        print(f"\nspans received: {len(receiver.spans()):,}")
        report("throughput, req/s (median of rounds; higher is better)", figures, variants)
        report("server CPU per request, us (median of rounds; lower is better)", cpu, variants)
        # Alternating, the best of every repetition: what other load on the machine adds is never the best.
        engine: dict[str, dict[str, float]] = {}
        for _ in range(args.engine_repeats):
            for name, (tree, env) in variants.items():
                for label, value in in_process(tree, env).items():
                    engine.setdefault(name, {})[label] = min(value, engine.get(name, {}).get(label, value))
        print(f"\nthe engine in process, no HTTP (us per request, best of {args.engine_repeats} x 5 x 20,000)")
        for label in ("tools/call", "tasks/get"):
            row = {name: engine[name][label] for name in variants}
            print(
                f"{label:>10} before {row['before']:6.2f}  off {row['off']:6.2f}  on {row['on']:6.2f}  "
                f"on10 {row['on10']:6.2f}  off/before {row['off'] / row['before']:.3f}  "
                f"on/off {row['on'] / row['off']:.3f}  on10/off {row['on10'] / row['off']:.3f}"
            )


def report(title: str, figures: dict[tuple[str, str], list[float]], variants: Mapping[str, object]) -> None:
    print(f"\n{title}")
    print(
        f"{'workload':>10} {'before':>9} {'off':>9} {'on':>9} {'on10':>9} "
        f"{'off/before':>11} {'on/off':>7} {'on10/off':>9}"
    )
    for workload, _ in WORKLOADS:
        median = {name: statistics.median(figures[(name, workload)]) for name in variants}
        print(
            f"{workload:>10} {median['before']:9,.1f} {median['off']:9,.1f} {median['on']:9,.1f} "
            f"{median['on10']:9,.1f} "
            f"{median['off'] / median['before']:11.3f} {median['on'] / median['off']:7.3f} "
            f"{median['on10'] / median['off']:9.3f}"
        )


#: Run in each tree (``before`` has no ``ext_tasks.tracing``): the engine's hot path without HTTP, a plain
#: tools/call and a tasks/get of a finished task, the process's CPU time per request (the exporter's
#: thread included when tracing is on).
ENGINE_LOOP = """
import asyncio, json, os, sys, time
from ext_tasks import Principal, ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
    from ext_tasks import tracing_setup
    tracing_setup.configure("tracing-cost")
registry = ToolRegistry("cost", version="1")
@registry.tool()
async def echo(text: str) -> str:
    return text
@registry.tool(task="required")
async def job() -> str:
    return "done"
store = MemoryTaskStore()
engine = Engine(registry, ResumeCodec([b"k" * 32], audience="cost", ttl_s=60), tasks=TaskMethods(store))
ALICE = Principal(id="alice")
CAPS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
def request(method, params):
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": CAPS}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}).encode()
    headers = {"mcp-protocol-version": ["2026-07-28"], "mcp-method": [method]}
    name = params.get("name") or params.get("taskId")
    if name:
        headers["mcp-name"] = [name]
    return body, headers
async def main():
    created = await engine.handle(*request("tools/call", {"name": "job", "arguments": {}}), ALICE)
    task_id = created.wire["result"]["taskId"]
    await Worker(store, registry).execute(task_id)
    figures = {}
    for label, (body, headers) in (
        ("tools/call", request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})),
        ("tasks/get", request("tasks/get", {"taskId": task_id})),
    ):
        best = float("inf")
        for _ in range(5):
            started = time.process_time()  # CPU time: what other load on the machine preempts is not counted
            for _ in range(20000):
                reply = await engine.handle(body, headers, ALICE)
            best = min(best, (time.process_time() - started) / 20000 * 1e6)
            assert reply.status == 200, reply
        figures[label] = best
    print(json.dumps(figures))
asyncio.run(main())
"""


def in_process(tree: Path, env: Mapping[str, str]) -> dict[str, float]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("EXT_TASKS_", "OTEL_"))}
    argv = pinned(SERVER_CPU, [sys.executable, "-c", ENGINE_LOOP])
    done = subprocess.run(argv, cwd=tree, env={**inherited, **env}, capture_output=True, text=True, check=True)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


if __name__ == "__main__":
    main()
