"""valkey-py's asyncio cluster client, with three corrections that resharding and failover under load
showed necessary.

1. **Learning the slot map again closes nothing.** After a few ``MOVED`` or a broken connection valkey-py
   *closes every connection of every node* and rebuilds its node table from scratch, so every command
   in flight at that moment fails ("Connection closed by server"): one slot move made each process
   answer a burst of requests "store unavailable". Here a reset only marks the map stale, and the
   refresh keeps the node objects (and their connections) of addresses still in the cluster; only
   nodes that left are disconnected.
2. **Redirections get time to settle.** valkey-py follows at most 16 redirections per command, with
   no pause between ``MOVED``s and 50 ms between the later ``TRYAGAIN``s: while a slot changes owner
   the two nodes can send a command back and forth (each says the other owns it) 16 times within a
   millisecond, and a script whose keys are split between them answers ``TRYAGAIN`` for longer than
   0.4 s on a busy slot. Here a command whose redirections ran out is sent again after a pause, for
   up to :data:`SETTLE_S`, before it counts as "store unavailable".
3. **A command to a node that is down gives its connection back.** valkey-py keeps the connection of a
   command whose sending failed out of the node's pool for good: 64 commands to a dead node and the
   node object answers ``MaxConnectionsError`` forever, even once the node is back (and with 1., the
   node object is kept). :class:`StoreNode` returns it whatever happens.

All three rely on valkey-py 6 internals (``NodesManager.set_nodes``, ``slots_cache``, a node's ``_free``
connections), which is one reason the dependency is pinned below 7.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from valkey.asyncio.cluster import ClusterNode, NodesManager, ValkeyCluster
from valkey.asyncio.retry import Retry
from valkey.cluster import PRIMARY, REPLICA
from valkey.exceptions import ClusterError, ValkeyError

from ...metrics import STORE_FAILOVERS, STORE_RETRIES

T = TypeVar("T")

#: How long a command may keep being redirected (a slot changing owner) before it fails.
SETTLE_S: Final = 2.0
_SETTLE_PAUSE_S: Final = 0.05


class StoreNode(ClusterNode):
    """A cluster node whose connection always goes back to its pool (see 3. above)."""

    __slots__ = ()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        connection = self.acquire_connection()
        kwargs.pop("keys", None)  # only for client-side caching, which is not used
        try:
            await connection.send_packed_command(connection.pack_command(*args), False)
            return await self.parse_response(connection, args[0], **kwargs)
        finally:
            self._free.append(connection)  # a connection that failed is disconnected, and reconnects

    async def execute_pipeline(self, commands: list[Any]) -> bool:
        connection = self.acquire_connection()
        try:
            await connection.send_packed_command(connection.pack_commands(cmd.args for cmd in commands), False)
            failed = False
            for cmd in commands:
                try:
                    cmd.result = await self.parse_response(connection, cmd.args[0], **cmd.kwargs)
                except Exception as exc:  # noqa: BLE001 - each command's error is its result, as valkey-py does
                    cmd.result = exc
                    failed = True
            return failed
        finally:
            self._free.append(connection)


class _KeepingNodesManager(NodesManager):
    __slots__ = ()

    def set_nodes(self, old: dict[str, ClusterNode], new: dict[str, ClusterNode], remove_old: bool = False) -> None:
        for node in new.values():
            node.__class__ = StoreNode  # nodes valkey-py made (a refresh, a redirect to a new node)
        if old is self.nodes_cache:
            kept: dict[str, ClusterNode] = {}
            for name, node in new.items():
                current = old.get(name)
                if current is not None and current is not node:
                    if current.server_type == REPLICA and node.server_type == PRIMARY:
                        STORE_FAILOVERS.inc()  # a replica took over its primary's slots
                    current.server_type = node.server_type
                    kept[name] = current
            if kept:
                new.update(kept)
                _point_slots_at(self.slots_cache, kept)
        super().set_nodes(old, new, remove_old)

    def _update_moved_slots(self) -> None:
        moved = self._moved_exception
        target = self.get_node(host=moved.host, port=moved.port) if moved is not None else None
        if target is not None and target.server_type == REPLICA:
            STORE_FAILOVERS.inc()  # MOVED to a replica of the slot: it was promoted
        super()._update_moved_slots()


def _point_slots_at(slots: dict[int, list[ClusterNode]], kept: dict[str, ClusterNode]) -> None:
    """Make the slot map name the kept node objects; slots of one range share one list, and keep sharing."""
    rebuilt: dict[int, tuple[list[ClusterNode], list[ClusterNode]]] = {}  # by id: (the old list, its copy)
    for slot, nodes in slots.items():
        pair = rebuilt.get(id(nodes))
        if pair is None:
            pair = rebuilt[id(nodes)] = (nodes, [kept.get(node.name, node) for node in nodes])
        slots[slot] = pair[1]


class StoreCluster(ValkeyCluster):
    """:class:`ValkeyCluster` with the corrections above; constructed exactly like it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nodes_manager.__class__ = _KeepingNodesManager

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        settled_by = asyncio.get_running_loop().time() + SETTLE_S
        while True:
            try:
                return await super()._execute_command(target_node, *args, **kwargs)
            except ClusterError as exc:
                # Exactly "TTL exhausted": redirections ran out (not CLUSTERDOWN, a subclass).
                if type(exc) is not ClusterError or asyncio.get_running_loop().time() > settled_by:
                    raise
            STORE_RETRIES.inc()
            await asyncio.sleep(_SETTLE_PAUSE_S)
            target_node = self.nodes_manager.get_node_from_slot(await self._determine_slot(*args))

    async def _reset_for_reinitialize(self) -> None:
        STORE_RETRIES.inc()  # valkey-py calls this before it sends the failed command again
        self._initialize = True  # the next command reads the slot map again; connections stay open


class CountingRetry(Retry):
    """valkey-py's connection retry, counting each failed attempt in ``ext_tasks_store_retries_total``."""

    __slots__ = ()

    async def call_with_retry(self, do: Callable[[], Awaitable[T]], fail: Callable[[ValkeyError], Any]) -> T:
        async def counted(error: ValkeyError) -> None:
            STORE_RETRIES.inc()
            await fail(error)

        return await super().call_with_retry(do, counted)
