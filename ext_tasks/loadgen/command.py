"""``ext-tasks bench``: measure any 2026-07-28 deployment (its balancer, its store, its tools).

::

    ext-tasks bench --url http://10.0.0.7/mcp mrtr --tool ask --concurrency 1,16,64
    ext-tasks bench --url URL lifecycle --tool report --rate 200,400 --processes 2 --json run.json
    ext-tasks bench --url URL tasks-get --tool report --population 500
    ext-tasks bench --self-check

Each step (a concurrency, or a rate) runs ``--warmup`` seconds untimed, then ``--duration`` timed.
The table shows operations and requests per second, latency percentiles (from the send in closed loop,
from the scheduled send in open loop), and failures by HTTP status and JSON-RPC code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from .selfcheck import self_check
from .steps import BenchError, Plan, StepResult, prepare, run_step

WORKLOAD_NAMES = ("mrtr", "replay", "tasks-get", "lifecycle", "call")
EXIT_USAGE = 2


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="benchmark a 2026-07-28 server: throughput and latency")
    bench.add_argument("workload", nargs="?", choices=WORKLOAD_NAMES, help="what each operation is")
    bench.add_argument("--url", help="the server's MCP endpoint (http://)")
    bench.add_argument("--token", help="bearer token sent as Authorization")
    bench.add_argument("--tool", help="the tool the workload calls")
    bench.add_argument("--args", default="{}", help="the tool's arguments, a JSON object (default {})")
    loops = bench.add_mutually_exclusive_group()
    loops.add_argument("--concurrency", default="16", help="closed loop: virtual users per step, e.g. 1,16,64")
    loops.add_argument("--rate", help="open loop: operations per second per step, e.g. 200,500")
    bench.add_argument("--duration", type=float, help="timed seconds per step (default 10; --self-check: 3)")
    bench.add_argument("--warmup", type=float, default=2.0, help="untimed seconds before each step (default 2)")
    bench.add_argument("--processes", type=int, default=1, help="loader processes (default 1)")
    bench.add_argument("--population", type=int, default=100, help="tasks-get: tasks created and polled")
    bench.add_argument("--poll-ms", type=float, help="lifecycle: poll at this interval, not the advertised one")
    bench.add_argument("--json", dest="json_path", help="write every figure and the raw histograms here")
    bench.add_argument("--plot", help="draw throughput and latency per step into this PNG (needs matplotlib)")
    bench.add_argument("--self-check", action="store_true", help="measure the loader itself (echo; wrk if found)")


def plan_from(args: argparse.Namespace) -> Plan:
    if args.workload is None or args.url is None:
        raise BenchError("give a WORKLOAD and --url (or --self-check)")
    if not args.tool:
        raise BenchError(f"{args.workload} needs --tool NAME (tasks-get: the tool whose tasks it polls)")
    try:
        arguments = json.loads(args.args)
    except ValueError as exc:
        raise BenchError(f"--args is not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise BenchError("--args must be a JSON object")
    try:
        concurrency = tuple(int(c) for c in str(args.concurrency).split(",")) if not args.rate else ()
        rates = tuple(float(r) for r in str(args.rate).split(",")) if args.rate else ()
    except ValueError:
        raise BenchError("--concurrency and --rate take comma-separated numbers") from None
    if any(c < 1 for c in concurrency) or any(r <= 0 for r in rates):
        raise BenchError("concurrency and rates must be positive")
    duration = 10.0 if args.duration is None else args.duration
    if duration <= 0 or args.warmup < 0 or args.processes < 1 or args.population < 1:
        raise BenchError("--duration, --processes and --population must be positive, --warmup at least 0")
    return Plan(
        url=args.url, workload=args.workload, tool=args.tool, arguments=arguments, token=args.token,
        concurrency=concurrency, rates=rates, duration_s=duration, warmup_s=args.warmup,
        processes=args.processes, population=args.population, poll_ms=args.poll_ms,
    )  # fmt: skip


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    console = Console(file=sys.stderr, highlight=False)
    try:
        if args.self_check:
            print(asyncio.run(self_check(3.0 if args.duration is None else args.duration)), file=out)
            return 0
        plan = plan_from(args)
        results = asyncio.run(_measure(plan, console))
    except BenchError as exc:
        console.print(f"ext-tasks bench: {exc}", markup=False)
        return EXIT_USAGE
    print(table(plan, results), file=out)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report(plan, results), indent=2))
    if args.plot:
        from .plot import plot

        plot(plan, results, Path(args.plot))
    return 0


async def _measure(plan: Plan, console: Console) -> list[StepResult]:
    base = await prepare(plan)
    results = []
    live = console.is_terminal
    for level in plan.levels():
        status = console.status("starting", spinner="dots") if live else None
        if status is not None:
            status.start()

        def progress(label: str, done: float, ops: int, errors: int, status: Any = status) -> None:
            if status is not None:
                status.update(f"{plan.workload} {label}: {done:4.0%} · {ops:,} ops · {errors:,} errors")

        try:
            result = await run_step(plan, base, level, progress)
        finally:
            if status is not None:
                status.stop()
        if not live:
            console.print(
                f"{plan.workload} {result.label}: {result.merged.ops / plan.duration_s:,.0f} ops/s", markup=False
            )
        results.append(result)
    return results


def report(plan: Plan, results: list[StepResult]) -> dict[str, Any]:
    return {
        "url": plan.url,
        "workload": plan.workload,
        "tool": plan.tool,
        "loop": "open" if plan.open_loop else "closed",
        "processes": plan.processes,
        "duration_s": plan.duration_s,
        "warmup_s": plan.warmup_s,
        "steps": [result.to_json() for result in results],
    }


def table(plan: Plan, results: list[StepResult]) -> str:
    since = "the scheduled send" if plan.open_loop else "the send"
    lines = [
        f"{plan.workload} against {plan.url} ({'open' if plan.open_loop else 'closed'} loop, "
        f"{plan.processes} loader process(es), {plan.duration_s:g} s per step; latency from {since})",
        "",
        f"{'step':>14} {'ops/s':>10} {'req/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} "
        f"{'max ms':>8} {'errors':>7}",
    ]
    for result in results:
        summary = result.merged.summary()
        latency = summary["latency_ms"]
        figures = [latency.get(key) for key in ("p50", "p90", "p99", "p99.9", "max")]
        shown = [f"{value:8.2f}" if value is not None else f"{'-':>8}" for value in figures]
        errors = sum(summary["errors"].values())
        lines.append(
            f"{result.label:>14} {summary['ops_per_s']:10,.0f} {summary['requests_per_s']:10,.0f} "
            f"{shown[0]} {shown[1]} {shown[2]} {shown[3]:>9} {shown[4]} {errors:7,}"
        )
    for result in results:
        for key, count in sorted(result.merged.errors.items()):
            samples = "; ".join(result.merged.error_samples.get(key, []))
            lines.append(f"  {result.label}: {count:,} x {key}: {samples}"[:300])
    return "\n".join(lines)
