"""Legacy sessions in Valkey, so any instance serves any request of a 2025-11-25 session."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, Final

from valkey.asyncio import Valkey

from .sessions import LegacySession

_SUBSCRIBE_TIMEOUT_S: Final = 5.0
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


class ValkeySessionStore:
    def __init__(self, url: str, *, prefix: str = "ext-tasks", ttl_s: int = 3600) -> None:
        self._client: Valkey = Valkey.from_url(url, decode_responses=True, socket_connect_timeout=2.0)
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._hold = self._client.register_script(_HOLD)
        self._let_go = self._client.register_script(_LET_GO)

    def _key(self, kind: str, name: str) -> str:
        return f"{self._prefix}:{kind}:{name}"

    async def save(self, session: LegacySession) -> None:
        await self._client.set(self._key("session", session.session_id), json.dumps(session.to_json()), ex=self._ttl_s)

    async def load(self, session_id: str) -> LegacySession | None:
        key = self._key("session", session_id)
        raw = await self._client.getex(key, ex=self._ttl_s)  # every use extends the session's life
        return None if raw is None else LegacySession.from_json(json.loads(raw))

    async def delete(self, session_id: str) -> None:
        await self._client.delete(self._key("session", session_id))

    async def publish(self, session_id: str, message: dict[str, Any]) -> None:
        await self._client.publish(self._key("session-bus", session_id), json.dumps(message))

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        pubsub = self._client.pubsub()
        await pubsub.subscribe(self._key("session-bus", session_id))
        # Wait for the confirmation, so nothing published after we return can be missed.
        async with asyncio.timeout(_SUBSCRIBE_TIMEOUT_S):
            while (await pubsub.get_message(timeout=1.0) or {}).get("type") != "subscribe":
                pass

        async def pump() -> None:
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None and message.get("type") == "message":
                    queue.put_nowait(json.loads(message["data"]))

        reader = asyncio.create_task(pump())
        try:
            yield queue
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        key = self._key("legacy-tasks", scope)
        added = await self._client.zadd(key, {task_id: created_ms}, nx=True)
        await self._client.expire(key, 7 * 86_400)
        return bool(added)

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]:
        found = await self._client.zrange(self._key("legacy-tasks", scope), offset, offset + limit - 1)
        return [str(task_id) for task_id in found]

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        await self._client.set(self._key("shim-task", str(task["taskId"])), json.dumps(task), px=max(1, ttl_ms))

    async def load_task(self, task_id: str) -> dict[str, Any] | None:
        raw = await self._client.get(self._key("shim-task", task_id))
        return None if raw is None else dict(json.loads(raw))

    async def mark_cancelled(self, task_id: str, ttl_ms: int) -> None:
        await self._client.set(self._key("legacy-cancelled", task_id), "1", px=max(1, ttl_ms))

    async def was_cancelled(self, task_id: str) -> bool:
        return bool(await self._client.exists(self._key("legacy-cancelled", task_id)))

    async def hold(self, key: str, holder: str, ttl_ms: int) -> bool:
        return bool(await self._hold(keys=[self._key("held", key)], args=[holder, max(1, ttl_ms)]))

    async def let_go(self, key: str, holder: str) -> None:
        await self._let_go(keys=[self._key("held", key)], args=[holder])

    async def close(self) -> None:
        await self._client.aclose()
