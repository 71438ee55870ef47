# ruff: noqa: RUF001 - the report is typeset: the multiplication sign and en dash are meant
"""The report of one run: ``report.md`` (medians over rounds, same-round ratios, the issue's targets)
and PNG plots (matplotlib), from the records :mod:`bench.run` collected.

A figure is the median over rounds of the per-round value, with the min..max spread. A ratio is
computed *inside* each round (the stack against its echo baseline, or against a peer, measured in that
same round) and then the median of those per-round ratios is shown: the box drifts between rounds, so
only same-round comparisons are meaningful.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .plan import DESCRIPTIONS, MIN_REPLICA_ACKS, OAUTH_STACKS, REPLICA_STACKS

Record = dict[str, Any]

LABELS: Final[dict[str, str]] = {
    "echo-hc": "echo, hypercorn",
    "echo-gr": "echo, granian",
    "echo-hc-box1": "echo, hypercorn, 1 proc (box)",
    "echo-hc-box2": "echo, hypercorn, 2 procs (box)",
    "ext-hc-mem": "ext-tasks, hypercorn, memory",
    "ext-hc-vk": "ext-tasks, hypercorn, Valkey",
    "ext-hc-vkc": "ext-tasks, hypercorn, Valkey Cluster",
    "ext-hc-mem-oauth": "ext-tasks, hypercorn, memory, OAuth",
    "ext-hc-vk-oauth": "ext-tasks, hypercorn, Valkey, OAuth",
    "ext-hc-vkr0": "ext-tasks, Valkey + replica, no WAIT",
    "ext-hc-vkr1": "ext-tasks, Valkey + replica, WAIT 1",
    "ext-gr-mem": "ext-tasks, granian, memory",
    "ext-gr-vk": "ext-tasks, granian, Valkey",
    "sdk": "Python SDK 2.3.0 (uvicorn)",
    "sdk-hc": "Python SDK 2.3.0 (hypercorn)",
    "fastmcp-vk": "FastMCP 4.1.4, Valkey (uvicorn)",
    "ext-hc-vk-box1": "ext-tasks, Valkey, 1 proc (box)",
    "ext-hc-vk-box2": "ext-tasks, Valkey, 2 procs (box)",
}
COLORS: Final[dict[str, str]] = {
    "echo-hc": "#7f7f7f",
    "echo-gr": "#bcbd22",
    "ext-hc-mem": "#1f77b4",
    "ext-hc-vk": "#2ca02c",
    "ext-hc-vkc": "#9467bd",
    "ext-hc-vkr0": "#8c564b",
    "ext-hc-vkr1": "#c49c94",
    "ext-gr-mem": "#17becf",
    "ext-gr-vk": "#98df8a",
    "sdk": "#d62728",
    "sdk-hc": "#e377c2",
    "fastmcp-vk": "#ff7f0e",
    "echo-hc-box1": "#7f7f7f",
    "echo-hc-box2": "#c7c7c7",
    "ext-hc-vk-box1": "#2ca02c",
    "ext-hc-vk-box2": "#98df8a",
}


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 0, unit: str = "") -> str:
        if self.n == 1 or math.isclose(self.low, self.high):
            return f"{self.median:,.{digits}f}{unit}"
        return f"{self.median:,.{digits}f}{unit} ({self.low:,.{digits}f}–{self.high:,.{digits}f})"


def spread(values: Iterable[float | None]) -> Spread | None:
    kept = [value for value in values if value is not None and math.isfinite(value)]
    if not kept:
        return None
    return Spread(statistics.median(kept), min(kept), max(kept), len(kept))


def _fmt(value: Spread | None, digits: int = 0, unit: str = "") -> str:
    return "–" if value is None else value.text(digits, unit)


class Results:
    """Look-ups over the records of one run."""

    def __init__(self, meta: dict[str, Any], records: list[Record]) -> None:
        self.meta = meta
        self.records = records
        self.stacks: dict[str, dict[str, Any]] = {stack["key"]: stack for stack in meta["stacks"]}
        self.rounds = sorted({record["round"] for record in records})

    def find(self, stack: str, workload: str, concurrency: int | None = None) -> list[Record]:
        return [
            r
            for r in self.records
            if r["stack"] == stack
            and r["workload"] == workload
            and (concurrency is None or r["concurrency"] == concurrency)
        ]

    def levels(self, stack: str, workload: str) -> list[int]:
        return sorted({r["concurrency"] for r in self.find(stack, workload)})

    def value(
        self, stack: str, workload: str, concurrency: int, get: Callable[[Record], float | None]
    ) -> Spread | None:
        return spread(get(r) for r in self.find(stack, workload, concurrency))

    def paired(
        self,
        a: tuple[str, str, int],
        b: tuple[str, str, int],
        get_a: Callable[[Record], float | None],
        get_b: Callable[[Record], float | None] | None = None,
        *,
        difference: bool = False,
    ) -> Spread | None:
        """Median over rounds of ``get_a(a) / get_b(b)`` (``difference``: ``get_a(a) - get_b(b)``), both taken
        in the same round."""
        get_b = get_b or get_a
        ratios: list[float | None] = []
        for round_index in self.rounds:
            left = [r for r in self.find(*a) if r["round"] == round_index]
            right = [r for r in self.find(*b) if r["round"] == round_index]
            if left and right:
                x, y = get_a(left[0]), get_b(right[0])
                if x is None or y is None:
                    ratios.append(None)
                else:
                    ratios.append(x - y if difference else (x / y if y else None))
        return spread(ratios)

    def vs_echo(
        self, stack: str, workload: str, concurrency: int, get: Callable[[Record], float | None]
    ) -> Spread | None:
        baseline = self.stacks.get(stack, {}).get("baseline")
        if baseline is None:
            return None
        return self.paired((stack, workload, concurrency), (baseline, "echo", concurrency), get)

    def has(self, stack: str) -> bool:
        return any(r["stack"] == stack for r in self.records)


def rate(record: Record) -> float:
    return float(record["ops_per_s"])


def req_rate(record: Record) -> float:
    return float(record["requests_per_s"])


def p50(record: Record) -> float | None:
    value: float | None = record["latency_ms"]["p50"]
    return value


def p99(record: Record) -> float | None:
    value: float | None = record["latency_ms"]["p99"]
    return value


def mean(record: Record) -> float | None:
    value: float | None = record["latency_ms"]["mean"]
    return value


def create_p50(record: Record) -> float | None:
    latency = record.get("create_latency_ms")
    return None if not latency else latency["p50"]


def server_p50(record: Record) -> float | None:
    latency = record.get("server_latency_ms")
    return None if not latency else latency["p50"]


def server_p99(record: Record) -> float | None:
    latency = record.get("server_latency_ms")
    return None if not latency else latency["p99"]


def cpu_us(record: Record) -> float | None:
    value: float | None = record["server_cpu_us_per_request"]
    return value


def valkey_us(record: Record) -> float | None:
    value: float | None = record["valkey_cpu_us_per_request"]
    return value


def loader_us(record: Record) -> float | None:
    value: float | None = record["loader_cpu_us_per_request"]
    return value


# --- targets --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    measured: Spread | None
    goal: float
    higher_is_better: bool
    unit: str
    how: str

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return "not measured"
        ok = self.measured.median >= self.goal if self.higher_is_better else self.measured.median <= self.goal
        return "**met**" if ok else "**not met**"


def _saturate(results: Results, stack: str, workload: str) -> int | None:
    levels = results.levels(stack, workload)
    return max(levels) if levels else None


def targets(results: Results) -> list[Target]:
    found: list[Target] = []
    c = _saturate(results, "ext-hc-mem", "replay")
    if c is not None:
        found.append(Target(
            "MRTR resumes/s ÷ echo (in-memory, hypercorn, 1 proc)",
            results.vs_echo("ext-hc-mem", "replay", c, req_rate), 0.75, True, "×",
            f"`replay` at c={c} over the Litestar echo at c={c}, same round",
        ))  # fmt: skip
    c_chain = _saturate(results, "ext-hc-mem", "mrtr")
    if c_chain is not None:
        found.append(Target(
            "MRTR requests/s (call + resume chains) ÷ echo (in-memory)",
            results.vs_echo("ext-hc-mem", "mrtr", c_chain, req_rate), 0.75, True, "×",
            f"`mrtr` at c={c_chain}: both requests of each round trip counted",
        ))  # fmt: skip
    if c is not None and results.has("sdk"):
        found.append(Target(
            "MRTR resumes/s ÷ Python SDK 2.3.0 server's (uvicorn + httptools)",
            results.paired(("ext-hc-mem", "replay", c), ("sdk", "replay", c), rate), 4.0, True, "×",
            f"`replay` at c={c}, same round",
        ))  # fmt: skip
    if c is not None and results.has("sdk-hc"):
        found.append(Target(
            "MRTR resumes/s ÷ Python SDK 2.3.0 on hypercorn (same HTTP server)",
            results.paired(("ext-hc-mem", "replay", c), ("sdk-hc", "replay", c), rate), 2.0, True, "×",
            f"`replay` at c={c}, both on hypercorn configured as `ext-tasks serve`, same round",
        ))  # fmt: skip
    if c_chain is not None and results.has("sdk"):
        found.append(Target(
            "MRTR round trips/s ÷ Python SDK 2.3.0 server's (uvicorn + httptools)",
            results.paired(("ext-hc-mem", "mrtr", c_chain), ("sdk", "mrtr", c_chain), rate), 4.0, True, "×",
            f"`mrtr` at c={c_chain}, same round",
        ))  # fmt: skip
    c_gr = _saturate(results, "ext-gr-mem", "replay")
    if c_gr is not None and results.has("sdk") and results.find("sdk", "replay", c_gr):
        found.append(Target(
            "(reference) MRTR resumes/s on granian ÷ Python SDK's on uvicorn+httptools",
            results.paired(("ext-gr-mem", "replay", c_gr), ("sdk", "replay", c_gr), rate), 4.0, True, "×",
            f"`replay` at c={c_gr}: both on a compiled HTTP parser, same round",
        ))  # fmt: skip
    c = _saturate(results, "ext-hc-vk", "tasks_get")
    if c is not None:
        found.append(Target(
            "`tasks/get`/s with Valkey ÷ echo", results.vs_echo("ext-hc-vk", "tasks_get", c, rate), 0.60, True, "×",
            f"`tasks_get` at c={c}, hypercorn, 1 proc",
        ))  # fmt: skip
        if results.has("fastmcp-vk"):
            found.append(Target(
                "`tasks/get`/s with Valkey ÷ FastMCP 4's",
                results.paired(("ext-hc-vk", "tasks_get", c), ("fastmcp-vk", "tasks_get", c), rate), 4.0, True, "×",
                f"`tasks_get` at c={c}, both on Valkey, same round",
            ))  # fmt: skip
    c_gr = _saturate(results, "ext-gr-vk", "tasks_get")
    if c_gr is not None and results.has("fastmcp-vk") and results.find("fastmcp-vk", "tasks_get", c_gr):
        found.append(Target(
            "(reference) `tasks/get`/s on granian + Valkey ÷ FastMCP 4's on uvicorn+httptools",
            results.paired(("ext-gr-vk", "tasks_get", c_gr), ("fastmcp-vk", "tasks_get", c_gr), rate), 4.0, True,
            "×", f"`tasks_get` at c={c_gr}, same round",
        ))  # fmt: skip
    if results.find("ext-hc-vk", "lifecycle", 1):
        found.append(Target(
            "create → complete p50, Valkey (server: `lastUpdatedAt − createdAt`)",
            results.value("ext-hc-vk", "lifecycle", 1, server_p50), 5.0, False, " ms",
            "`lifecycle` at c=1, instant tool body; ms resolution of the task timestamps",
        ))  # fmt: skip
        found.append(Target(
            "create → complete p50, Valkey (client: call sent → `completed` seen)",
            results.value("ext-hc-vk", "lifecycle", 1, p50), 5.0, False, " ms",
            "`lifecycle` at c=1, includes the create reply and 1 ms poll pauses",
        ))  # fmt: skip
    found += _store_targets(results)
    c = _saturate(results, "ext-hc-vk-box2", "tasks_get")
    if c is not None:
        found.append(Target(
            "2 processes ÷ 1 process, `tasks/get`/s (Valkey, whole box)",
            results.paired(("ext-hc-vk-box2", "tasks_get", c), ("ext-hc-vk-box1", "tasks_get", c), rate), 1.8, True,
            "×", f"`tasks_get` at c={c}, unpinned, loader and Valkey on the same 2 cores",
        ))  # fmt: skip
    return found


STORE_STACKS: Final = {"ext-hc-vk": "one Valkey", "ext-hc-vkc": "Valkey Cluster, 3 primaries"}


def _store_cost(results: Results, stack: str, operation: str, field: str) -> Spread | None:
    cost = results.meta.get("store_costs", {}).get(stack, {}).get(operation)
    return spread([cost[field]]) if cost else None


def _store_targets(results: Results) -> list[Target]:
    """Issue 14: Valkey commands per task, and the lifecycle's throughput on Valkey."""
    found: list[Target] = []
    for stack, where in STORE_STACKS.items():
        for operation, goal in (("lifecycle", 20.0), ("lifecycle_input", 35.0)):
            measured = _store_cost(results, stack, operation, "commands")
            if measured is not None:
                found.append(Target(
                    f"Valkey commands per `{operation}` ({where})", measured, goal, False, "",
                    f"`INFO commandstats` over {results.meta['store_costs'][stack][operation]['operations']} "
                    "sequential operations, commands inside scripts included (section 7)",
                ))  # fmt: skip
    if results.find("ext-hc-vk", "lifecycle", 16):
        found.append(Target(
            "Task lifecycle requests/s on Valkey ÷ echo", results.vs_echo("ext-hc-vk", "lifecycle", 16, req_rate),
            0.55, True, "×", "`lifecycle` at c=16 (create + polls), hypercorn, 1 proc, same round",
        ))  # fmt: skip
    return found


def _store_section(results: Results) -> list[str]:
    if not results.meta.get("store_costs"):
        return []
    return [
        "## 7. What one task costs the store", "",
        "Per operation, over sequential operations against the running server (`bench.commands`, first round): "
        "Valkey commands from `INFO commandstats` summed over the primaries (commands run inside scripts included, "
        "so a script of 5 writes counts 6), Valkey CPU from the valkey-server processes' schedstat. `lifecycle` "
        "polls every millisecond until `completed`, so its polls are in it (the HTTP requests column).", "",
        *_store_cost_table(results), "",
    ]  # fmt: skip


def _store_cost_table(results: Results) -> list[str]:
    costs: dict[str, Any] = results.meta.get("store_costs", {})
    lines = [
        "| stack | operation | Valkey commands | of them scripts | of them WAIT | Valkey CPU µs | HTTP requests "
        "| top commands |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for stack, by_operation in costs.items():
        for operation in ("lifecycle", "lifecycle_input", "tasks_get"):
            cost = by_operation.get(operation)
            if cost is None:
                continue
            top = ", ".join(f"{name} {n:g}" for name, n in cost["top"].items())
            lines.append(
                f"| {_label(stack)} | `{operation}` | {cost['commands']:.1f} | {cost['scripts']:.1f} "
                f"| {_fmt(spread([cost.get('waits')]), 1)} | {cost['valkey_cpu_us']:.0f} | {cost['requests']:.1f} "
                f"| {top} |"
            )
    idle = ", ".join(f"{_label(stack)} {c['idle_commands_per_s']}" for stack, c in costs.items())
    return [*lines, "", f"Idle background (workers' blocking reads, heartbeats), commands per second: {idle}."]


def _per_task(record: Record) -> float | None:
    return record["requests"] / record["ops"] if record["ops"] else None


def _env(results: Results, stack: str) -> dict[str, str]:
    """The extra environment a stack's servers ran with (``Stack.env``, pairs in results.json)."""
    env: dict[str, str] = dict(results.stacks.get(stack, {}).get("env") or ())
    return env


def _replica_section(results: Results) -> list[str]:
    """No WAIT against WAIT 1 on the same primary + replica: what a replica's acknowledgement costs."""
    r0, r1 = REPLICA_STACKS
    if not (results.has(r0) and results.has(r1)):
        return []
    acks = [_env(results, key).get(MIN_REPLICA_ACKS, "?") for key in (r0, r1)]
    lines = [
        "## 8. Replica acknowledgement (`WAIT`)", "",
        f"`{r0}` and `{r1}`: ext-tasks on hypercorn over a Valkey primary with one replica (diskless sync; both "
        f"valkey-servers pinned with the loader), with `{MIN_REPLICA_ACKS}={acks[0]}` and `={acks[1]}`: with N ≥ 1 "
        "every task creation, every claim on a run and every transition commit is followed by `WAIT N <timeout>` "
        "before the client (or the worker) goes on. r1 ÷ r0 and r1 − r0 are taken inside each round, then their "
        "median is shown: the ratio is the "
        "cost (above 1× for latency, below 1× for throughput). `tasks/get` reads only: the control. At c=1 the "
        "create → complete latency can *fall* with `WAIT`: a later create reply finds the instant task done at the "
        "first poll more often, saving a 1 ms poll pause (fewer requests per task); the create reply's own latency "
        "(`tools/call` sent → `CreateTaskResult` read, the creation's `WAIT` in it) is the undiluted figure.", "",
        f"| figure | {_label(r0)} | {_label(r1)} | r1 ÷ r0 (same round) | r1 − r0 (same round) |",
        "|---|---:|---:|---:|---:|",
    ]  # fmt: skip
    rows: list[tuple[str, str, int | None, Callable[[Record], float | None], int]] = []
    life = results.levels(r0, "lifecycle")
    if life:
        low, high = min(life), max(life)
        rows += [
            (f"`lifecycle` client p50 ms, c={low}", "lifecycle", low, p50, 2),
            (f"`lifecycle` server p50 ms, c={low}", "lifecycle", low, server_p50, 1),
            (f"`lifecycle` client p99 ms, c={low}", "lifecycle", low, p99, 2),
            # The mean: p50 moves by a whole poll pause (1 ms) when the median task needs one poll more.
            (f"`lifecycle` client mean ms, c={low}", "lifecycle", low, mean, 2),
            (f"`lifecycle` requests per task, c={low}", "lifecycle", low, _per_task, 2),
            (f"`lifecycle` create reply p50 ms, c={low}", "lifecycle", low, create_p50, 3),
            (f"`lifecycle` HTTP requests/s, c={high}", "lifecycle", high, req_rate, 0),
            (f"`lifecycle` tasks/s, c={high}", "lifecycle", high, rate, 0),
        ]
    polled = _saturate(results, r0, "tasks_get")
    rows.append((f"`tasks/get` requests/s, c={polled}", "tasks_get", polled, req_rate, 0))
    for name, workload, level, get, digits in rows:
        if level is None:
            continue
        a, b = (r1, workload, level), (r0, workload, level)
        lines.append(
            f"| {name} | {_fmt(results.value(r0, workload, level, get), digits)} "
            f"| {_fmt(results.value(r1, workload, level, get), digits)} | {_fmt(results.paired(a, b, get), 2, '×')} "
            f"| {_fmt(results.paired(a, b, get, difference=True), digits)} |"
        )
    for field, name, digits in (("commands", "Valkey commands", 1), ("waits", "of them WAIT", 1),
                                ("valkey_cpu_us", "Valkey CPU µs (primary + replica)", 0)):  # fmt: skip
        zero, one = _store_cost(results, r0, "lifecycle", field), _store_cost(results, r1, "lifecycle", field)
        if zero is None and one is None:
            continue
        ratio = spread([one.median / zero.median]) if zero and one and zero.median else None
        delta = spread([one.median - zero.median]) if zero and one else None
        lines.append(f"| {name} per `lifecycle` (sequential, `bench.commands`) | {_fmt(zero, digits)} "
                     f"| {_fmt(one, digits)} | {_fmt(ratio, 2, '×')} | {_fmt(delta, digits)} |")  # fmt: skip
    waits = _store_cost(results, r1, "lifecycle", "waits")
    if waits is not None and waits.median == 0:
        lines += ["", f"**`{r1}` issued no `WAIT`**: this build of the server ignores `{MIN_REPLICA_ACKS}`, so both "
                  "stacks ran the same code and the ratios measure noise only."]  # fmt: skip
    return [*lines, ""]


#: The goal of the issue: with OAuth on, resumes and tasks/get keep this share of their throughput.
OAUTH_GOAL: Final = 0.95


def _oauth_section(results: Results) -> list[str]:
    """OAuth on ÷ off, for replay and tasks/get requests/s, each ratio taken inside a round."""
    pairs = [(on, off) for on, off in OAUTH_STACKS.items() if results.has(on) and results.has(off)]
    if not pairs:
        return []
    lines = [
        "## 9. OAuth on ÷ off", "",
        "The same server with the OAuth resource server on (`EXT_TASKS_AUTH_ISSUERS`: a local issuer, "
        "`bench.issuer`, pinned with the loader; RS256 keys generated per run; `EXT_TASKS_AUTH_SCOPES` required) "
        "and the loader sending one long-lived JWT on every request: after the first request each one is a "
        "token-cache hit (SHA-256 and a dict lookup), not a signature check (that cost is `python -m "
        f"investigations.auth_cost`'s). Goal: on ÷ off ≥ {OAUTH_GOAL:g}× for resumes (`replay`) and `tasks/get`, "
        "requests/s, the ratio taken inside each round (median, min–max; then each round's).", "",
        "| store | workload | c | off req/s | on req/s | on ÷ off (same round) | per round | server CPU µs/req "
        "on − off | goal | verdict |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]  # fmt: skip
    for on, off in pairs:
        store = results.stacks[on].get("store") or "?"
        for workload in ("replay", "tasks_get"):
            level = _saturate(results, on, workload)
            if level is None or not results.find(off, workload, level):
                continue
            a, b = (on, workload, level), (off, workload, level)
            ratio = results.paired(a, b, req_rate)
            rounds = []
            for round_index in results.rounds:
                x = [r for r in results.find(*a) if r["round"] == round_index]
                y = [r for r in results.find(*b) if r["round"] == round_index]
                if x and y and req_rate(y[0]):
                    rounds.append(f"{req_rate(x[0]) / req_rate(y[0]):.3f}")
            verdict = "–" if ratio is None else ("met" if ratio.median >= OAUTH_GOAL else "**not met**")
            lines.append(
                f"| {store} | `{workload}` | {level} | {_fmt(results.value(off, workload, level, req_rate))} "
                f"| {_fmt(results.value(on, workload, level, req_rate))} | {_fmt(ratio, 3, '×')} "
                f"| {', '.join(rounds) or '–'} | {_fmt(results.paired(a, b, cpu_us, difference=True), 1)} "
                f"| ≥ {OAUTH_GOAL:g}× | {verdict} |"
            )
    return [*lines, ""]


# --- tables ---------------------------------------------------------------------------------------


def _label(key: str) -> str:
    return LABELS.get(key, key)


def _stacks_with(results: Results, workload: str) -> list[str]:
    return [key for key in results.stacks if results.find(key, workload)]


def _throughput_table(results: Results, workload: str, unit: str) -> list[str]:
    lines = [
        f"| stack | c | {unit} | HTTP req/s | ×echo (req/s) | p50 ms | p99 ms | p50 ×echo | server CPU µs/req "
        "| +µs over echo | Valkey µs/req | loader µs/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in _stacks_with(results, workload):
        baseline = results.stacks[key].get("baseline")
        for level in results.levels(key, workload):
            delta = None
            if baseline is not None:
                deltas = []
                for round_index in results.rounds:
                    mine = [r for r in results.find(key, workload, level) if r["round"] == round_index]
                    echo = [r for r in results.find(baseline, "echo", level) if r["round"] == round_index]
                    if mine and echo and cpu_us(mine[0]) is not None and cpu_us(echo[0]) is not None:
                        deltas.append(
                            float(mine[0]["server_cpu_us_per_request"] - echo[0]["server_cpu_us_per_request"])
                        )
                delta = spread(deltas)
            lines.append(
                f"| {_label(key)} | {level} | {_fmt(results.value(key, workload, level, rate))} "
                f"| {_fmt(results.value(key, workload, level, req_rate))} "
                f"| {_fmt(results.vs_echo(key, workload, level, req_rate), 2)} "
                f"| {_fmt(results.value(key, workload, level, p50), 2)} "
                f"| {_fmt(results.value(key, workload, level, p99), 2)} "
                f"| {_fmt(results.vs_echo(key, workload, level, p50), 2)} "
                f"| {_fmt(results.value(key, workload, level, cpu_us))} | {_fmt(delta)} "
                f"| {_fmt(results.value(key, workload, level, valkey_us))} "
                f"| {_fmt(results.value(key, workload, level, loader_us))} |"
            )
    return lines


#: The SDK peer's stacks, in the order of the peer table's columns.
SDK_PEERS: Final = (("sdk", "SDK on uvicorn"), ("sdk-hc", "SDK on hypercorn"))


def _sdk_table(results: Results, ours: str = "ext-hc-mem") -> list[str]:
    """ext-tasks (hypercorn, in-memory) against each SDK stack, every ratio taken inside a round."""
    peers = [(key, name) for key, name in SDK_PEERS if results.has(key)]
    if not results.has(ours) or not peers:
        return []
    head = f"| workload | c | {_label(ours)} | " + " | ".join(name for _, name in peers)
    head += " | " + " | ".join(f"ours ÷ {name}" for _, name in peers)
    both = len(peers) == 2
    if both:
        head += " | SDK hypercorn ÷ uvicorn"
    lines = [head + " |", "|---|---:|" + "---:|" * (1 + 2 * len(peers) + both)]
    for workload in ("mrtr", "replay"):
        for level in results.levels(ours, workload):
            if not any(results.find(key, workload, level) for key, _ in peers):
                continue
            cells = [_fmt(results.value(ours, workload, level, rate))]
            cells += [_fmt(results.value(key, workload, level, rate)) for key, _ in peers]
            cells += [
                _fmt(results.paired((ours, workload, level), (key, workload, level), rate), 2, "×") for key, _ in peers
            ]
            if both:
                cells.append(_fmt(results.paired(("sdk-hc", workload, level), ("sdk", workload, level), rate), 2, "×"))
            lines.append(f"| {workload} | {level} | " + " | ".join(cells) + " |")
    return lines


def _sdk_section(results: Results, workloads: Sequence[str]) -> list[str]:
    """The SDK peer table, under the MRTR section (nothing elsewhere, or without an SDK stack)."""
    table = _sdk_table(results) if "mrtr" in workloads else []
    if not table:
        return []
    servers = {"sdk": "on uvicorn (uvloop, httptools: its own default)",
               "sdk-hc": "on hypercorn configured as `ext-tasks serve` (the same HTTP server as ours)"}  # fmt: skip
    on = " and ".join(text for key, text in servers.items() if results.has(key))
    return [f"**Against the Python SDK 2.3.0 server**, {on}: round trips/s (`mrtr`) and resumes/s (`replay`); "
            "each ratio is taken inside a round, then its median is shown.", "", *table, ""]  # fmt: skip


def _lifecycle_table(results: Results) -> list[str]:
    lines = [
        "| stack | variant | c | tasks/s | HTTP req/s | req per task | client p50 ms | client p99 ms "
        "| server p50 ms | server p99 ms | ×echo (req/s) | server CPU µs/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for workload, variant in (("lifecycle", "instant"), ("lifecycle_input", "with input_required")):
        for key in _stacks_with(results, workload):
            for level in results.levels(key, workload):
                per_task = results.value(key, workload, level, _per_task)
                lines.append(
                    f"| {_label(key)} | {variant} | {level} | {_fmt(results.value(key, workload, level, rate))} "
                    f"| {_fmt(results.value(key, workload, level, req_rate))} | {_fmt(per_task, 1)} "
                    f"| {_fmt(results.value(key, workload, level, p50), 2)} "
                    f"| {_fmt(results.value(key, workload, level, p99), 2)} "
                    f"| {_fmt(results.value(key, workload, level, server_p50), 1)} "
                    f"| {_fmt(results.value(key, workload, level, server_p99), 1)} "
                    f"| {_fmt(results.vs_echo(key, workload, level, req_rate), 2)} "
                    f"| {_fmt(results.value(key, workload, level, cpu_us))} |"
                )
    return lines


def _scaling_table(results: Results) -> list[str]:
    lines = [
        "| workload | c | 1 process | 2 processes | 2 ÷ 1 (same round) | 1 proc ×echo | 2 procs ×echo |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    pairs = [("echo", "echo-hc-box1", "echo-hc-box2")] + [
        (workload, "ext-hc-vk-box1", "ext-hc-vk-box2") for workload in ("replay", "lifecycle", "tasks_get")
    ]
    for workload, one, two in pairs:
        for level in results.levels(one, workload):
            lines.append(
                f"| {workload} | {level} | {_fmt(results.value(one, workload, level, rate))} "
                f"| {_fmt(results.value(two, workload, level, rate))} "
                f"| {_fmt(results.paired((two, workload, level), (one, workload, level), rate), 2)} "
                f"| {_fmt(results.vs_echo(one, workload, level, req_rate), 2)} "
                f"| {_fmt(results.vs_echo(two, workload, level, req_rate), 2)} |"
            )
    return lines


def _server_table(results: Results) -> list[str]:
    lines = [
        "| workload | c | hypercorn | granian | granian ÷ hypercorn (same round) |",
        "|---|---:|---:|---:|---:|",
    ]
    rows = [
        ("echo", "echo-hc", "echo-gr"),
        ("mrtr", "ext-hc-mem", "ext-gr-mem"),
        ("replay", "ext-hc-mem", "ext-gr-mem"),
        ("tasks_get", "ext-hc-mem", "ext-gr-mem"),
        ("replay", "ext-hc-vk", "ext-gr-vk"),
        ("lifecycle", "ext-hc-vk", "ext-gr-vk"),
        ("tasks_get", "ext-hc-vk", "ext-gr-vk"),
    ]
    for workload, hyper, gran in rows:
        for level in results.levels(gran, workload):
            if not results.find(hyper, workload, level):
                continue
            store = "" if workload == "echo" else (" (Valkey)" if hyper.endswith("vk") else " (memory)")
            lines.append(
                f"| {workload}{store} | {level} | {_fmt(results.value(hyper, workload, level, rate))} "
                f"| {_fmt(results.value(gran, workload, level, rate))} "
                f"| {_fmt(results.paired((gran, workload, level), (hyper, workload, level), rate), 2)} |"
            )
    return lines


def _loader_table(results: Results) -> list[str]:
    lines = [
        "| loader | stack | c | req/s | loader CPU µs/req | loader cores busy |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for workload, name in (("echo", "bench.loadgen (Python, asyncio+uvloop)"), ("echo_wrk", "wrk (C, 1 thread)")):
        for key in _stacks_with(results, workload):
            if results.stacks[key]["group"] != "main":
                continue
            for level in results.levels(key, workload):
                busy = spread(
                    (r["loader_cpu_us_per_request"] or 0) * r["requests_per_s"] / 1e6
                    if r["loader_cpu_us_per_request"] is not None
                    else None
                    for r in results.find(key, workload, level)
                )
                lines.append(
                    f"| {name} | {_label(key)} | {level} | {_fmt(results.value(key, workload, level, req_rate))} "
                    f"| {_fmt(results.value(key, workload, level, loader_us))} | {_fmt(busy, 2)} |"
                )
    return lines


# --- plots ----------------------------------------------------------------------------------------


def _plots(results: Results, out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[tuple[str, str]] = []

    def save(fig: Any, name: str, caption: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append((name, caption))

    for draw in (_plot_mrtr, _plot_throughput, _plot_lifecycle, _plot_scaling, _plot_targets):
        draw(results, plt, save)
    return made


Save = Callable[[Any, str, str], None]


def _plot_mrtr(results: Results, plt: Any, save: Save) -> None:
    # 1. MRTR chains: HTTP requests/s and resume latency against concurrency.
    mrtr_stacks = _stacks_with(results, "mrtr")
    if mrtr_stacks:
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
        for key in mrtr_stacks:
            levels = results.levels(key, "mrtr")
            values = [results.value(key, "mrtr", level, req_rate) for level in levels]
            _line(left, levels, values, key, "-o")
            for get, style in ((p50, "-o"), (p99, ":^")):
                lat = [results.value(key, "mrtr", level, get) for level in levels]
                _line(right, levels, lat, key, style, suffix=" p50" if get is p50 else " p99")
        for echo in ("echo-hc", "echo-gr"):
            levels = results.levels(echo, "echo")
            if levels:
                _line(left, levels, [results.value(echo, "echo", level, req_rate) for level in levels], echo, "--s")
        left.set_title("MRTR: HTTP requests/s (2 per round trip) vs echo")
        left.set_xlabel("concurrent connections")
        left.set_ylabel("requests/s (median over rounds)")
        left.set_xscale("log", base=2)
        right.set_title("MRTR resume latency (the retry)")
        right.set_xlabel("concurrent connections")
        right.set_ylabel("ms")
        right.set_xscale("log", base=2)
        right.set_yscale("log")
        left.legend(fontsize=7)
        right.legend(fontsize=6, ncol=2)
        save(
            fig, "mrtr.png", "MRTR round trips: requests/s and resume latency against concurrency, with the echo floor"
        )


def _plot_throughput(results: Results, plt: Any, save: Save) -> None:
    # 2. Saturated throughput per stack: resumes/s and tasks/get per second, against the echo floor.
    panels = [(w, _stacks_with(results, w)) for w in ("replay", "tasks_get")]
    panels = [(w, keys) for w, keys in panels if keys]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
        for axis, (workload, keys) in zip(axes[0], panels, strict=True):
            keys = [key for key in keys if results.stacks[key]["group"] == "main"]
            if not keys:
                continue
            level = max(results.levels(keys[0], workload))
            baselines = dict.fromkeys(results.stacks[k]["baseline"] for k in keys if results.stacks[k]["baseline"])
            names, values, errors, notes = [], [], [], []
            for key in [*baselines, *keys]:
                source = "echo" if key.startswith("echo") else workload
                if level not in results.levels(key, source):
                    continue
                value = results.value(key, source, level, rate)
                if value is None:
                    continue
                ratio = None if source == "echo" else results.vs_echo(key, workload, level, req_rate)
                names.append(_label(key))
                values.append(value.median)
                errors.append((value.median - value.low, value.high - value.median))
                notes.append("" if ratio is None else f"{ratio.median:.2f}× echo")
            colors = [COLORS.get(_key_of(name), "#888888") for name in names]
            bars = axis.barh(names, values, xerr=list(zip(*errors, strict=True)) if errors else None, color=colors)
            for bar, note in zip(bars, notes, strict=True):
                axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f"  {note}", va="center", fontsize=8)
            axis.invert_yaxis()
            axis.set_title(f"{workload}: ops/s at c={level} (echo: requests/s)")
            axis.set_xlabel("per second (median, min–max)")
            axis.margins(x=0.25)
        save(fig, "throughput.png", "Saturated throughput per stack against the same-round echo floor")


def _plot_lifecycle(results: Results, plt: Any, save: Save) -> None:
    # 3. Lifecycle latency.
    life = [(w, k) for w in ("lifecycle", "lifecycle_input") for k in _stacks_with(results, w)
            if results.stacks[k]["group"] == "main"]  # fmt: skip
    if life:
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
        names, client50, client99, server50 = [], [], [], []
        tput_names, tput = [], []
        for workload, key in life:
            tag = "instant" if workload == "lifecycle" else "+input"
            levels = results.levels(key, workload)
            low, high = min(levels), max(levels)
            names.append(f"{_label(key)}\n{tag}, c={low}")
            client50.append(_median(results.value(key, workload, low, p50)))
            client99.append(_median(results.value(key, workload, low, p99)))
            server50.append(_median(results.value(key, workload, low, server_p50)))
            tput_names.append(f"{_label(key)}\n{tag}, c={high}")
            tput.append(_median(results.value(key, workload, high, rate)))
        positions = list(range(len(names)))
        width = 0.27
        left.barh([p - width for p in positions], server50, height=width, label="server p50", color="#2ca02c")
        left.barh(positions, client50, height=width, label="client p50", color="#1f77b4")
        left.barh([p + width for p in positions], client99, height=width, label="client p99", color="#aec7e8")
        left.set_yticks(positions, names, fontsize=7)
        left.invert_yaxis()
        left.axvline(5.0, color="red", linestyle="--", linewidth=1, label="5 ms target")
        left.set_xscale("log")
        left.set_xlabel("create → complete, ms (log)")
        left.set_title("Task lifecycle latency (lowest concurrency)")
        left.legend(fontsize=7)
        right.barh(tput_names, tput, color="#9467bd")
        right.invert_yaxis()
        right.tick_params(axis="y", labelsize=7)
        right.set_xlabel("tasks completed per second (median)")
        right.set_title("Task lifecycle throughput (highest concurrency)")
        save(fig, "lifecycle.png", "Task create → complete: latency at c=1 and throughput under load")


def _plot_scaling(results: Results, plt: Any, save: Save) -> None:
    # 4. Scaling.
    scale_rows = [("echo", "echo-hc-box1", "echo-hc-box2")] + [
        (workload, "ext-hc-vk-box1", "ext-hc-vk-box2") for workload in ("replay", "lifecycle", "tasks_get")
    ]
    scale = [(w, one, two, max(results.levels(one, w))) for w, one, two in scale_rows if results.levels(one, w)]
    if scale:
        fig, axis = plt.subplots(figsize=(8, 4.4))
        positions = list(range(len(scale)))
        ones = [_median(results.value(one, w, level, rate)) for w, one, _, level in scale]
        twos = [_median(results.value(two, w, level, rate)) for w, _, two, level in scale]
        axis.bar([p - 0.2 for p in positions], ones, width=0.4, label="1 process", color="#2ca02c")
        bars = axis.bar([p + 0.2 for p in positions], twos, width=0.4, label="2 processes", color="#98df8a")
        for bar, (w, one, two, level) in zip(bars, scale, strict=True):
            ratio = results.paired((two, w, level), (one, w, level), rate)
            if ratio is not None:
                axis.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{ratio.median:.2f}×",
                          ha="center", va="bottom", fontsize=8)  # fmt: skip
        axis.set_xticks(positions, [f"{w}\nc={level}" for w, _, _, level in scale])
        axis.set_ylabel("ops/s (median)")
        axis.set_title("Scaling on Valkey: 1 vs 2 server processes (whole box, unpinned)")
        axis.legend()
        save(fig, "scaling.png", "1 vs 2 server processes sharing Valkey, whole box")


def _plot_targets(results: Results, plt: Any, save: Save) -> None:
    # 5. Targets.
    found = [t for t in targets(results) if t.measured is not None and t.unit == "×"]
    if found:
        fig, axis = plt.subplots(figsize=(9, 0.55 * len(found) + 1.4))
        names = [t.name.replace("`", "") for t in found]
        values = [t.measured.median for t in found if t.measured is not None]
        goals = [t.goal for t in found]
        colors = ["#2ca02c" if v >= g else "#d62728" for v, g in zip(values, goals, strict=True)]
        axis.barh(names, values, color=colors)
        axis.scatter(goals, names, marker="|", s=400, color="black", label="target", zorder=3)
        for index, value in enumerate(values):
            axis.text(value, index, f" {value:.2f}×", va="center", fontsize=8)
        axis.invert_yaxis()
        axis.tick_params(axis="y", labelsize=7)
        axis.set_xlabel("same-round ratio (median over rounds)")
        axis.set_title("Ratios against the issue's targets")
        axis.legend(fontsize=7)
        axis.margins(x=0.15)
        save(fig, "targets.png", "Measured ratios (bars) against the issue's targets (black marks)")


def _key_of(label: str) -> str:
    for key, text in LABELS.items():
        if text == label:
            return key
    return label


def _median(value: Spread | None) -> float:
    return float("nan") if value is None else value.median


def _line(
    axis: Any, xs: Sequence[int], values: Sequence[Spread | None], key: str, style: str, suffix: str = ""
) -> None:
    points = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
    if not points:
        return
    axis.errorbar(
        [x for x, _ in points],
        [v.median for _, v in points],
        yerr=[[v.median - v.low for _, v in points], [v.high - v.median for _, v in points]],
        fmt=style,
        color=COLORS.get(key),
        label=_label(key) + suffix,
        capsize=3,
        markersize=4,
    )


# --- the report -----------------------------------------------------------------------------------


def write_report(out: Path, meta: dict[str, Any], records: list[Record], *, plots: bool = True) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    results = Results(meta, records)
    made = _plots(results, out) if plots and records else []
    lines = _header(results)
    lines += ["## Targets (issue 5)", "", "| target | measured (median, min–max over rounds) | goal | verdict | how |",
              "|---|---:|---:|---|---|"]  # fmt: skip
    for target in targets(results):
        goal = f"{'≥' if target.higher_is_better else '≤'} {target.goal:g}{target.unit}"
        lines.append(
            f"| {target.name} | {_fmt(target.measured, 2, target.unit)} | {goal} | {target.verdict} | {target.how} |"
        )
    lines.append("")
    if any(name == "targets.png" for name, _ in made):
        lines += ["![targets](targets.png)", ""]
    sections = [
        ("1. MRTR resume", ["mrtr", "replay"], "mrtr.png"),
        ("2. Task polling: `tasks/get`", ["tasks_get"], "throughput.png"),
    ]
    for title, workloads, plot in sections:
        lines += [f"## {title}", ""]
        for workload in workloads:
            if not any(r["workload"] == workload and results.stacks[r["stack"]]["group"] == "main" for r in records):
                continue
            unit = {"mrtr": "round trips/s", "replay": "resumes/s", "tasks_get": "tasks/get/s"}[workload]
            lines += [f"**{workload}**: {DESCRIPTIONS[workload]}.", ""]
            table = _throughput_table(results, workload, unit)
            lines += [row for row in table if "(box)" not in row] + [""]
        lines += _sdk_section(results, workloads)
        if any(name == plot for name, _ in made):
            lines += [f"![{plot}]({plot})", ""]
    if any(r["workload"].startswith("lifecycle") for r in records):
        lines += ["## 3. Task lifecycle", "", DESCRIPTIONS["lifecycle"] + "; " + DESCRIPTIONS["lifecycle_input"] + ".",
                  "Client latency: from sending the `tools/call` to reading the terminal `tasks/get` (polled every "
                  f"{meta.get('poll_ms', 1):g} ms). Server latency: the task's own `lastUpdatedAt − createdAt` "
                  "(millisecond timestamps), which excludes the client's polling.", ""]  # fmt: skip
        lines += [row for row in _lifecycle_table(results) if "(box)" not in row] + [""]
        if any(name == "lifecycle.png" for name, _ in made):
            lines += ["![lifecycle](lifecycle.png)", ""]
    if any(results.stacks[r["stack"]]["group"] == "scaling" for r in records):
        lines += ["## 4. Scaling: 1 and 2 server processes sharing Valkey", "",
                  "Unpinned (\"whole box\"): the servers, the loader and valkey-server share the 2 cores, so 2 "
                  "processes cannot reach 2× unless the loader and Valkey cost nothing. Each side has its own echo "
                  "baseline with the same placement.", ""]  # fmt: skip
        lines += [*_scaling_table(results), ""]
        if any(name == "scaling.png" for name, _ in made):
            lines += ["![scaling](scaling.png)", ""]
    if results.has("echo-gr"):
        lines += ["## 5. Another ASGI server: granian (reference point)", "",
                  "The same app factory (`ext_tasks.cli:app_from_env`) served by granian "
                  f"{meta['versions'].get('granian', '?')} (`--interface asgi --loop uvloop`, 1 worker), pinned like "
                  "hypercorn.", ""]  # fmt: skip
        lines += [*_server_table(results), ""]
    lines += _store_section(results)
    lines += _replica_section(results)
    lines += _oauth_section(results)
    lines += ["## 6. The loader's own cost", "",
              "Every stack is driven by `bench.loadgen` (one process, pinned to the other CPU). Its CPU per request "
              "is listed in every table; here against wrk on the echo endpoint, same round.", ""]  # fmt: skip
    lines += [*_loader_table(results), ""]
    lines += _footer(results) + _links(out)
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def _header(results: Results) -> list[str]:
    meta = results.meta
    machine = meta["machine"]
    options = meta["options"]
    versions = ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
    lines = [
        f"# ext-tasks benchmark, {meta['started']}",
        "",
        f"- Machine: {machine['cpus']} × {machine['cpu']}; {machine['platform']}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in machine['load_average_at_start'])}.",
        f"- Build: commit {machine['commit']}. Versions: {versions}.",
        f"- Method: {options['rounds']} interleaved round(s) (every stack restarted each round, order rotated), "
        f"{options['warmup_s']:g} s warm-up + {options['seconds']:g} s timed per step; closed-loop load from "
        "`bench.loadgen` in its own process, one keep-alive HTTP/1.1 connection per virtual user (c). "
        "Figures are medians over rounds (min–max in brackets); every ratio is taken inside a round, "
        "then its median is shown.",
        "- Placement: one-process stacks run the server under `taskset -c 1`, the loader and valkey-server "
        "under `taskset -c 0`; the scaling stacks run unpinned (whole box). "
        f"{machine['pinning']}.",
        f"- Population for `tasks/get`: {meta['shape']['population']} completed + "
        f"{meta['shape']['population']} working tasks, polled round robin.",
        f"- Wall time: {meta.get('wall_s', '?')} s.",
    ]
    foreign = spread(r.get("foreign_cores") for r in results.records)
    if foreign is not None:
        lines.append(
            f"- Other load on the box during the timed windows (CPU not used by the step's server, Valkey or "
            f"loader): median {foreign.median:.2f} cores, max {foreign.high:.2f} (of {machine['cpus']})."
        )
    again = sum(1 for r in results.records if r.get("attempt", 1) > 1)
    if again:
        lines.append(
            f"- {again} step(s) were measured again because other jobs used more than "
            f"{meta['options'].get('max_foreign', 0.25):g} cores during the first attempt; the quieter attempt is kept."
        )
    if meta.get("skipped"):
        lines.append("- Not run: " + "; ".join(f"`{key}`: {why}" for key, why in meta["skipped"].items()) + ".")
    if meta.get("failures"):
        lines.append("- **Failures**: " + "; ".join(meta["failures"]))
    lines += ["", "Stacks:", ""]
    for stack in results.stacks.values():
        store = f", store {stack['store']}" if stack["store"] else ""
        env = "".join(f", `{name}={value}`" for name, value in _env(results, stack["key"]).items())
        lines.append(
            f"- `{stack['key']}`: {stack['label']} ({stack['server']}, {stack['procs']} process(es){store}{env}, "
            f"{stack['placement']}); ratios against `{stack['baseline'] or '-'}`."
        )
    return [*lines, ""]


def _footer(results: Results) -> list[str]:
    lines = ["## Notes", ""]
    errors = [r for r in results.records if r["errors"]]
    if errors:
        lines.append("Steps with errors (counted inside the timed window):")
        lines.append("")
        for record in errors:
            lines.append(
                f"- round {record['round'] + 1}, {record['stack']} {record['workload']} c={record['concurrency']}: "
                f"{record['errors']} errors, e.g. {'; '.join(record['error_samples'][:2])}"
            )
        lines.append("")
    lines += [
        "- `×echo (req/s)` divides HTTP requests/s (an MRTR round trip is 2 requests; a task lifecycle counts its "
        "create, polls and update) by the echo's requests/s at the same concurrency, same round.",
        "- `+µs over echo`: server CPU per request (utime+stime of the server's process tree, from /proc) minus the "
        "echo's, same round: what the protocol adds on top of the HTTP stack.",
        "- Raw records: `results.json` (per round and step).",
    ]
    return lines


def _links(out: Path) -> list[str]:
    """Links to the companion documents written into the same folder (profile, findings), if any."""
    found = [f"[{name}]({name})" for name in ("profile.md", "findings.md") if (out / name).exists()]
    return ["", "See also: " + ", ".join(found) + "."] if found else []
