"""Legacy sessions, their message bus, the legacy task index: the state the shim keeps.

A 2025-11-25 client holds a session (``Mcp-Session-Id``); keeping sessions in a shared store lets any
instance serve any request of the session. The *bus* carries a session's messages between instances:
the client's answers to relayed server→client requests (which may reach another instance than the one
holding the waiting stream) and notifications for the session's GET stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass
class LegacySession:
    session_id: str
    protocol_version: str
    capabilities: dict[str, Any]
    principal: str
    client_info: dict[str, Any] | None = None
    log_level: str | None = None
    subscriptions: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LegacySession:
        return cls(**data)

    @property
    def task_scope(self) -> str:
        """Whose tasks ``tasks/list`` shows: the principal's, or this session's when anonymous."""
        return self.own_scope if self.principal == "anonymous" else f"principal:{self.principal}"

    @property
    def own_scope(self) -> str:
        return f"session:{self.session_id}"

    @property
    def watch_scope(self) -> str:
        """The tasks this session's GET stream follows: those it created, and those it read by id
        (a task handed over from another session)."""
        return f"watch:{self.session_id}"


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


class SessionStore(Protocol):
    async def save(self, session: LegacySession) -> None: ...

    async def load(self, session_id: str) -> LegacySession | None: ...

    async def delete(self, session_id: str) -> None: ...

    async def publish(self, session_id: str, message: dict[str, Any]) -> None: ...

    def subscribe(self, session_id: str) -> contextlib.AbstractAsyncContextManager[asyncio.Queue[dict[str, Any]]]:
        """Messages published to the session from now on (the subscription is live on entry)."""
        ...

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        """Add the task to ``scope``'s list; ``True`` if it was not in it yet."""
        ...

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]: ...

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        """Keep a task the shim made itself (see ``LegacyShim._inline_as_task``)."""
        ...

    async def load_task(self, task_id: str) -> dict[str, Any] | None: ...

    async def mark_cancelled(self, task_id: str, ttl_ms: int) -> None: ...

    async def was_cancelled(self, task_id: str) -> bool: ...

    async def hold(self, key: str, holder: str, ttl_ms: int) -> bool:
        """Take ``key`` for ``holder`` for ``ttl_ms`` (or extend it if ``holder`` has it): ``False`` while
        someone else holds it. Streams of one session use it to relay each question once."""
        ...

    async def let_go(self, key: str, holder: str) -> None:
        """Give ``key`` up, if ``holder`` holds it."""
        ...

    async def close(self) -> None: ...


class MemorySessionStore:
    """Sessions of one process (the embedded default)."""

    def __init__(self, ttl_s: float = 3600.0) -> None:
        self._ttl_s = ttl_s
        self._sessions: dict[str, tuple[LegacySession, float]] = {}
        self._queues: defaultdict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        self._index: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._cancelled: dict[str, float] = {}
        self._tasks: dict[str, tuple[dict[str, Any], float]] = {}
        self._held: dict[str, tuple[str, float]] = {}

    async def save(self, session: LegacySession) -> None:
        self._sessions[session.session_id] = (session, time.monotonic() + self._ttl_s)

    async def load(self, session_id: str) -> LegacySession | None:
        found = self._sessions.get(session_id)
        if found is None or found[1] < time.monotonic():
            self._sessions.pop(session_id, None)
            return None
        self._sessions[session_id] = (found[0], time.monotonic() + self._ttl_s)
        return found[0]

    async def delete(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    async def publish(self, session_id: str, message: dict[str, Any]) -> None:
        for queue in self._queues.get(session_id, ()):
            queue.put_nowait(message)

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queues[session_id].add(queue)
        try:
            yield queue
        finally:
            self._queues[session_id].discard(queue)
            if not self._queues[session_id]:
                del self._queues[session_id]

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        index = self._index[scope]
        if task_id in index:
            return False
        index[task_id] = created_ms
        return True

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]:
        ordered = sorted(self._index.get(scope, {}).items(), key=lambda item: (item[1], item[0]))
        return [task_id for task_id, _ in ordered[offset : offset + limit]]

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        self._tasks[str(task["taskId"])] = (task, time.monotonic() + ttl_ms / 1000)

    async def load_task(self, task_id: str) -> dict[str, Any] | None:
        found = self._tasks.get(task_id)
        return found[0] if found is not None and found[1] > time.monotonic() else None

    async def mark_cancelled(self, task_id: str, ttl_ms: int) -> None:
        self._cancelled[task_id] = time.monotonic() + ttl_ms / 1000

    async def was_cancelled(self, task_id: str) -> bool:
        return self._cancelled.get(task_id, 0.0) > time.monotonic()

    async def hold(self, key: str, holder: str, ttl_ms: int) -> bool:
        now = time.monotonic()
        current = self._held.get(key)
        if current is not None and current[0] != holder and current[1] > now:
            return False
        self._held[key] = (holder, now + ttl_ms / 1000)
        return True

    async def let_go(self, key: str, holder: str) -> None:
        current = self._held.get(key)
        if current is not None and current[0] == holder:
            del self._held[key]

    async def close(self) -> None:
        return None
