"""Shared helpers of the hardening figures.

* the two checkouts: a directory given as is, or ``git archive <rev> | tar -x -C <temp dir>``;
* the child processes' environment: cwd a neutral run directory and ``PYTHONPATH=<checkout>:<this
  directory>``, so the checkout's ``ext_tasks``/``migration`` shadow the editable install (checked by
  :func:`check_shadowing` before anything is measured) and ``figtools`` is the same tools module for both;
* servers and valkey-server on 127.0.0.1, free ports, stopped by PID (:class:`bench.procs.Proc`), every
  wait bounded by a timeout;
* a hand-driven 2025-11-25 session, 2026-07-28 request building, CPU and RSS of a PID from ``/proc``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from tests.support.valkey import start_valkey

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
DEFAULT_BEFORE = "3320622"
DEFAULT_AFTER = "HEAD"
VERSIONS = ("before", "after")
GIT_TIMEOUT_S = 120.0
CHILD_TIMEOUT_S = 30.0


def say(*parts: object) -> None:
    print(*parts, flush=True)


# --- checkouts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkout:
    """One version under measurement: ``label`` (before/after), its source tree and where it came from."""

    label: str
    root: Path
    origin: str
    python: str

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The children's environment: no inherited EXT_TASKS_* setting, the checkout first on the path."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("EXT_TASKS_")}
        env.update(PYTHONPATH=f"{self.root}{os.pathsep}{HERE}", PYTHONUNBUFFERED="1")
        env.update(extra or {})
        return env


def _resolve(rev: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{rev!r} is neither a directory nor a commit of {REPO}")
    return done.stdout.strip()


def _archive(sha: str, into: Path) -> None:
    """``git archive <sha> | tar -x -C <into>`` (reads the object store only: the work tree is untouched)."""
    with subprocess.Popen(["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE) as git:
        try:
            subprocess.run(["tar", "-x", "-C", str(into)], stdin=git.stdout, timeout=GIT_TIMEOUT_S, check=True)
        finally:
            if git.stdout is not None:
                git.stdout.close()
            git.wait(timeout=GIT_TIMEOUT_S)
    if git.returncode != 0:
        raise RuntimeError(f"git archive {sha} failed with {git.returncode}")


@contextlib.contextmanager
def checkouts(args: argparse.Namespace) -> Iterator[list[Checkout]]:
    """The checkouts of ``args.versions``: directories as given, commits archived into temporary directories
    (removed afterwards unless ``--keep-checkouts``)."""
    made: list[Path] = []
    found: list[Checkout] = []
    try:
        for label in args.versions:
            spec: str = getattr(args, label)
            if Path(spec).is_dir():
                root, origin = Path(spec).resolve(), f"directory {Path(spec).resolve()}"
            else:
                sha = _resolve(spec)
                root = Path(tempfile.mkdtemp(prefix=f"hardening-{label}-{sha[:7]}-"))
                made.append(root)
                _archive(sha, root)
                origin = f"git archive {sha} ({spec})"
            if not (root / "ext_tasks").is_dir() or not (root / "migration").is_dir():
                raise SystemExit(f"{root} holds no ext_tasks/ and migration/ packages")
            found.append(Checkout(label, root, origin, args.python))
            say(f"{label}: {origin} -> {root}")
        yield found
    finally:
        for root in made:
            if args.keep_checkouts:
                say(f"kept checkout {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)


def parser(figure: str, description: str) -> argparse.ArgumentParser:
    """The options every figure takes (which checkouts, where the run logs go, which interpreter)."""
    p = argparse.ArgumentParser(
        prog=f"python -m investigations.hardening {figure}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--before", default=DEFAULT_BEFORE, help="a directory or a commit (default %(default)s)")
    p.add_argument("--after", default=DEFAULT_AFTER, help="a directory or a commit (default %(default)s)")
    p.add_argument(
        "--versions", nargs="+", choices=VERSIONS, default=list(VERSIONS), help="which to run (default: both)"
    )
    p.add_argument("--work", type=Path, help="where the run logs go (default: a new temporary directory)")
    p.add_argument("--python", default=sys.executable, help="the interpreter of the children (default: this one)")
    p.add_argument("--keep-checkouts", action="store_true", help="keep the directories made by git archive")
    return p


def run_figure(
    figure_parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    run: Callable[[Checkout, Path, argparse.Namespace], None],
) -> int:
    """A figure's ``main``: parse ``argv``, then ``run(checkout, work root, args)`` for each checkout, in
    order; the exit status."""
    args = figure_parser.parse_args(argv)
    with checkouts(args) as found:
        root = work_dir(args)
        for checkout in found:
            run(checkout, root, args)
    return 0


def work_dir(args: argparse.Namespace) -> Path:
    work: Path = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="hardening-run-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"run logs: {work}")
    return work


# --- child processes ------------------------------------------------------------------------------


def check_shadowing(checkout: Checkout, cwd: Path) -> str:
    """Where ``ext_tasks``, ``migration`` and ``figtools`` import from in the children; raises unless the
    first two come from the checkout (not the editable install) and the tools from this directory."""
    code = "import ext_tasks, migration, figtools; print(ext_tasks.__file__, migration.__file__, figtools.__file__)"
    out = subprocess.run(
        [checkout.python, "-c", code], env=checkout.env(), cwd=cwd,
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=True,
    ).stdout.strip()  # fmt: skip
    ext_tasks, migration, tools = (Path(part) for part in out.split())
    if not (ext_tasks.is_relative_to(checkout.root) and migration.is_relative_to(checkout.root)):
        raise RuntimeError(f"{checkout.label}: ext_tasks/migration do not come from {checkout.root}: {out}")
    if tools.parent != HERE:
        raise RuntimeError(f"{checkout.label}: figtools does not come from {HERE}: {out}")
    return out


def keygen(checkout: Checkout, cwd: Path) -> str:
    return subprocess.run(
        [checkout.python, "-m", "ext_tasks.cli", "keygen"], env=checkout.env(), cwd=cwd,
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=True,
    ).stdout.strip()  # fmt: skip


@contextlib.contextmanager
def running_valkey(log_dir: Path) -> Iterator[procs.Proc]:
    """A valkey-server on 127.0.0.1 (free port, no persistence), stopped by PID on the way out."""
    proc = start_valkey(log_dir / f"valkey-{procs.free_port()}")
    try:
        yield proc
    finally:
        proc.stop()


@dataclass(frozen=True)
class Server:
    proc: procs.Proc
    url: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def port(self) -> int:
        return self.proc.port


@contextlib.contextmanager
def running_server(
    checkout: Checkout,
    work: Path,
    *,
    tools: str = "figtools",
    valkey: procs.Proc | None = None,
    env: dict[str, str] | None = None,
    launcher: Sequence[str] = ("-m", "ext_tasks.cli"),
    start_timeout_s: float = 30.0,
) -> Iterator[Server]:
    """``ext-tasks serve`` of one checkout on 127.0.0.1 (``launcher`` replaces ``-m ext_tasks.cli``), cwd
    ``work``, log ``work/server.log``; stopped by PID on the way out."""
    port = procs.free_port()
    extra = dict(env or {})
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--tools", tools]
    if valkey is not None:
        args += ["--valkey-url", f"valkey://127.0.0.1:{valkey.port}/0"]
        extra.setdefault("EXT_TASKS_STATE_KEYS", keygen(checkout, work))
    log = work / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [checkout.python, *launcher, *args], stdout=out, stderr=subprocess.STDOUT, env=checkout.env(extra), cwd=work
        )
    proc = procs.Proc(f"server-{checkout.label}", process, log, port)
    try:
        procs.wait_http(proc, "/mcp", timeout_s=start_timeout_s)
        yield Server(proc, f"http://127.0.0.1:{port}/mcp")
    finally:
        proc.stop(timeout_s=10.0)


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- requests -------------------------------------------------------------------------------------

_ids = itertools.count(1)


def modern_request(
    method: str, params: dict[str, Any] | None = None, *, tasks: bool = True
) -> tuple[dict[str, str], dict[str, Any]]:
    """(headers, body) of a 2026-07-28 request (as tests/support/mcp_http.py builds it)."""
    body_params = dict(params or {})
    body_params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXT: {}}} if tasks else {},
        "io.modelcontextprotocol/clientInfo": {"name": "hardening", "version": "1"},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = str(body_params["name"])
    return headers, {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": body_params}


class Session:
    """A hand-driven 2025-11-25 session (as tests/support/legacy.py)."""

    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self.url = url
        self.client = client or httpx.Client(timeout=10.0)
        init = {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "hardening", "version": "1"},
        }
        response = self.client.post(
            url,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init},
            headers={"Accept": "application/json, text/event-stream"},
        )
        if response.status_code != 200:
            raise RuntimeError(f"initialize: {response.status_code} {response.text[:300]}")
        self.session_id = response.headers["mcp-session-id"]
        self.headers = {
            "Accept": "application/json, text/event-stream",
            "Mcp-Session-Id": self.session_id,
            "MCP-Protocol-Version": LEGACY,
        }
        self.ids = itertools.count(1)

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        response = self.client.post(self.url, json=body, headers=self.headers)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            lines = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
            replies: list[dict[str, Any]] = [m for m in lines if "id" in m and "method" not in m]
            return replies[-1]
        reply: dict[str, Any] = response.json()
        return reply

    def start_task(self, tool: str, arguments: dict[str, Any]) -> str:
        created = self.call("tools/call", {"name": tool, "arguments": arguments, "task": {}})
        if "result" not in created:
            raise RuntimeError(f"tools/call {tool}: {created}")
        return str(created["result"]["task"]["taskId"])


def metric(port: int, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of the samples of ``name`` on GET /metrics whose labels include ``labels``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10.0).text
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(?:\{{(.*?)\}})? (\S+)$", text, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1) or ""))
        if all(have.get(k) == v for k, v in (labels or {}).items()):
            total += float(match.group(2))
    return total
