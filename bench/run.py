"""The rounds of ``python -m bench``: every stack of the plan started on 127.0.0.1 and driven step by step
(``bench.load``), in interleaved rounds with a rotated order; a step measured again on a busy box; the
store's cost per operation taken once per stack (``bench.commands``). See ``bench/README.md``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import commands, procs
from . import plan as plans
from .load import run_step
from .plan import Stack, Step
from .stacks import Running, running_stack

RESULTS = procs.REPO / "bench" / "results"


@dataclass
class Options:
    rounds: int
    seconds: float
    warmup_s: float
    smoke: bool
    only: str | None
    peers: bool
    out: Path
    scratch: Path
    shape: plans.Shape
    #: A step is measured again when other jobs used more cores than this during its timed window.
    max_foreign: float = 0.25
    retries: int = 1
    #: ``--stacks``: run only these stacks (``None``: every stack of the plan).
    stacks: list[str] | None = None


@dataclass
class Progress:
    total: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    def line(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        eta = "" if self.done == 0 else f" eta {_clock(elapsed / self.done * (self.total - self.done))}"
        print(f"[{self.done:>3}/{self.total} {_clock(elapsed)}{eta}] {text}", flush=True)


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes:02d}:{rest:02d}"


def describe(record: dict[str, Any]) -> str:
    latency = record["latency_ms"]
    p50 = "-" if latency["p50"] is None else f"{latency['p50']:.2f}"
    p99 = "-" if latency["p99"] is None else f"{latency['p99']:.2f}"
    errors = f" ERRORS {record['errors']}" if record["errors"] else ""
    return (
        f"{record['ops_per_s']:>9,.0f} ops/s  {record['requests_per_s']:>8,.0f} req/s  p50 {p50} p99 {p99} ms{errors}"
    )


def execute(
    stacks: list[Stack], options: Options, store_costs: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every round of every stack; ``store_costs`` (when given) receives, per ext-tasks stack on
    Valkey, the store's commands and CPU per operation (``bench.commands``, first round only)."""
    records: list[dict[str, Any]] = []
    failures: list[str] = []
    progress = Progress(total=options.rounds * sum(len(stack.steps) for stack in stacks))
    state_key = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "keygen"], capture_output=True, text=True, check=True, cwd=procs.REPO
    ).stdout.strip()
    for round_index in range(options.rounds):
        shift = round_index % len(stacks)
        for stack in [*stacks[shift:], *stacks[:shift]]:
            progress.line(f"round {round_index + 1}/{options.rounds}: starting {stack.label}")
            try:
                with running_stack(stack, options, state_key) as running:
                    # (not with OAuth: bench.commands sends no token; the store's work is the same)
                    measure_cost = store_costs is not None and round_index == 0 and stack.kind == "ext"
                    measure_cost = measure_cost and not stack.oauth
                    for step in stack.steps:
                        if measure_cost and running.valkey and step.workload == "tasks_get":
                            # Before the tasks/get population: its held tasks occupy every run slot.
                            _measure_store_cost(running, options, progress, store_costs)
                            measure_cost = False
                        record = _run_step_quietly(running, step, options, round_index, progress)
                        records.append(record)
                        progress.done += 1
                        progress.line(f"  {stack.key:<15} {step.key:<22} {describe(record)}")
                    if measure_cost and running.valkey:
                        _measure_store_cost(running, options, progress, store_costs)
            except (RuntimeError, TimeoutError, OSError, ValueError, subprocess.SubprocessError) as exc:
                message = f"round {round_index + 1}, {stack.key}: {type(exc).__name__}: {exc}"
                failures.append(message[:2000])
                progress.done += sum(1 for step in stack.steps if not _has(records, round_index, stack, step))
                progress.line(f"  FAILED {message[:500]}")
    return records, failures


def _measure_store_cost(
    running: Running, options: Options, progress: Progress, store_costs: dict[str, Any] | None
) -> None:
    assert store_costs is not None and running.valkey is not None
    url = f"http://127.0.0.1:{running.server.port}{running.path}"
    cost = commands.measure(url, running.valkey, count=20 if options.smoke else 200)
    store_costs[running.stack.key] = cost
    progress.line(f"  {running.stack.key:<15} store cost {_describe_cost(cost)}")


def _describe_cost(cost: dict[str, Any]) -> str:
    return ", ".join(
        f"{name} {cost[name]['commands']:.1f} commands"
        + (f" ({cost[name]['waits']:.1f} WAIT)" if cost[name].get("waits") else "")
        + f" {cost[name]['valkey_cpu_us']:.0f} us"
        for name in ("lifecycle", "lifecycle_input", "tasks_get")
    )


def _run_step_quietly(
    running: Running, step: Step, options: Options, round_index: int, progress: Progress
) -> dict[str, Any]:
    """Run a step; while other jobs on the box took more than ``options.max_foreign`` cores during its
    timed window, run it again (at most ``options.retries`` times) and keep the quietest attempt."""
    attempts: list[dict[str, Any]] = []
    for attempt in range(1 + options.retries):
        record = run_step(running, step, options, round_index)
        record["attempt"] = attempt + 1
        attempts.append(record)
        foreign = record.get("foreign_cores")
        if foreign is None or foreign <= options.max_foreign or attempt == options.retries:
            break
        progress.line(f"  {running.stack.key:<15} {step.key:<22} other load {foreign:.2f} cores: measuring again")
        time.sleep(1.0)
    return min(attempts, key=lambda r: r.get("foreign_cores") or 0.0)


def _has(records: list[dict[str, Any]], round_index: int, stack: Stack, step: Step) -> bool:
    return any(
        r["round"] == round_index
        and r["stack"] == stack.key
        and r["workload"] == step.workload
        and r["concurrency"] == step.concurrency
        for r in records
    )


def verdict(stacks: list[Stack], records: list[dict[str, Any]], failures: list[str], options: Options) -> int:
    """Non-zero when something did not run: a failed stack, a step with errors or without any op.
    (Never a performance threshold: the figures are for the report.)"""
    problems = list(failures)
    for round_index in range(options.rounds):
        for stack in stacks:
            for step in stack.steps:
                found = [
                    r
                    for r in records
                    if r["round"] == round_index
                    and r["stack"] == stack.key
                    and r["workload"] == step.workload
                    and r["concurrency"] == step.concurrency
                ]
                if not found:
                    continue  # already reported as a failure of its stack
                if found[0]["ops"] == 0 or found[0]["errors"]:
                    samples = "; ".join(found[0]["error_samples"][:2])
                    problems.append(
                        f"{stack.key} {step.key}: {found[0]['ops']} ops, {found[0]['errors']} errors {samples}"
                    )
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0
