"""Writes the replicas confirm before the client hears of them (``EXT_TASKS_VALKEY_MIN_REPLICA_ACKS``).

Valkey replicates asynchronously: a write acknowledged to a client may exist only on a primary that
dies a moment later, and a promoted replica never had it. ``WAIT N TIMEOUT`` blocks until ``N``
replicas have everything **this connection** has written, so a confirmed write is the write and its
``WAIT`` sent back to back on one connection (one round trip): on one Valkey (or behind Sentinel) a
pooled connection; on a cluster a connection to the node that serves the key, the pair sent again
after a redirection (``MOVED``, ``ASK``, ``TRYAGAIN``), since a ``WAIT`` on another node would confirm
nothing.

Fewer replicas than asked within the timeout: :class:`ReplicasBehind`, a "store unavailable, retry
later" (HTTP 503) to the client, counted in ``ext_tasks_store_ack_timeouts_total``. The write itself
stays on the primary (``WAIT`` cannot undo it); a creation resent with its idempotency key finds it,
and the resend is confirmed in turn (the creation script writes even then, so the ``WAIT`` covers the
original).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from valkey.asyncio.cluster import ClusterNode
from valkey.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MovedError,
    NoScriptError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from ...metrics import STORE_ACK_TIMEOUTS, STORE_RETRIES
from ...options import VALKEY_ACK_TIMEOUT_MS, VALKEY_MIN_REPLICA_ACKS
from .cluster_client import SETTLE_S
from .errors import TaskStoreUnavailable

Command = Sequence[str | int]

#: How long a confirmed write follows redirections (a slot changing owner) before it is "unavailable";
#: the same budget as the cluster client's own commands.
_SETTLE_S: Final = SETTLE_S
_SETTLE_PAUSE_S: Final = 0.02


@dataclass(frozen=True, slots=True)
class ReplicaAcks:
    """How many replicas must confirm a write (0: none, Valkey's own asynchronous replication), and how
    long to wait for them."""

    replicas: int = VALKEY_MIN_REPLICA_ACKS
    timeout_ms: int = VALKEY_ACK_TIMEOUT_MS

    def wait(self) -> Command:
        return ("WAIT", self.replicas, self.timeout_ms)


class ReplicasBehind(TaskStoreUnavailable):
    """The write was made, but fewer replicas than required confirmed it in time."""


def check(acks: ReplicaAcks, confirmed: Any) -> None:
    if isinstance(confirmed, BaseException):
        raise confirmed
    if int(confirmed) < acks.replicas:
        STORE_ACK_TIMEOUTS.inc()
        raise ReplicasBehind(
            f"task store unavailable: {confirmed} of {acks.replicas} replica(s) confirmed within {acks.timeout_ms} ms"
        )


async def send_together(connection: Any, commands: Sequence[Command], parse: Any = None) -> list[Any]:
    """Send ``commands`` in one write on ``connection`` and read every reply (an error reply is
    returned as its exception, so the connection is left with nothing unread). ``parse(connection,
    name)`` reads one reply (a cluster node's, which applies its response callbacks)."""
    await connection.send_packed_command(connection.pack_commands(commands), False)
    replies: list[Any] = []
    for command in commands:
        try:
            if parse is None:
                replies.append(await connection.read_response())
            else:
                replies.append(await parse(connection, str(command[0])))
        except ResponseError as exc:
            replies.append(exc)
    return replies


async def confirmed_single(pool: Any, acks: ReplicaAcks, command: Command, source: str | None = None) -> Any:
    """``command`` confirmed by the replicas, on one Valkey (or the primary Sentinel names). A script's
    ``source`` is loaded if the server does not know it (a promoted replica never saw it loaded)."""
    connection = await pool.get_connection(str(command[0]))
    try:
        reply, confirmed = await send_together(connection, [command, acks.wait()])
        if isinstance(reply, NoScriptError) and source is not None:
            reply, confirmed = (await send_together(connection, [("SCRIPT", "LOAD", source), command, acks.wait()]))[1:]
    finally:
        await pool.release(connection)
    if isinstance(reply, BaseException):
        raise reply
    check(acks, confirmed)
    return reply


async def confirmed_cluster(
    cluster: Any, acks: ReplicaAcks, key: str, command: Command, source: str | None = None
) -> Any:
    """``command`` (touching ``key``'s slot) confirmed by the replicas of the node that serves it; a
    script's ``source`` is loaded on that node if it does not know it."""
    asking: ClusterNode | None = None
    settled_by = asyncio.get_running_loop().time() + _SETTLE_S
    while asyncio.get_running_loop().time() < settled_by:
        await cluster.initialize()  # a no-op unless the slot map is stale
        node: ClusterNode = asking or cluster.get_node_from_key(key)
        batch = [command, acks.wait()]
        if isinstance(asking, ClusterNode):
            batch.insert(0, ("ASKING",))
        try:
            replies = await _on_node(node, batch)
        except (ConnectionError, TimeoutError, OSError):
            # As the client does on its own path: the next command learns the slot map again. Not sent
            # again here: the write may have been made before the connection broke.
            await cluster._reset_for_reinitialize()
            raise
        reply, confirmed = replies[-2], replies[-1]
        asking = None
        if isinstance(reply, NoScriptError) and source is not None:
            await _on_node(node, [("SCRIPT", "LOAD", source)])
        elif isinstance(reply, MovedError):
            cluster.nodes_manager._moved_exception = reply  # the client's own way to learn the new owner
            await asyncio.sleep(_SETTLE_PAUSE_S)  # two nodes may each name the other for a moment
        elif isinstance(reply, AskError):
            asking = cluster.get_node(host=reply.host, port=reply.port)
            if asking is None:
                await cluster._reset_for_reinitialize()
        elif isinstance(reply, TryAgainError):
            await asyncio.sleep(_SETTLE_PAUSE_S)
        elif isinstance(reply, ClusterDownError):
            await cluster._reset_for_reinitialize()
            await asyncio.sleep(_SETTLE_PAUSE_S * 5)
        else:
            if isinstance(reply, BaseException):
                raise reply
            check(acks, confirmed)
            return reply
        STORE_RETRIES.inc()
    raise TaskStoreUnavailable("task store unavailable: the slot kept moving")


async def _on_node(node: ClusterNode, commands: Sequence[Command]) -> list[Any]:
    connection = node.acquire_connection()
    try:
        return await send_together(connection, commands, node.parse_response)
    finally:
        node._free.append(connection)  # back whatever happened (disconnected if anything broke)
