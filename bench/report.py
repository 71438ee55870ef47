# ruff: noqa: RUF001, RUF002 - the report is typeset: the multiplication sign and en dash are meant
"""The report of one run, rendered from its ``results.json`` alone: ``report.md`` (and, with matplotlib,
``throughput.png``). ``python -m bench --render DIR`` writes them again from ``DIR/results.json``.

A figure is the median over rounds of the per-round value, with the min–max spread. A ratio is taken
*inside* each round (a stack against its echo baseline, or against the stack it is compared with,
measured in that same round), then the median of those per-round ratios is shown: the box drifts
between rounds, so only same-round comparisons mean anything.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from .plan import DESCRIPTIONS, OAUTH_STACKS, REPLICA_STACKS

Record = dict[str, Any]
Get = Callable[[Record], float | None]
Spread = tuple[float, float, float, int]  # median, low, high, rounds


def spread(values: Iterable[float | None]) -> Spread | None:
    kept = [value for value in values if value is not None and math.isfinite(value)]
    return (statistics.median(kept), min(kept), max(kept), len(kept)) if kept else None


def fmt(value: Spread | None, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "–"
    median, low, high, n = value
    if n == 1 or math.isclose(low, high):
        return f"{median:,.{digits}f}{unit}"
    return f"{median:,.{digits}f}{unit} ({low:,.{digits}f}–{high:,.{digits}f})"


def _latency(field: str, figure: str) -> Get:
    return lambda r: (r.get(field) or {}).get(figure)


#: The figures a record gives, by name.
GET: Final[dict[str, Get]] = {
    "ops/s": lambda r: r["ops_per_s"],
    "req/s": lambda r: r["requests_per_s"],
    "p50 ms": _latency("latency_ms", "p50"),
    "p99 ms": _latency("latency_ms", "p99"),
    "mean ms": _latency("latency_ms", "mean"),
    "server p50 ms": _latency("server_latency_ms", "p50"),
    "server p99 ms": _latency("server_latency_ms", "p99"),
    "create p50 ms": _latency("create_latency_ms", "p50"),
    "requests per op": lambda r: r["requests"] / r["ops"] if r["ops"] else None,
    "server CPU µs/req": lambda r: r["server_cpu_us_per_request"],
    "Valkey CPU µs/req": lambda r: r["valkey_cpu_us_per_request"],
    "loader CPU µs/req": lambda r: r["loader_cpu_us_per_request"],
}


class Results:
    """Look-ups over the records of one run."""

    def __init__(self, meta: dict[str, Any], records: list[Record]) -> None:
        self.meta, self.records = meta, records
        self.stacks: dict[str, dict[str, Any]] = {stack["key"]: stack for stack in meta["stacks"]}
        self.rounds = sorted({record["round"] for record in records})

    def find(self, stack: str, workload: str, level: int | None = None, round_index: int | None = None) -> list[Record]:
        return [r for r in self.records if r["stack"] == stack and r["workload"] == workload
                and level in (None, r["concurrency"]) and round_index in (None, r["round"])]  # fmt: skip

    def levels(self, stack: str, workload: str) -> list[int]:
        return sorted({r["concurrency"] for r in self.find(stack, workload)})

    def top(self, stack: str, workload: str) -> int | None:
        return max(self.levels(stack, workload), default=None)

    def value(self, stack: str, workload: str, level: int, get: Get) -> Spread | None:
        return spread(get(r) for r in self.find(stack, workload, level))

    def paired(
        self, a: tuple[str, str, int], b: tuple[str, str, int], get: Get, *, minus: bool = False
    ) -> Spread | None:
        """Median over rounds of ``get(a) / get(b)`` (``minus``: ``get(a) - get(b)``), both of one round."""
        values: list[float | None] = []
        for index in self.rounds:
            left, right = self.find(*a, round_index=index), self.find(*b, round_index=index)
            x, y = (get(left[0]), get(right[0])) if left and right else (None, None)
            if x is not None and y is not None:
                values.append(x - y if minus else (x / y if y else None))
        return spread(values)

    def vs_echo(self, stack: str, workload: str, level: int, get: Get, *, minus: bool = False) -> Spread | None:
        baseline = self.stacks.get(stack, {}).get("baseline")
        return None if baseline is None else self.paired((stack, workload, level), (baseline, "echo", level), get,
                                                         minus=minus)  # fmt: skip


#: The issue's targets: (name, stack, workload, compared with ("echo", a stack, or None: the value itself),
#: the figure, the goal, whether higher is better). The level is the stack's highest, c=1 for latencies.
TARGETS: Final = (
    ("MRTR resumes/s ÷ echo (in-memory, hypercorn)", "ext-hc-mem", "replay", "echo", "req/s", 0.75, True),
    ("MRTR requests/s (round trips) ÷ echo (in-memory)", "ext-hc-mem", "mrtr", "echo", "req/s", 0.75, True),
    ("MRTR resumes/s ÷ Python SDK (uvicorn + httptools)", "ext-hc-mem", "replay", "sdk", "ops/s", 4.0, True),
    ("MRTR resumes/s ÷ Python SDK on hypercorn (same server)", "ext-hc-mem", "replay", "sdk-hc", "ops/s", 2.0, True),
    ("MRTR round trips/s ÷ Python SDK (uvicorn + httptools)", "ext-hc-mem", "mrtr", "sdk", "ops/s", 4.0, True),
    ("`tasks/get`/s with Valkey ÷ echo", "ext-hc-vk", "tasks_get", "echo", "ops/s", 0.60, True),
    ("`tasks/get`/s with Valkey ÷ FastMCP 4", "ext-hc-vk", "tasks_get", "fastmcp-vk", "ops/s", 4.0, True),
    ("create → complete p50 with Valkey, server (ms)", "ext-hc-vk", "lifecycle", None, "server p50 ms", 5.0, False),
    ("create → complete p50 with Valkey, client (ms)", "ext-hc-vk", "lifecycle", None, "p50 ms", 5.0, False),
    ("Task lifecycle requests/s on Valkey ÷ echo", "ext-hc-vk", "lifecycle", "echo", "req/s", 0.55, True),
    ("2 processes ÷ 1, `tasks/get`/s (whole box)", "ext-hc-vk-box2", "tasks_get", "ext-hc-vk-box1", "ops/s", 1.8, True),
)
#: Same-round comparisons of two stacks: (section title, stack, against, workloads, figures).
PAIRS: Final = (
    *((f"OAuth on ÷ off, `{on}` (goal ≥ 0.95× requests/s)", on, off, ("replay", "tasks_get"),
       ("req/s", "server CPU µs/req")) for on, off in OAUTH_STACKS.items()),
    ("Replica acknowledgement: WAIT 1 ÷ no WAIT", REPLICA_STACKS[1], REPLICA_STACKS[0], ("lifecycle", "tasks_get"),
     ("p50 ms", "p99 ms", "mean ms", "server p50 ms", "create p50 ms", "requests per op", "req/s", "ops/s")),
    ("granian ÷ hypercorn, in-memory", "ext-gr-mem", "ext-hc-mem", ("mrtr", "replay", "tasks_get"), ("ops/s",)),
    ("granian ÷ hypercorn, Valkey", "ext-gr-vk", "ext-hc-vk", ("replay", "lifecycle", "tasks_get"), ("ops/s",)),
    ("ours ÷ the SDK on hypercorn (same HTTP server)", "ext-hc-mem", "sdk-hc", ("mrtr", "replay"), ("ops/s", "p50 ms")),
    ("ours ÷ FastMCP 4 (both on Valkey)", "ext-hc-vk", "fastmcp-vk", ("lifecycle", "lifecycle_input", "tasks_get"),
     ("ops/s", "p50 ms")),
)  # fmt: skip


def _targets(results: Results) -> list[str]:
    lines = [
        "## Targets",
        "",
        "| target | measured (median, min–max) | goal | verdict | at |",
        "|---|---:|---:|---|---|",
    ]
    for name, stack, workload, against, figure, goal, higher in TARGETS:
        level = 1 if against is None else results.top(stack, workload)
        if level is None or (against not in (None, "echo") and not results.find(against, workload, level)):
            continue
        get = GET[figure]
        if against is None:
            measured = results.value(stack, workload, level, get)
        elif against == "echo":
            measured = results.vs_echo(stack, workload, level, get)
        else:
            measured = results.paired((stack, workload, level), (against, workload, level), get)
        if measured is None:  # a run without that stack or level (--only, --stacks, smoke)
            continue
        verdict = "met" if (measured[0] >= goal if higher else measured[0] <= goal) else "**not met**"
        unit = "" if against is None else "×"  # a value, or a ratio
        lines.append(f"| {name} | {fmt(measured, 2, unit)} | {'≥' if higher else '≤'} {goal:g}{unit} | {verdict} "
                     f"| `{workload}` c={level}, `{stack}` |")  # fmt: skip
    return [*lines, ""]


def _workload(results: Results, workload: str) -> list[str]:
    """Every stack that ran ``workload``, at every level: rates, latency, CPU, and the same-round ×echo."""
    lifecycle = workload.startswith("lifecycle")
    extra = ("server p50 ms", "server p99 ms", "create p50 ms") if lifecycle else ()
    heads = ("ops/s", "req/s", "×echo req/s", "p50 ms", "p99 ms", *extra, "server CPU µs/req", "+µs over echo",
             "Valkey CPU µs/req", "loader CPU µs/req")  # fmt: skip
    lines = [f"### `{workload}`: {DESCRIPTIONS.get(workload, workload)}", "",
             "| stack | c | " + " | ".join(heads) + " |", "|---|---:|" + "---:|" * len(heads)]  # fmt: skip
    for stack in results.stacks:
        for level in results.levels(stack, workload):
            cells = []
            for head in heads:
                if head == "×echo req/s":
                    cells.append(fmt(results.vs_echo(stack, workload, level, GET["req/s"]), 2))
                elif head == "+µs over echo":
                    cells.append(fmt(results.vs_echo(stack, workload, level, GET["server CPU µs/req"], minus=True), 1))
                else:
                    cells.append(fmt(results.value(stack, workload, level, GET[head]), 0 if "/s" in head else 2))
            lines.append(f"| {stack} | {level} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _pairs(results: Results) -> list[str]:
    lines: list[str] = []
    for title, stack, against, workloads, figures in PAIRS:
        rows = []
        for workload in workloads:
            for level in results.levels(stack, workload):
                if not results.find(against, workload, level):
                    continue
                a, b = (stack, workload, level), (against, workload, level)
                rows += [f"| `{workload}` c={level} | {figure} | {fmt(results.value(*b, get), 2)} "
                         f"| {fmt(results.value(*a, get), 2)} | {fmt(results.paired(a, b, get), 3, '×')} "
                         f"| {fmt(results.paired(a, b, get, minus=True), 2)} |"
                         for figure, get in ((f, GET[f]) for f in figures)]  # fmt: skip
        if rows:
            lines += [f"### {title}", "", f"| step | figure | `{against}` | `{stack}` | ÷ (same round) "
                      "| − (same round) |", "|---|---|---:|---:|---:|---:|", *rows, ""]  # fmt: skip
    return ["## Same-round comparisons", "", *lines] if lines else []


def _store(results: Results) -> list[str]:
    costs: dict[str, Any] = results.meta.get("store_costs") or {}
    if not costs:
        return []
    lines = ["## What one operation costs the store", "",
             "Sequential operations against the running server (`bench.commands`, first round): Valkey commands from "
             "`INFO commandstats` summed over the primaries (commands inside scripts included), Valkey CPU from the "
             "valkey-server processes' schedstat.", "",
             "| stack | operation | commands | of them scripts | of them WAIT | Valkey CPU µs | HTTP requests "
             "| top commands |", "|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for stack, by_operation in costs.items():
        for operation, cost in by_operation.items():
            if isinstance(cost, dict) and "commands" in cost:
                top = ", ".join(f"{name} {n:g}" for name, n in cost.get("top", {}).items())
                lines.append(f"| {stack} | `{operation}` | {cost['commands']:.1f} | {cost.get('scripts', 0):.1f} "
                             f"| {cost.get('waits') or 0:.1f} | {cost['valkey_cpu_us']:.0f} | {cost['requests']:.1f} "
                             f"| {top} |")  # fmt: skip
    idle = ", ".join(f"{stack} {cost.get('idle_commands_per_s', '?')}" for stack, cost in costs.items())
    return [*lines, "", f"Idle background (blocking reads, heartbeats), commands per second: {idle}.", ""]


def _header(results: Results) -> list[str]:
    meta, machine, options = results.meta, results.meta["machine"], results.meta["options"]
    lines = [
        f"# ext-tasks benchmark, {meta['started']}", "",
        f"- Machine: {machine['cpus']} × {machine['cpu']}; {machine['platform']}; {machine['pinning']}.",
        f"- Build: commit {machine['commit']}. Versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}.",
        f"- Method: {options['rounds']} interleaved round(s) (every stack restarted each round, order rotated), "
        f"{options['warmup_s']:g} s warm-up + {options['seconds']:g} s timed per step, closed loop "
        "(`ext_tasks.loadgen`, one keep-alive connection per virtual user c). One-process stacks: server on "
        "CPU 1, loader and Valkey on CPU 0; scaling stacks unpinned. Medians over rounds (min–max); ratios taken "
        "inside a round.",
        f"- `tasks/get` population: {meta['shape']['population']} completed + {meta['shape']['population']} working "
        f"tasks. Wall time: {meta.get('wall_s', '?')} s.",
    ]  # fmt: skip
    foreign = spread(r.get("foreign_cores") for r in results.records)
    if foreign is not None:
        lines.append(f"- Other load during the timed windows: median {foreign[0]:.2f} cores, max {foreign[2]:.2f}.")
    again = sum(1 for r in results.records if r.get("attempt", 1) > 1)
    if again:
        lines.append(f"- {again} step(s) measured again (other jobs on the box); the quieter attempt kept.")
    if meta.get("skipped"):
        lines.append("- Not run: " + "; ".join(f"`{key}`: {why}" for key, why in meta["skipped"].items()) + ".")
    if meta.get("failures"):
        lines.append("- **Failures**: " + "; ".join(meta["failures"]))
    lines += ["", "Stacks:", ""]
    for stack in results.stacks.values():
        env = "".join(f", `{name}={value}`" for name, value in stack.get("env") or ())
        lines.append(f"- `{stack['key']}`: {stack['label']} ({stack['procs']} process(es), {stack['placement']}{env}); "
                     f"×echo against `{stack['baseline'] or '-'}`.")  # fmt: skip
    return [*lines, ""]


def _errors(results: Results) -> list[str]:
    lines = [f"- round {r['round'] + 1}, `{r['stack']}` {r['workload']} c={r['concurrency']}: {r['errors']} errors, "
             f"e.g. {'; '.join(r['error_samples'][:2])}" for r in results.records if r["errors"]]  # fmt: skip
    return ["## Errors (inside the timed windows)", "", *lines, ""] if lines else []


def _plot(results: Results, out: Path) -> str | None:
    """Requests/s by stack at each workload's highest level (needs matplotlib; none without it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    workloads = [w for w in DESCRIPTIONS if any(r["workload"] == w for r in results.records)]
    figure, axes = plt.subplots(len(workloads), 1, figsize=(9, 2.2 * len(workloads)), squeeze=False)
    for axis, workload in zip(axes[:, 0], workloads, strict=True):
        stacks = [s for s in results.stacks if results.levels(s, workload)]
        rates = [
            (results.value(s, workload, results.top(s, workload) or 0, GET["req/s"]) or (0, 0, 0, 0)) for s in stacks
        ]
        axis.barh(stacks, [r[0] for r in rates], xerr=[[r[0] - r[1] for r in rates], [r[2] - r[0] for r in rates]])
        axis.set_title(f"{workload}: requests/s at the highest c (median, min–max)", fontsize=9)
        axis.tick_params(labelsize=7)
    figure.tight_layout()
    figure.savefig(out / "throughput.png", dpi=110)
    plt.close(figure)
    return "throughput.png"


def write_report(out: Path, meta: dict[str, Any], records: list[Record], *, plots: bool = True) -> Path:
    results = Results(meta, records)
    lines = [*_header(results), *_targets(results), "## Per workload", ""]
    for workload in DESCRIPTIONS:
        if any(r["workload"] == workload for r in records):
            lines += _workload(results, workload)
    lines += [*_pairs(results), *_store(results), *_errors(results)]
    picture = _plot(results, out) if plots else None
    if picture is not None:
        lines += [f"![requests/s]({picture})", ""]
    lines.append("Raw records: `results.json` (every step of every round); `+µs over echo` is server CPU per request "
                 "minus the echo's in the same round, what the protocol adds on top of the HTTP stack.")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
