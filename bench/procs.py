"""The bench's stores and its peers' virtualenvs, on the process and Valkey harness it shares with the tests
(``tests/support/processes.py``, ``tests/support/valkey.py``, ``tests/support/valkey_cluster.py``: every
process started with a log, pinned with ``taskset``, its CPU read from ``/proc`` over its process tree,
stopped by PID with its descendants).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.processes import REPO, Proc, can_pin, free_port, machine_busy_seconds, pinned, start, wait_http
from tests.support.processes import wait_port as wait_port
from tests.support.valkey import ValkeyServer, start_valkey, valkey_binary
from tests.support.valkey_cluster import form_cluster

__all__ = ["REPO", "Proc", "can_pin", "free_port", "machine_busy_seconds", "pinned", "start", "valkey_binary",
           "wait_http", "wait_port"]  # fmt: skip

VENVS = REPO / ".venvs"


@dataclass
class ValkeyStore:
    """The store of one stack: one valkey-server, the primaries of a Valkey Cluster, or a primary and its
    replica (``replicas``: started and stopped with the store, its CPU counted, never given to the server)."""

    nodes: list[ValkeyServer]
    cluster: bool
    replicas: list[ValkeyServer] = field(default_factory=list)

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
    port = free_port()
    if kind == "valkey":
        return ValkeyStore([start_valkey(log_dir / f"valkey-{port}", port=port, cpus=cpus)], cluster=False)
    if kind == "valkey-cluster":
        cluster = form_cluster(log_dir / f"cluster-{port}", primaries, replicas_each=0, cpus=cpus)
        return ValkeyStore([node.server for node in cluster.primaries], cluster=True)
    if kind == "valkey-replica":
        return _start_replicated(log_dir / f"replicated-{port}", cpus)
    raise ValueError(f"unknown store kind {kind!r}")


def admin(node: Proc) -> Any:
    """A valkey-py client of ``node`` (Any: valkey-py's sync client is untyped in places), for set-up and stats."""
    import valkey  # the benchmark's own dev dependency; only set-up and bench.commands talk to Valkey directly

    return valkey.Valkey(host="127.0.0.1", port=node.port, decode_responses=True)


def _start_replicated(directory: Path, cpus: str | None) -> ValkeyStore:
    started: list[ValkeyServer] = []
    try:
        sync = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
        started.append(start_valkey(directory / "primary", extra_args=sync, cpus=cpus))
        primary = started[0]
        follow = ("--replicaof", "127.0.0.1", str(primary.port))
        started.append(start_valkey(directory / "replica", extra_args=follow, cpus=cpus))
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
