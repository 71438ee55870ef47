"""Where a server's time goes under load: py-spy samples of one ``ext-tasks serve`` process.

For each phase (MRTR round trips and MRTR resumes on the in-memory store, ``tasks/get`` on Valkey, the
task lifecycle on Valkey) a fresh server is started pinned to CPU 1, driven by ``bench.loadgen`` on CPU 0, and sampled
by ``py-spy record --format raw`` (collapsed stacks) while the load runs. Each sample is charged to
the *first* component found walking the stack from the leaf up (self time), and to every component on
the stack (inclusive time). Components are module paths: hypercorn/h11 (HTTP), Litestar, the envelope
checks, JSON-RPC, pydantic validation, the state codec, the store, the task worker, and so on.

    python -m investigations.profile [--seconds 10] [--out DIR]

Writes ``profile.md`` plus the collapsed stacks (``profile-<phase>.txt``, for flamegraph.pl or
speedscope) to the results folder. Needs ``py-spy`` (a dev extra) and permission to ptrace (root, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench import plan as plans
from bench import procs

#: (component, regular expression on a frame's file path), most specific first. A frame is charged
#: to the first component whose pattern matches its ``(file:line)``.
COMPONENTS: Final[tuple[tuple[str, str], ...]] = (
    # The process's entry point is the root of every stack: charging it would say nothing.
    ("", r"ext_tasks/(cli|__main__)\.py|(^|/)runpy\.py"),
    (
        "metrics and lifecycle logs (metrics.py, lifecycle.py, prometheus_client)",
        r"ext_tasks/(metrics|lifecycle)\.py|(^|/)prometheus_client/",
    ),
    ("envelope checks (protocol/envelope.py)", r"ext_tasks/protocol/envelope\.py"),
    ("JSON-RPC decode/encode (protocol/jsonrpc.py)", r"ext_tasks/protocol/jsonrpc\.py"),
    ("state codec (protocol/resume.py)", r"ext_tasks/protocol/resume\.py"),
    ("wire params validation (protocol/wire.py)", r"ext_tasks/protocol/wire\.py"),
    ("task records and wire (protocol/tasks.py, states.py)", r"ext_tasks/protocol/(tasks|states)\.py"),
    ("store: ext_tasks/store", r"ext_tasks/store/"),
    ("task worker (worker.py)", r"ext_tasks/worker\.py"),
    ("task methods (task_methods.py)", r"ext_tasks/task_methods\.py"),
    ("MRTR driver (mrtr.py)", r"ext_tasks/mrtr\.py"),
    ("tool binding and argument validation (tools.py, invoke.py)", r"ext_tasks/(tools|invoke)\.py"),
    ("tool-author context (context.py, results.py)", r"ext_tasks/(context|results)\.py"),
    ("engine and methods (engine.py, methods.py)", r"ext_tasks/(engine|methods)\.py"),
    ("HTTP adapter (ext_tasks/http.py)", r"ext_tasks/http\.py"),
    ("other ext_tasks", r"ext_tasks/"),
    ("migration shim", r"(^|/)migration/"),
    ("pydantic", r"(^|/)pydantic(_core)?/"),
    ("valkey client (valkey-py)", r"(^|/)valkey/"),
    ("Litestar", r"(^|/)litestar/"),
    ("hypercorn + h11 (HTTP/1.1 server)", r"(^|/)(hypercorn|h11)/"),
    ("msgspec", r"(^|/)msgspec/"),
    ("logging", r"(^|/)logging/"),
    ("asyncio / uvloop (event loop)", r"(^|/)(asyncio|uvloop)/"),
    ("the benchmark's tools (bench/tools.py)", r"bench/tools\.py"),
)
_FRAME: Final = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?):(?P<line>\d+)\)$")


@dataclass(frozen=True)
class Phase:
    name: str
    title: str
    stack: plans.Stack
    step: plans.Step


def _phases() -> list[Phase]:
    def stack(key: str, store: plans.Store) -> plans.Stack:
        return plans.Stack(key, key, "ext", "hypercorn", store, 1, "pinned", "main", None)

    return [
        Phase("mrtr", "MRTR round trips, in-memory store, c=64", stack("ext-hc-mem", "memory"), plans.Step("mrtr", 64)),
        Phase("replay", "MRTR resumes, in-memory store, c=64", stack("ext-hc-mem", "memory"), plans.Step("replay", 64)),
        Phase("tasks_get", "tasks/get, Valkey store, c=64", stack("ext-hc-vk", "valkey"), plans.Step("tasks_get", 64)),
        Phase(
            "lifecycle",
            "task create -> complete, Valkey, c=16",
            stack("ext-hc-vk", "valkey"),
            plans.Step("lifecycle", 16),
        ),
    ]


def _py_spy() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    """``frame;frame;...;frame count`` lines (py-spy ``--format raw``) as (frames root-first, count)."""
    stacks = []
    for line in text.splitlines():
        head, _, count = line.rpartition(" ")
        if not head or not count.isdigit():
            continue
        stacks.append((head.split(";"), int(count)))
    return stacks


def component_of(frame: str) -> str | None:
    found = _FRAME.match(frame)
    path = found.group("file") if found else frame
    for name, pattern in COMPONENTS:
        if re.search(pattern, path):
            return name or None
    return None


def _short(frame: str) -> str:
    found = _FRAME.match(frame)
    if found is None:
        return frame
    path = found.group("file")
    for marker in ("site-packages/", "/ext_tasks/", "/bench/", "/migration/", "python3.11/"):
        if marker in path:
            path = (
                marker.strip("/") + "/" if marker in ("/ext_tasks/", "/bench/", "/migration/") else ""
            ) + path.split(marker, 1)[1]
            break
    return f"{found.group('function')} ({path}:{found.group('line')})"


@dataclass
class Breakdown:
    samples: int
    self_by_component: collections.Counter[str]
    inclusive_by_component: collections.Counter[str]
    self_by_function: collections.Counter[str]
    inclusive_by_function: collections.Counter[str]


def _is_ours(frame: str) -> bool:
    return ("ext_tasks/" in frame or "bench/tools" in frame) and component_of(frame) is not None


def analyse(stacks: list[tuple[list[str], int]]) -> Breakdown:
    total = 0
    self_c: collections.Counter[str] = collections.Counter()
    incl_c: collections.Counter[str] = collections.Counter()
    self_f: collections.Counter[str] = collections.Counter()
    incl_f: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        # py-spy raw stacks start with "process ..." / "thread ..." pseudo-frames.
        real = [frame for frame in frames if _FRAME.match(frame)]
        if not real:
            continue
        total += count
        charged = None
        for frame in reversed(real):
            charged = component_of(frame)
            if charged is not None:
                break
        self_c[charged or "other (stdlib, C)"] += count
        self_f[_short(real[-1])] += count
        for name in {component_of(frame) for frame in real} - {None}:
            assert name is not None
            incl_c[name] += count
        for name in {_short(frame) for frame in real if _is_ours(frame)}:
            incl_f[name] += count
    return Breakdown(total, self_c, incl_c, self_f, incl_f)


def _run_phase(phase: Phase, seconds: float, scratch: Path, out: Path, spy: str, state_key: str) -> dict[str, Any]:
    from bench.load import run_step
    from bench.run import Options
    from bench.stacks import running_stack

    options = Options(
        rounds=1, seconds=seconds, warmup_s=1.5, smoke=False, only=None, peers=False, out=out, scratch=scratch,
        shape=plans.FULL,
    )  # fmt: skip
    raw = out / f"profile-{phase.name}.txt"
    with running_stack(phase.stack, options, state_key) as running:
        # py-spy starts once the warm-up is over; the step's own timing runs alongside it.
        command = procs.pinned(
            "0",
            [spy, "record", "--pid", str(running.server.pid), "--rate", "250", "--format", "raw", "--output", str(raw),
             "--duration", str(max(1, int(seconds))), "--nonblocking"],
        )  # fmt: skip
        spy_log = scratch / "logs" / f"py-spy-{phase.name}.log"
        spy_log.parent.mkdir(parents=True, exist_ok=True)
        holder: dict[str, subprocess.Popen[bytes]] = {}

        def start_spy() -> None:
            with spy_log.open("wb") as log:
                holder["spy"] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        record = run_step(running, phase.step, options, 0, on_window_start=start_spy)
        spy_process = holder.get("spy")
        if spy_process is not None:
            try:
                spy_process.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                spy_process.kill()
                spy_process.wait(timeout=10)
    return record


def profile_server(out: Path, scratch: Path, *, seconds: float = 10.0) -> str | None:
    """Profile each phase; writes ``profile.md`` into ``out`` and returns its name (``None`` if py-spy is missing)."""
    spy = _py_spy()
    if spy is None:
        print("profile: py-spy is not installed (pip install py-spy); skipped", flush=True)
        return None
    out.mkdir(parents=True, exist_ok=True)
    state_key = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "keygen"], capture_output=True, text=True, check=True, cwd=procs.REPO
    ).stdout.strip()
    sections: list[str] = []
    summary: list[tuple[str, Breakdown, dict[str, Any]]] = []
    records: dict[str, dict[str, Any]] = {}
    for phase in _phases():
        print(f"profile: {phase.title}, {seconds:g} s under py-spy", flush=True)
        record = _run_phase(phase, seconds, scratch, out, spy, state_key)
        records[phase.name] = record
        raw = out / f"profile-{phase.name}.txt"
        if not raw.exists():
            sections += [f"## {phase.title}", "", "py-spy wrote no samples (ptrace not permitted?).", ""]
            continue
        breakdown = analyse(parse_collapsed(raw.read_text(errors="replace")))
        summary.append((phase.title, breakdown, record))
        sections += _phase_section(phase, breakdown, record)
    text = _document(summary, sections, seconds)
    (out / "profile.md").write_text(text)
    (out / "profile.json").write_text(json.dumps({"seconds": seconds, "records": records}, indent=1))
    return "profile.md"


def render(out: Path) -> str:
    """Write ``profile.md`` again from the collapsed stacks and ``profile.json`` already in ``out``."""
    saved = json.loads((out / "profile.json").read_text())
    summary: list[tuple[str, Breakdown, dict[str, Any]]] = []
    sections: list[str] = []
    for phase in _phases():
        raw = out / f"profile-{phase.name}.txt"
        record = saved["records"].get(phase.name)
        if record is None or not raw.exists():
            continue
        breakdown = analyse(parse_collapsed(raw.read_text(errors="replace")))
        summary.append((phase.title, breakdown, record))
        sections += _phase_section(phase, breakdown, record)
    (out / "profile.md").write_text(_document(summary, sections, float(saved["seconds"])))
    return "profile.md"


def _pct(count: int, total: int) -> str:
    return f"{100.0 * count / max(1, total):.1f} %"


def _phase_section(phase: Phase, breakdown: Breakdown, record: dict[str, Any]) -> list[str]:
    total = breakdown.samples
    cpu_us = record["server_cpu_us_per_request"] or 0.0
    lines = [
        f"## {phase.title}",
        "",
        f"{record['ops_per_s']:,.0f} ops/s, {record['requests_per_s']:,.0f} HTTP requests/s while sampled; server "
        f"CPU {cpu_us:,.0f} µs per request; {total:,} samples. µs/req below = share x server CPU per request.",
        "",
        "| component | self | self µs/req | inclusive | inclusive µs/req |",
        "|---|---:|---:|---:|---:|",
    ]
    names = sorted(
        set(breakdown.self_by_component) | set(breakdown.inclusive_by_component),
        key=lambda name: -breakdown.self_by_component.get(name, 0),
    )
    for name in names:
        own = breakdown.self_by_component.get(name, 0)
        incl = breakdown.inclusive_by_component.get(name, 0)
        lines.append(
            f"| {name} | {_pct(own, total)} | {cpu_us * own / max(1, total):,.0f} | {_pct(incl, total)} "
            f"| {cpu_us * incl / max(1, total):,.0f} |"
        )
    lines += ["", "Top functions by self time (leaf frame):", "", "| function | self | µs/req |", "|---|---:|---:|"]
    for name, count in breakdown.self_by_function.most_common(15):
        lines.append(f"| `{name}` | {_pct(count, total)} | {cpu_us * count / max(1, total):,.0f} |")
    lines += [
        "",
        "Top ext_tasks functions by inclusive time:",
        "",
        "| function | inclusive | µs/req |",
        "|---|---:|---:|",
    ]
    for name, count in breakdown.inclusive_by_function.most_common(15):
        lines.append(f"| `{name}` | {_pct(count, total)} | {cpu_us * count / max(1, total):,.0f} |")
    return [*lines, ""]


def _document(summary: list[tuple[str, Breakdown, dict[str, Any]]], sections: list[str], seconds: float) -> str:
    lines = [
        f"# Server profile under load, {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        "",
        "One `ext-tasks serve` process (hypercorn, uvloop) pinned to CPU 1, `bench.loadgen` and valkey-server on "
        f"CPU 0; py-spy 250 Hz (`--nonblocking`), {seconds:g} s per phase after a warm-up. *Self*: samples whose "
        "innermost recognised frame belongs to the component (C code such as msgspec, pydantic-core or the "
        "socket calls is charged to the Python frame that called it). *Inclusive*: samples with the component "
        "anywhere on the stack.",
        "",
        "| phase | samples | hypercorn+h11 | Litestar | ext_tasks (incl.) | pydantic (incl.) | valkey-py (incl.) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for title, breakdown, _ in summary:
        total = breakdown.samples
        ext_total = sum(
            count
            for name, count in breakdown.self_by_component.items()
            if "ext_tasks" in name or name.startswith(("envelope", "JSON-RPC", "state codec", "wire", "task", "store",
                                                        "MRTR", "tool", "engine", "HTTP adapter"))
        )  # fmt: skip
        lines.append(
            f"| {title} | {total:,} "
            f"| {_pct(breakdown.self_by_component.get('hypercorn + h11 (HTTP/1.1 server)', 0), total)} "
            f"| {_pct(breakdown.self_by_component.get('Litestar', 0), total)} | {_pct(ext_total, total)} "
            f"| {_pct(breakdown.inclusive_by_component.get('pydantic', 0), total)} "
            f"| {_pct(breakdown.inclusive_by_component.get('valkey client (valkey-py)', 0), total)} |"
        )
    lines += ["", "(hypercorn and Litestar: self time; ext_tasks: self time of all ext_tasks components.)", ""]
    return "\n".join([*lines, *sections]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m investigations.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="sampled seconds per phase (default 10)")
    parser.add_argument("--out", type=Path, help="folder for profile.md (default bench/results/profile-<timestamp>/)")
    parser.add_argument("--render", type=Path, metavar="DIR", help="only rewrite DIR/profile.md from its saved samples")
    args = parser.parse_args(argv)
    if args.render is not None:
        print(f"profile: {args.render / render(args.render)}")
        return 0
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    out: Path = (args.out or procs.REPO / "bench" / "results" / f"profile-{stamp}").resolve()
    scratch = procs.REPO / "bench" / "results" / "tmp" / f"profile-{stamp}"
    started = time.monotonic()
    name = profile_server(out, scratch, seconds=args.seconds)
    if name is None:
        return 2
    print(f"profile: {out / name} ({time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
