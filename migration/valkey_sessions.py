"""Legacy sessions in Valkey, so any instance serves any request of a 2025-11-25 session.

On the Valkey connection layer the task store stands on (``ext_tasks.store.connection``): the same
:class:`Topology` (one Valkey, Sentinel's primary or a cluster, one client per process), the one "store
unavailable" mapping (HTTP 503, "retry later"), and sharded channels for each session's message bus
(one subscriber connection per node for every session of the process). The keys are the shim's own
(:mod:`.session_keys`), under the task store's prefix; of the task store it takes only its public
owners' places (:func:`ext_tasks.store.valkey.owner_places`).

Every step touches one key, except creating a session, which is two single-slot steps like a task's
creation: take a place among the principal's live sessions (checking the cap atomically), then store
the session. A process that dies in between leaves the place taken until it lapses with the session
lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

from ext_tasks.clock import now_ms
from ext_tasks.options import VALKEY_PREFIX
from ext_tasks.store.connection.channels import ShardedChannels
from ext_tasks.store.connection.jsontext import decode_json, encode_json
from ext_tasks.store.connection.pool import PoolSettings
from ext_tasks.store.connection.refusals import unavailable_on_connection_errors
from ext_tasks.store.connection.scripts import Script
from ext_tasks.store.connection.topology import Topology, connect
from ext_tasks.store.valkey import owner_places

from .session_keys import SessionKeys
from .sessions import RECONNECTED, SESSION_TTL_S, LegacySession, TooManySessions

#: Take a key unless another holder has it; extend it for the same holder.
HOLD: Final = Script(
    "hold a key",
    keys=("held",),
    args=("holder", "ttl_ms"),
    body="""
local current = redis.call('GET', held)
if current and current ~= holder then return 0 end
redis.call('SET', held, holder, 'PX', ttl_ms)
return 1
""",
)
LET_GO: Final = Script(
    "let a key go",
    keys=("held",),
    args=("holder",),
    body="""
if redis.call('GET', held) == holder then redis.call('DEL', held) end
return 0
""",
)
#: A place among the principal's live sessions, unless it already has ``cap`` of them.
TAKE_PLACE: Final = Script(
    "take a session place",
    keys=("sessions_of",),
    args=("session_id", "now_ms", "until_ms", "ttl_ms", "cap"),
    body="""
redis.call('ZREMRANGEBYSCORE', sessions_of, '-inf', now_ms)
if tonumber(cap) > 0 and redis.call('ZCARD', sessions_of) >= tonumber(cap) then return 0 end
redis.call('ZADD', sessions_of, until_ms, session_id)
redis.call('PEXPIRE', sessions_of, ttl_ms)
return 1
""",
)
#: SPUBLISH routed by the channel (declared as the script's key: the cluster client routes by keys).
PUBLISH: Final = Script(
    "publish to a session",
    keys=("channel",),
    args=("message",),
    body="""
return redis.call('SPUBLISH', channel, message)
""",
)
_INDEX_DAYS: Final = 7


class ValkeySessionStore:
    """``ValkeySessionStore("valkey://...")`` owns its connections; the composition root passes the
    task store's :class:`Topology` and :class:`ShardedChannels` instead, so the two share them."""

    def __init__(
        self,
        target: str | Topology,
        *,
        prefix: str = VALKEY_PREFIX,
        ttl_s: int = SESSION_TTL_S,
        pool: PoolSettings | None = None,
        channels: ShardedChannels | None = None,
    ) -> None:
        self._owns_topology = isinstance(target, str)
        self._topology = connect(target, pool) if isinstance(target, str) else target
        self._owns_channels = channels is None
        self._channels = channels or ShardedChannels(self._topology)
        self._client: Any = self._topology.client
        self._keys = SessionKeys(prefix)
        self._ttl_s = ttl_s
        self._hold = HOLD.bind(self._client)
        self._let_go = LET_GO.bind(self._client)
        self._take_place = TAKE_PLACE.bind(self._client)
        self._publish = PUBLISH.bind(self._client)
        #: The task store's places under the same prefix: a proxy sharing a server's Valkey and prefix
        #: counts with the server's places; on its own, it counts the shim's tasks by itself.
        self.places = owner_places(self._topology, prefix)

    async def create(self, session: LegacySession, cap: int) -> None:
        ttl_ms = self._ttl_s * 1000
        now = now_ms()
        with unavailable_on_connection_errors():
            placed = await self._take_place(
                keys={"sessions_of": self._keys.sessions_of(session.principal)},
                args={
                    "session_id": session.session_id,
                    "now_ms": now,
                    "until_ms": now + ttl_ms,
                    "ttl_ms": ttl_ms,
                    "cap": cap,
                },
            )
            if not placed:
                raise TooManySessions(session.principal)
            await self._client.set(self._keys.session(session.session_id), encode_json(session.to_json()), px=ttl_ms)

    async def save(self, session: LegacySession) -> None:
        with unavailable_on_connection_errors():
            await self._client.set(
                self._keys.session(session.session_id), encode_json(session.to_json()), ex=self._ttl_s
            )

    async def load(self, session_id: str) -> LegacySession | None:
        key = self._keys.session(session_id)
        with unavailable_on_connection_errors():
            raw = await self._client.getex(key, ex=self._ttl_s)  # every use extends the session's life
            if raw is None:
                return None
            session = LegacySession.from_json(decode_json(raw))
            # ... and its place among its principal's live sessions.
            await self._client.zadd(
                self._keys.sessions_of(session.principal), {session_id: now_ms() + self._ttl_s * 1000}, xx=True
            )
        return session

    async def delete(self, session: LegacySession) -> None:
        with unavailable_on_connection_errors():
            await self._client.delete(self._keys.session(session.session_id))
            await self._client.zrem(self._keys.sessions_of(session.principal), session.session_id)

    async def publish(self, session_id: str, message: dict[str, Any]) -> None:
        with unavailable_on_connection_errors():
            await self._publish(
                keys={"channel": self._keys.session_bus(session_id)}, args={"message": encode_json(message)}
            )

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        channel = self._keys.session_bus(session_id)
        async with self._channels.subscribe(channel, decode_json, live=RECONNECTED) as inbox:
            await inbox.get()  # the first "live": nothing to catch up on yet
            yield inbox

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        key = self._keys.legacy_index(scope)
        with unavailable_on_connection_errors():
            added = await self._client.zadd(key, {task_id: created_ms}, nx=True)
            await self._client.expire(key, _INDEX_DAYS * 86_400)
        return bool(added)

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]:
        with unavailable_on_connection_errors():
            found = await self._client.zrange(self._keys.legacy_index(scope), offset, offset + limit - 1)
        return [str(task_id) for task_id in found]

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        with unavailable_on_connection_errors():
            await self._client.set(self._keys.shim_task(str(task["taskId"])), encode_json(task), px=max(1, ttl_ms))

    async def load_task(self, task_id: str) -> dict[str, Any] | None:
        with unavailable_on_connection_errors():
            raw = await self._client.get(self._keys.shim_task(task_id))
        return None if raw is None else dict(decode_json(raw))

    async def mark_cancelled(self, task_id: str, ttl_ms: int) -> None:
        with unavailable_on_connection_errors():
            await self._client.set(self._keys.legacy_cancelled(task_id), "1", px=max(1, ttl_ms))

    async def was_cancelled(self, task_id: str) -> bool:
        with unavailable_on_connection_errors():
            return bool(await self._client.exists(self._keys.legacy_cancelled(task_id)))

    async def hold(self, key: str, holder: str, ttl_ms: int) -> bool:
        with unavailable_on_connection_errors():
            return bool(
                await self._hold(keys={"held": self._keys.held(key)}, args={"holder": holder, "ttl_ms": max(1, ttl_ms)})
            )

    async def let_go(self, key: str, holder: str) -> None:
        with unavailable_on_connection_errors():
            await self._let_go(keys={"held": self._keys.held(key)}, args={"holder": holder})

    async def close(self) -> None:
        if self._owns_channels:
            await self._channels.close()
        if self._owns_topology:
            await self._topology.close()
