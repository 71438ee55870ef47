"""Real server processes for end-to-end tests: started on a free loopback port, stopped by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]


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
