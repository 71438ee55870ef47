"""``python -m bench``'s command line: the options, the run's description (machine, versions), the
results written as JSON (``results.json``), then the report rendered from it (``bench.report``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import plan as plans
from . import procs
from .load import POLL_MS, search
from .run import RESULTS, Options, execute, verdict
from .stacks import peer_versions, prepare_peers


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("litestar", "hypercorn", "granian", "uvloop", "msgspec", "pydantic", "valkey", "matplotlib"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    with contextlib.suppress(OSError, RuntimeError, subprocess.SubprocessError):  # RuntimeError: no valkey-server
        command = [procs.valkey_binary(), "--version"]
        text = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False).stdout
        versions["valkey-server"] = search(r"v=([\d.]+)", text) or "?"
    wrk = shutil.which("wrk")
    versions["wrk"] = "available" if wrk else "not installed"
    return versions


def _machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = os.environ.get("BENCH_COMMIT") or _git_commit()
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "pinning": "taskset available" if procs.can_pin() else "not pinned (taskset missing or one CPU)",
        "commit": commit,
        "load_average_at_start": os.getloadavg(),
    }


def _git_commit() -> str:
    """The checked-out commit, marked when ext_tasks/ has uncommitted changes ("?" outside a checkout)."""
    if not (procs.REPO / ".git").exists():
        return "?"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=procs.REPO, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "ext_tasks"],
            capture_output=True,
            text=True,
            cwd=procs.REPO,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return commit + (" with uncommitted changes in ext_tasks/" if dirty else "")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="MRTR resume, tasks/get and task lifecycle throughput and latency, beside an echo "
        "baseline and peers, in interleaved rounds (see bench/README.md)",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3; smoke 1)")
    parser.add_argument("--seconds", type=float, help="timed seconds per step (default 3; smoke 0.4)")
    parser.add_argument("--warmup", type=float, help="untimed seconds before each step (default 1; smoke 0.15)")
    parser.add_argument("--only", choices=sorted(plans.FAMILIES), help="one workload family (baselines follow)")
    parser.add_argument(
        "--stacks",
        type=_stack_list,
        metavar="KEY,KEY",
        help="only these stacks, e.g. ext-hc-vkr0,ext-hc-vkr1 (name an echo stack, e.g. echo-hc, to get its "
        "ratios too); keys: " + ", ".join(plans.stack_keys()),
    )
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>/)")
    parser.add_argument(
        "--quick",
        "--smoke",
        dest="smoke",
        action="store_true",
        help="a few seconds in all, every workload minimally, peers skipped, no thresholds",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip the SDK and FastMCP peers")
    parser.add_argument("--peers", action="store_true", help="run the peers in smoke mode too")
    parser.add_argument(
        "--max-other-load",
        type=float,
        default=0.25,
        help="measure a step again (up to --retries times) when other jobs used more cores than this (default 0.25)",
    )
    parser.add_argument("--retries", type=int, default=1, help="extra attempts of a step on a busy box (default 1)")
    parser.add_argument("--no-plots", action="store_true", help="write the Markdown report only")
    parser.add_argument("--profile", action="store_true", help="also profile a server under load (py-spy)")
    parser.add_argument(
        "--fairness",
        action="store_true",
        help="only the fairness scenario: one principal's create-to-start latency alone and while another floods, "
        "with EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL and without (ext-hc-mem, ext-hc-vk; --stacks picks; ~2 min)",
    )
    parser.add_argument("--flood", type=int, default=5000, help="with --fairness: the flood's creations (default 5000)")
    parser.add_argument("--samples", type=int, default=50, help="with --fairness: the probe's samples (default 50)")
    parser.add_argument(
        "--render", type=Path, metavar="DIR", help="only rewrite DIR/report.md and its plots from DIR/results.json"
    )
    return parser


def _stack_list(text: str) -> list[str]:
    keys = [key.strip() for key in text.split(",") if key.strip()]
    known = plans.stack_keys()
    unknown = [key for key in keys if key not in known]
    if unknown or not keys:
        given = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(f"unknown stack(s) {given}; known: {', '.join(known)}")
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.render is not None:
        from .report import write_report

        saved = json.loads((args.render / "results.json").read_text())
        print(f"report: {write_report(args.render, saved['meta'], saved['records'], plots=not args.no_plots)}")
        return 0
    smoke = bool(args.smoke)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    default_out = RESULTS / "tmp" / f"smoke-{stamp}" if smoke else RESULTS / stamp
    out: Path = (args.out or default_out).resolve()
    options = Options(
        rounds=args.rounds or (1 if smoke else 3),
        seconds=args.seconds or (0.4 if smoke else 3.0),
        warmup_s=args.warmup if args.warmup is not None else (0.15 if smoke else 1.0),
        smoke=smoke,
        only=args.only,
        peers=(args.peers or not smoke) and not args.no_peers,
        out=out,
        scratch=RESULTS / "tmp" / f"run-{stamp}",
        shape=plans.SMOKE if smoke else plans.FULL,
        max_foreign=args.max_other_load,
        retries=0 if smoke else max(0, args.retries),
        stacks=args.stacks,
    )
    if options.rounds < 1 or options.seconds <= 0 or options.warmup_s < 0:
        _parser().error("--rounds must be at least 1, --seconds positive, --warmup not negative")
    if args.fairness:
        return _fairness(args, options, argv)
    started = time.time()
    skipped: dict[str, str] = {}
    if not options.peers:
        skipped["peers"] = "not run (smoke mode: they need network installs; use --peers)" if smoke else "--no-peers"
    if shutil.which("wrk") is None:
        skipped["echo_wrk"] = "wrk is not installed (Debian: apt-get install wrk); loader cross-check skipped"
    stacks = plans.build_plan(
        options.shape,
        smoke=smoke,
        peers=options.peers,
        wrk=shutil.which("wrk") is not None,
        only=options.only,
        keys=options.stacks,
    )
    missing = [key for key in options.stacks or () if key not in {stack.key for stack in stacks}]
    if missing:
        why = "smoke mode, peers off, --only, or an echo stack without a dependant"
        print(f"--stacks: not in this run ({why}): {', '.join(missing)}", file=sys.stderr)
    stacks = prepare_peers(stacks, options, skipped)
    if not stacks:
        print("nothing to run", file=sys.stderr)
        return 2
    meta: dict[str, Any] = {
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items() if k != "shape"},
        "shape": asdict(options.shape),
        "machine": _machine(),
        "versions": {**_versions(), **peer_versions(stacks)},
        "skipped": skipped,
        "stacks": [asdict(stack) for stack in stacks],
        "poll_ms": POLL_MS,
    }
    print(
        f"bench: {len(stacks)} stacks x {options.rounds} round(s), {options.seconds:g}s per step "
        f"(+{options.warmup_s:g}s warm-up); results -> {out}",
        flush=True,
    )
    store_costs: dict[str, Any] = {}
    records, failures = execute(stacks, options, store_costs)
    meta["store_costs"] = store_costs
    meta["failures"] = failures
    meta["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["wall_s"] = round(time.time() - started, 1)
    if args.profile and not smoke:
        # A one-off investigation, run as its own command: the bench does not import investigations/.
        seconds = str(max(8.0, options.seconds * 3))
        done = subprocess.run(
            [sys.executable, "-m", "investigations.profile", "--out", str(out), "--seconds", seconds],
            cwd=procs.REPO,
            check=False,
        )
        meta["profile"] = "profile.md" if done.returncode == 0 else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    from .report import write_report

    report = write_report(out, meta, records, plots=not args.no_plots)
    print(f"report: {report}", flush=True)
    return verdict(stacks, records, failures, options)


def _fairness(args: argparse.Namespace, options: Options, argv: Sequence[str] | None) -> int:
    """``--fairness``: the scenario of ``bench.fairness``, its figures in ``results.json`` (under ``fairness``)
    and its section in ``report.md``. Non-zero only when something did not run."""
    from . import fairness, fairness_report

    keys = tuple(args.stacks or fairness.STACKS)
    unknown = [key for key in keys if key not in fairness.STACKS]
    if unknown or args.flood < 1 or args.samples < 1:
        _parser().error(f"--fairness runs on {', '.join(fairness.STACKS)} (not {', '.join(unknown)}), "
                        "with --flood and --samples of at least 1")  # fmt: skip
    scenario = fairness.Scenario(flood=args.flood, samples=args.samples, stacks=keys)
    started = time.time()
    print(f"bench --fairness: {', '.join(keys)}, a flood of {scenario.flood:,}, {scenario.samples} samples; "
          f"results -> {options.out}", flush=True)  # fmt: skip
    figures, failures = fairness.run(scenario, options)
    meta: dict[str, Any] = {
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "scenario": asdict(scenario),
        "machine": _machine(),
        "versions": _versions(),
        "failures": failures,
        "wall_s": round(time.time() - started, 1),
    }
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "results.json").write_text(json.dumps({"meta": meta, "fairness": figures}, indent=1))
    report = options.out / "report.md"
    header = f"# Fairness run {meta['started']} (build {meta['machine']['commit']}, {meta['wall_s']:g} s)\n\n"
    report.write_text(header + fairness_report.render(figures, failures, scenario))
    print(f"report: {report}", flush=True)
    empty = [f"{key} {setting} {phase}" for key, settings in figures.items() for setting, measured in settings.items()
             for phase in ("alone", "flood") if not measured[phase]["samples"]]  # fmt: skip
    for problem in [*failures, *(f"no samples: {name}" for name in empty)]:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if failures or empty else 0
