"""Legacy sessions in Valkey, so any instance serves any request of a 2025-11-25 session.

On the shared plumbing of the task store (``ext_tasks.store.plumbing``): a bounded connection pool, the
one "store unavailable" mapping (HTTP 503, "retry later"), and one pub/sub connection per process for
every session bus subscription of the process (fanned out in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from ext_tasks.store.plumbing import Channels, connect, unavailable_on_connection_errors

from .sessions import RECONNECTED, LegacySession, TooManySessions

#: Take a key unless another holder has it; extend it for the same holder.
_HOLD: Final = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_LET_GO: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""
#: Create a session unless its principal already has ``cap`` live ones (KEYS: session, principal's set).
_CREATE: Final = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if tonumber(ARGV[4]) > 0 and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3] + ARGV[2], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""
_INDEX_DAYS: Final = 7


class ValkeySessionStore:
    def __init__(self, url: str, *, prefix: str = "ext-tasks", ttl_s: int = 3600, max_connections: int = 64) -> None:
        self._client = connect(url, max_connections=max_connections)
        self._channels = Channels(self._client)
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._hold = self._client.register_script(_HOLD)
        self._let_go = self._client.register_script(_LET_GO)
        self._create = self._client.register_script(_CREATE)

    def _key(self, kind: str, name: str) -> str:
        return f"{self._prefix}:{kind}:{name}"

    async def create(self, session: LegacySession, cap: int) -> None:
        keys = [self._key("session", session.session_id), self._key("sessions-of", session.principal)]
        args: list[str | int] = [json.dumps(session.to_json()), self._ttl_s * 1000, _now_ms(), cap, session.session_id]
        with unavailable_on_connection_errors():
            created = await self._create(keys=keys, args=args)
        if not created:
            raise TooManySessions(session.principal)

    async def save(self, session: LegacySession) -> None:
        with unavailable_on_connection_errors():
            await self._client.set(
                self._key("session", session.session_id), json.dumps(session.to_json()), ex=self._ttl_s
            )

    async def load(self, session_id: str) -> LegacySession | None:
        key = self._key("session", session_id)
        with unavailable_on_connection_errors():
            raw = await self._client.getex(key, ex=self._ttl_s)  # every use extends the session's life
            if raw is None:
                return None
            session = LegacySession.from_json(json.loads(raw))
            # ... and its place among its principal's live sessions.
            await self._client.zadd(
                self._key("sessions-of", session.principal), {session_id: _now_ms() + self._ttl_s * 1000}, xx=True
            )
        return session

    async def delete(self, session: LegacySession) -> None:
        with unavailable_on_connection_errors():
            await self._client.delete(self._key("session", session.session_id))
            await self._client.zrem(self._key("sessions-of", session.principal), session.session_id)

    async def publish(self, session_id: str, message: dict[str, Any]) -> None:
        with unavailable_on_connection_errors():
            await self._client.publish(self._key("session-bus", session_id), json.dumps(message))

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        async with self._channels.subscribe(self._key("session-bus", session_id)) as raw:
            await raw.get()  # live

            async def pump() -> None:
                while True:
                    data = await raw.get()
                    inbox.put_nowait(dict(RECONNECTED) if data is None else json.loads(data))

            reader = asyncio.create_task(pump(), name="ext-tasks-session-bus")
            try:
                yield inbox
            finally:
                reader.cancel()

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        key = self._key("legacy-tasks", scope)
        with unavailable_on_connection_errors():
            added = await self._client.zadd(key, {task_id: created_ms}, nx=True)
            await self._client.expire(key, _INDEX_DAYS * 86_400)
        return bool(added)

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]:
        with unavailable_on_connection_errors():
            found = await self._client.zrange(self._key("legacy-tasks", scope), offset, offset + limit - 1)
        return [str(task_id) for task_id in found]

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        with unavailable_on_connection_errors():
            await self._client.set(self._key("shim-task", str(task["taskId"])), json.dumps(task), px=max(1, ttl_ms))

    async def load_task(self, task_id: str) -> dict[str, Any] | None:
        with unavailable_on_connection_errors():
            raw = await self._client.get(self._key("shim-task", task_id))
        return None if raw is None else dict(json.loads(raw))

    async def mark_cancelled(self, task_id: str, ttl_ms: int) -> None:
        with unavailable_on_connection_errors():
            await self._client.set(self._key("legacy-cancelled", task_id), "1", px=max(1, ttl_ms))

    async def was_cancelled(self, task_id: str) -> bool:
        with unavailable_on_connection_errors():
            return bool(await self._client.exists(self._key("legacy-cancelled", task_id)))

    async def hold(self, key: str, holder: str, ttl_ms: int) -> bool:
        with unavailable_on_connection_errors():
            return bool(await self._hold(keys=[self._key("held", key)], args=[holder, max(1, ttl_ms)]))

    async def let_go(self, key: str, holder: str) -> None:
        with unavailable_on_connection_errors():
            await self._let_go(keys=[self._key("held", key)], args=[holder])

    async def close(self) -> None:
        await self._channels.close()
        await self._client.aclose()


def _now_ms() -> int:
    return int(time.time() * 1000)
