"""``python -m bench``: start every stack of the plan on 127.0.0.1, drive it from a separate loader
process, repeat in interleaved rounds, and write the report (Markdown + PNG) to the results folder.

See ``bench/README.md`` for what is measured and how to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import commands, issuer, procs
from . import plan as plans
from .plan import Stack, Step

RESULTS = procs.REPO / "bench" / "results"
#: Seconds between starting a loader and the agreed start of its warm-up (interpreter start, connects).
LOADER_LEAD_S = 0.6
POLL_MS = 1.0


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
class Running:
    stack: Stack
    server: procs.Proc
    valkey: procs.ValkeyStore | None
    path: str
    server_cpus: str | None
    loader_cpus: str | None
    population: list[str] = field(default_factory=list)
    #: The loader's bearer token (an OAuth stack: a JWT of the local issuer), else None.
    token: str | None = None


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


# --- starting stacks ------------------------------------------------------------------------------


def _granian() -> str | None:
    local = Path(sys.executable).parent / "granian"
    return str(local) if local.exists() else shutil.which("granian")


def _granian_command(target: str, port: int, procs_: int, factory: bool) -> list[str]:
    binary = _granian()
    assert binary is not None
    command = [
        binary, "--interface", "asgi", "--loop", "uvloop", "--no-access-log", "--log-level", "warning",
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(procs_),
    ]  # fmt: skip
    return [*command, "--factory", target] if factory else [*command, target]


#: The issuer's signing key of this run (generated at the first OAuth stack's start).
_SIGNING: list[issuer.SigningKey] = []


@contextlib.contextmanager
def running_stack(stack: Stack, options: Options, state_key: str) -> Iterator[Running]:
    pinned = stack.placement == "pinned"
    server_cpus, side_cpus = ("1", "0") if pinned else (None, None)
    logs = options.scratch / "logs"
    started: list[procs.Proc | procs.ValkeyStore] = []
    try:
        valkey = None
        if stack.store is not None and stack.store != "memory":
            valkey = procs.start_store(logs, side_cpus, stack.store)
            started.append(valkey)
        port = procs.free_port()
        token: str | None = None
        auth_env: dict[str, str] = {}
        if stack.oauth:
            issuer_proc, token, auth_env = _start_issuer(port, side_cpus, options.scratch)
            started.append(issuer_proc)
        server, path = _start_server(stack, port, valkey, state_key, server_cpus, logs, auth_env)
        started.append(server)
        procs.wait_http(server, path, settle_s=1.0 if stack.procs > 1 else 0.1)
        if stack.oauth:
            _check_challenged(server, path)
        yield Running(stack, server, valkey, path, server_cpus, side_cpus, token=token)
    finally:
        for proc in reversed(started):
            proc.stop()


def _check_challenged(server: procs.Proc, path: str) -> None:
    """An OAuth stack must answer a request without a token 401 (else its figures would be auth-off ones)."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5.0) as sock:
        sock.sendall(request)
        head = sock.recv(64)
    if not head.startswith(b"HTTP/1.1 401"):
        raise RuntimeError(f"{server.name}: OAuth is not on (no token answered {head[:20]!r}, not 401)")


def _start_issuer(server_port: int, cpus: str | None, scratch: Path) -> tuple[procs.Proc, str, dict[str, str]]:
    """The local authorization server of an OAuth stack (``bench.issuer``, pinned with the loader), one
    long-lived token for the loader, and the server's OAuth settings."""
    if not _SIGNING:
        _SIGNING.append(issuer.SigningKey.generate("RS256"))
    key = _SIGNING[0]
    jwks_path = scratch / "issuer-jwks.json"
    jwks_path.parent.mkdir(parents=True, exist_ok=True)
    jwks_path.write_text(json.dumps(issuer.jwks([key])))
    port = procs.free_port()
    command = [sys.executable, "-m", "bench.issuer", "--port", str(port), "--jwks", str(jwks_path)]
    proc = procs.start("issuer", procs.pinned(cpus, command), port=port, log_dir=scratch / "logs")
    procs.wait_port(proc)
    url, resource = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{server_port}/mcp"
    env = {
        "EXT_TASKS_AUTH_ISSUERS": url,
        "EXT_TASKS_AUTH_RESOURCE": resource,
        "EXT_TASKS_AUTH_SCOPES": issuer.SCOPE,
    }
    return proc, key.mint(url, resource), env


def _start_server(
    stack: Stack,
    port: int,
    valkey: procs.ValkeyStore | None,
    state_key: str,
    cpus: str | None,
    logs: Path,
    auth_env: dict[str, str] | None = None,
) -> tuple[procs.Proc, str]:
    valkey_url = None if valkey is None else valkey.url
    if stack.kind == "echo":
        if stack.server == "granian":
            command = _granian_command("bench.echo_app:app", port, stack.procs, factory=False)
        else:
            command = [sys.executable, "-m", "bench.echo_app", "--port", str(port), "--workers", str(stack.procs)]
        return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs), "/echo"
    if stack.kind == "ext":
        env = {
            "EXT_TASKS_STATE_KEYS": state_key,
            "EXT_TASKS_LOG_LEVEL": "warning",
            "EXT_TASKS_SHUTDOWN_GRACE_S": "0",
            "EXT_TASKS_TOOLS": "bench.tools",
            "EXT_TASKS_HOST": "127.0.0.1",
            "EXT_TASKS_PORT": str(port),
            "EXT_TASKS_WORKERS": str(stack.procs),
            "EXT_TASKS_VALKEY_URL": valkey_url or "",
            # One anonymous principal creates tens of thousands of tasks a minute here: far past the
            # default cap on tasks kept per principal (10,000), which would refuse them with 429. A cap
            # this high still does its bookkeeping on every creation, so its cost stays measured.
            "EXT_TASKS_MAX_STORED_TASKS": "100000000",
            **dict(stack.env),
            **(auth_env or {}),
        }
        if stack.server == "granian":
            command = _granian_command("ext_tasks.cli:app_from_env", port, stack.procs, factory=True)
        else:
            command = [sys.executable, "-m", "ext_tasks", "serve", "--tools", "bench.tools", "--port", str(port)]
            command += ["--workers", str(stack.procs)]
            if valkey_url:
                command += ["--valkey-url", valkey_url]
        return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs, env=env), "/mcp"
    if stack.kind == "sdk":
        key_hex = secrets.token_hex(32)
        command = [str(procs.SDK_VENV.python), "bench/peers/sdk_server.py", "--port", str(port), "--key", key_hex]
        command += ["--server", stack.server]
        if stack.server == "hypercorn":
            command += ["--hypercorn-config", json.dumps(hypercorn_overrides())]
        return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs), "/mcp"
    assert valkey is not None
    command = [
        str(procs.FASTMCP_VENV.python), "bench/peers/fastmcp_server.py", "--port", str(port),
        "--valkey-url", f"redis://127.0.0.1:{valkey.nodes[0].port}/0", "--name", f"bench-{port}",
    ]  # fmt: skip
    return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs), "/mcp"


def hypercorn_overrides() -> dict[str, Any]:
    """What ``ext-tasks serve`` sets on hypercorn's ``Config``, read from ``ext_tasks.cli.hypercorn_config``
    itself (like the echo baseline, on purpose: the SDK peer on hypercorn must follow any change made to
    how the real server is served), for ``sdk_server.py --hypercorn-config``. Every attribute the function
    sets, but the bind (the peer has its own port) and the error logger (a logger object; the peer logs
    to stderr at warning level, as the benchmark's ext-tasks servers do)."""
    from ext_tasks import cli
    from ext_tasks.config import Settings

    config = cli.hypercorn_config(Settings(host="127.0.0.1", port=0))
    overrides: dict[str, Any] = {}
    for name, value in vars(config).items():
        if name in ("_bind", "bind", "errorlog"):
            continue
        try:
            json.dumps(value)
        except TypeError:
            raise ValueError(f"ext_tasks.cli sets hypercorn's {name} to {value!r}: pass it to the SDK peer") from None
        overrides[name] = value
    return overrides


# --- one step -------------------------------------------------------------------------------------


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    ordered = sorted(values)

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": ordered[-1], "mean": statistics.fmean(ordered)}


def populate(running: Running, options: Options) -> None:
    size = options.shape.population
    spec = {
        "scenario": "populate",
        "port": running.server.port,
        "path": running.path,
        "completed": size,
        "working": size,
        "timeout_s": 120.0,
        "token": running.token,
    }
    process = procs.start_loader(spec, running.loader_cpus, options.scratch / "specs" / "populate.json")
    result = procs.finish_loader(process, 180.0)
    running.population = [*result["completed"], *result["working"]]


def run_step(
    running: Running,
    step: Step,
    options: Options,
    round_index: int,
    *,
    on_window_start: Callable[[], None] | None = None,
) -> dict[str, Any]:
    if step.workload == "echo_wrk":
        return _run_wrk(running, step, options, round_index)
    if step.workload == "tasks_get" and not running.population:
        populate(running, options)
    spec: dict[str, Any] = {
        "scenario": step.workload,
        "port": running.server.port,
        "path": running.path,
        "tool": plans.TOOLS.get(step.workload, ""),
        "concurrency": step.concurrency,
        "warmup_s": options.warmup_s,
        "seconds": options.seconds,
        "poll_ms": POLL_MS,
        "task_ids": running.population,
        "start_at": time.time() + LOADER_LEAD_S,
        "token": running.token,
    }
    spec_path = options.scratch / "specs" / f"{running.stack.key}-{step.key}.json"
    process = procs.start_loader(spec, running.loader_cpus, spec_path)
    _sleep_until(spec["start_at"] + options.warmup_s)
    if on_window_start is not None:
        on_window_start()
    server_cpu0, valkey_cpu0, t0 = running.server.cpu(), _cpu(running.valkey), time.monotonic()
    busy0 = procs.machine_busy_seconds()
    _sleep_until(spec["start_at"] + options.warmup_s + options.seconds)
    server_cpu1, valkey_cpu1, t1 = running.server.cpu(), _cpu(running.valkey), time.monotonic()
    busy1 = procs.machine_busy_seconds()
    result = procs.finish_loader(process, options.warmup_s + options.seconds + 60.0)
    requests = max(1, result["requests"])
    ours = (server_cpu1 - server_cpu0) + (valkey_cpu1 - valkey_cpu0) + result["loader_cpu_s"]
    latency = _percentiles(result["latencies_ms"])
    server_latency = _percentiles(result["server_latencies_ms"])
    create_latencies = result.get("create_latencies_ms") or []
    return {
        "round": round_index,
        "stack": running.stack.key,
        "workload": step.workload,
        "concurrency": step.concurrency,
        "seconds": options.seconds,
        "ops": result["ops"],
        "requests": result["requests"],
        "errors": result["errors"],
        "error_samples": result["error_samples"],
        "ops_per_s": result["ops"] / options.seconds,
        "requests_per_s": result["requests"] / options.seconds,
        "latency_ms": latency,
        "server_latency_ms": server_latency if result["server_latencies_ms"] else None,
        # The lifecycle's create request alone: a WAIT on the creation shows here undiluted by the polls.
        "create_latency_ms": _percentiles(create_latencies) if create_latencies else None,
        "server_cpu_us_per_request": 1e6 * (server_cpu1 - server_cpu0) / requests,
        "server_cores": (server_cpu1 - server_cpu0) / max(1e-9, t1 - t0),
        "valkey_cpu_us_per_request": None if running.valkey is None else 1e6 * (valkey_cpu1 - valkey_cpu0) / requests,
        "loader_cpu_us_per_request": 1e6 * result["loader_cpu_s"] / requests,
        "population": len(running.population) if step.workload == "tasks_get" else None,
        # Cores busy with anything but this step's server, Valkey and loader (other jobs on the box).
        "foreign_cores": max(0.0, (busy1 - busy0) - ours) / max(1e-9, t1 - t0),
    }


def _cpu(proc: procs.Proc | procs.ValkeyStore | None) -> float:
    return 0.0 if proc is None else proc.cpu()


def _sleep_until(wall: float) -> None:
    time.sleep(max(0.0, wall - time.time()))


_WRK_LUA = """wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"echo","params":{"vu":1}}'
wrk.headers["Content-Type"] = "application/json"
"""


def _run_wrk(running: Running, step: Step, options: Options, round_index: int) -> dict[str, Any]:
    wrk = shutil.which("wrk")
    assert wrk is not None
    script = options.scratch / "post.lua"
    script.write_text(_WRK_LUA)
    url = f"http://127.0.0.1:{running.server.port}{running.path}"

    def command(seconds: float) -> list[str]:
        base = [wrk, "-t1", f"-c{step.concurrency}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script)]
        return procs.pinned(running.loader_cpus, [*base, url])

    subprocess.run(command(options.warmup_s), capture_output=True, check=False, timeout=120)
    server_cpu0, t0, children0 = running.server.cpu(), time.monotonic(), _children_cpu()
    done = subprocess.run(command(options.seconds), capture_output=True, text=True, check=False, timeout=300)
    server_cpu1, t1, children1 = running.server.cpu(), time.monotonic(), _children_cpu()
    text = done.stdout
    rate = float(_search(r"Requests/sec:\s+([\d.]+)", text) or 0.0)
    total = int(_search(r"(\d+) requests in", text) or 0)
    latency = {name: _wrk_ms(_search(rf"\s{quantile}%\s+([\d.]+\w+)", text)) for name, quantile in (("p50", "50"),
               ("p90", "90"), ("p99", "99"))}  # fmt: skip
    errors = int(_search(r"Non-2xx or 3xx responses:\s+(\d+)", text) or 0)
    return {
        "round": round_index,
        "stack": running.stack.key,
        "workload": "echo_wrk",
        "concurrency": step.concurrency,
        "seconds": t1 - t0,
        "ops": total,
        "requests": total,
        "errors": errors,
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


def _search(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text)
    return None if found is None else found.group(1)


def _wrk_ms(text: str | None) -> float | None:
    if text is None:
        return None
    found = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if found is None:
        return None
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[found.group(2)]
    return float(found.group(1)) * scale


# --- the run --------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("litestar", "hypercorn", "granian", "uvloop", "msgspec", "pydantic", "valkey", "matplotlib"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    binary = procs.valkey_binary()
    if binary is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            text = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
            versions["valkey-server"] = _search(r"v=([\d.]+)", text) or "?"
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


def _prepare_peers(stacks: list[Stack], options: Options, skipped: dict[str, str]) -> list[Stack]:
    kept = []
    venvs: dict[str, str | None] = {}  # one install attempt per virtualenv (both SDK stacks share one)

    def ensure(venv: procs.Venv) -> str | None:
        if venv.name not in venvs:
            venvs[venv.name] = venv.ensure(options.scratch / "logs")
        return venvs[venv.name]

    for stack in stacks:
        reason = None
        if stack.server == "granian" and _granian() is None:
            reason = "granian is not installed (pip install granian, or the dev extras)"
        elif stack.kind == "sdk":
            reason = ensure(procs.SDK_VENV)
        elif stack.kind == "fastmcp":
            reason = ensure(procs.FASTMCP_VENV)
        if reason is None:
            kept.append(stack)
        else:
            skipped[stack.key] = reason
            print(f"skipping {stack.key}: {reason}", flush=True)
    return kept


def _peer_versions(stacks: list[Stack]) -> dict[str, str]:
    versions = {}
    if any(stack.kind == "sdk" for stack in stacks):
        versions["mcp (SDK peer)"] = procs.package_version(procs.SDK_VENV, "mcp")
        for server in sorted({stack.server for stack in stacks if stack.kind == "sdk"}):
            versions[f"{server} (SDK peer)"] = procs.package_version(procs.SDK_VENV, server)
    if any(stack.kind == "fastmcp" for stack in stacks):
        versions["fastmcp (peer)"] = procs.package_version(procs.FASTMCP_VENV, "fastmcp")
        versions["fastmcp-tasks (peer)"] = procs.package_version(procs.FASTMCP_VENV, "fastmcp-tasks")
        versions["pydocket (peer)"] = procs.package_version(procs.FASTMCP_VENV, "pydocket")
    return versions


def _describe(record: dict[str, Any]) -> str:
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
                        progress.line(f"  {stack.key:<15} {step.key:<22} {_describe(record)}")
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
    stacks = _prepare_peers(stacks, options, skipped)
    if not stacks:
        print("nothing to run", file=sys.stderr)
        return 2
    meta: dict[str, Any] = {
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items() if k != "shape"},
        "shape": asdict(options.shape),
        "machine": _machine(),
        "versions": {**_versions(), **_peer_versions(stacks)},
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
    return _verdict(stacks, records, failures, options)


def _verdict(stacks: list[Stack], records: list[dict[str, Any]], failures: list[str], options: Options) -> int:
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
