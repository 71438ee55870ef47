"""Real processes on free loopback ports, stopped by PID: the one harness of the tests and the bench.

* :func:`running_server`: an ``ext-tasks serve`` for an end-to-end test.
* :func:`start` and :class:`Proc`: any command with its output in a log file, optionally pinned to CPUs
  (``taskset``), its CPU time read over its whole process tree (``/proc/*/task/*/schedstat``), stopped
  with every descendant it had (hypercorn and granian workers), each by PID. The bench starts its
  servers, peers and valkey-servers this way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _wait_until_listening(server: ServerProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited early with {server.process.returncode}:\n{server.log()}")
        try:
            # Any HTTP answer means the socket is up; GET on /mcp answers 405 by design.
            httpx.get(server.url, timeout=0.5)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError(f"server did not listen within {timeout_s}s:\n{server.log()}")


def stop(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """Stop one process by its PID: SIGTERM, then SIGKILL if it does not exit in time."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)


@contextlib.contextmanager
def running_server(
    tmp_path: Path,
    *,
    tools: str,
    env: Mapping[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 30.0,
) -> Iterator[ServerProcess]:
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ext_tasks",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--tools",
                tools,
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            cwd=REPO,
        )
    server = ServerProcess(process=process, port=port, log_path=log_path)
    try:
        _wait_until_listening(server, timeout_s)
        yield server
    finally:
        stop(process)


# --- any process: started with a log, pinned, its CPU counted, stopped with its descendants ------------


def can_pin() -> bool:
    return shutil.which("taskset") is not None and len(os.sched_getaffinity(0)) >= 2


def pinned(cpus: str | None, command: Sequence[str]) -> list[str]:
    """``command`` under ``taskset -c cpus`` (as is when pinning is off or impossible)."""
    if cpus is None or not can_pin():
        return list(command)
    return ["taskset", "-c", cpus, *command]


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


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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
        stop(self.process, timeout_s)
        for pid in self.known:
            if pid != self.pid and _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def spawn(command: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``command`` in the checkout, its output in ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        return subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=child_env, cwd=REPO)


def start(name: str, command: Sequence[str], *, port: int, log_dir: Path, env: dict[str, str] | None = None) -> Proc:
    log_path = log_dir / f"{name}-{port}.log"
    return Proc(name, spawn(command, log_path, env), log_path, port)


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


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float = 10.0, name: str = "") -> None:
    """Wait until something listens on ``port``; an error as soon as ``process`` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name or process.args!r} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"{name or process.args!r} did not listen on {port} within {timeout_s}s")


def wait_port(proc: Proc, timeout_s: float = 10.0) -> None:
    try:
        wait_for_port(proc.port, proc.process, timeout_s, proc.name)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}:\n{proc.log_tail()}") from None
