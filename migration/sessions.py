"""Legacy sessions, their message bus, the legacy task index: the state the shim keeps.

A 2025-11-25 client holds a session (``Mcp-Session-Id``); keeping sessions in a shared store lets any
instance serve any request of the session. The *bus* carries a session's messages between instances:
the client's answers to relayed server→client requests (which may reach another instance than the one
holding the waiting stream) and notifications for the session's GET stream.

Everything a client can make the store keep is bounded: sessions per principal (``create``'s cap),
each session's size (only the capabilities the shim uses are kept), the tasks the shim keeps itself
(counted by the owners' :attr:`SessionStore.places` when the shim has no task store's), and, in the
memory store, every map by expiry (:meth:`MemorySessionStore.sweep`, run periodically) and by a hard
ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Protocol

from ext_tasks.protocol.tasks import kept_capabilities as _kept
from ext_tasks.store.base import OwnerPlaces
from ext_tasks.store.ceilings import CEILING, within_ceiling
from ext_tasks.store.places import MemoryPlaces

#: What a subscriber of the session bus gets after the bus was reconnected: messages may have been
#: missed meanwhile, so a stream re-reads what it follows.
RECONNECTED: Final[Mapping[str, str]] = {"kind": "reconnected"}
#: The client capabilities a session keeps (what the shim translates into 2026-07-28 requests).
KEPT_CAPABILITIES: Final = ("elicitation", "sampling", "roots", "experimental")
#: How long a legacy session lives after its last use (memory and Valkey session stores alike).
SESSION_TTL_S: Final = 3600
_SWEEP_EVERY_S: Final = 60.0
_INDEX_LIFETIME_S: Final = 7 * 86_400.0
_INDEX_PER_SCOPE: Final = 10_000
_IDENTITY_CHARS: Final = 200
#: Messages one subscriber of a session's bus may have waiting, as on Valkey (``store/connection/channels.py``):
#: past it the oldest is dropped, so a stream that does not read holds no more.
_BUS_QUEUE: Final = 1024


class TooManySessions(Exception):
    """The principal already has as many live sessions as it may."""


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
        return f"session:{self.session_id}" if self.principal == "anonymous" else f"principal:{self.principal}"

    @property
    def watch_scope(self) -> str:
        """The tasks this session's GET stream follows: those it created, and those it read by id
        (a task handed over from another session)."""
        return f"watch:{self.session_id}"


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


def kept_capabilities(capabilities: object) -> dict[str, Any]:
    """The part of a client's ``initialize`` capabilities a session keeps: the shim needs no more, and a
    client must not make the store keep arbitrary JSON for the session's whole life."""
    return _kept(capabilities, KEPT_CAPABILITIES)


def client_identity(client_info: object) -> dict[str, str] | None:
    """``clientInfo`` as a session keeps it: its short text fields only."""
    if not isinstance(client_info, dict):
        return None
    kept = {
        name: value[:_IDENTITY_CHARS]
        for name in ("name", "version", "title")
        if isinstance(value := client_info.get(name), str)
    }
    return kept or None


class SessionStore(Protocol):
    @property
    def places(self) -> OwnerPlaces:
        """Owners' places for the tasks the shim keeps itself, when it is given no task store's."""
        ...

    async def create(self, session: LegacySession, cap: int) -> None:
        """Keep a new session, unless its principal already has ``cap`` live ones (0: no cap): then
        raise :class:`TooManySessions`."""
        ...

    async def save(self, session: LegacySession) -> None: ...

    async def load(self, session_id: str) -> LegacySession | None: ...

    async def delete(self, session: LegacySession) -> None: ...

    async def publish(self, session_id: str, message: dict[str, Any]) -> None: ...

    def subscribe(self, session_id: str) -> contextlib.AbstractAsyncContextManager[asyncio.Queue[dict[str, Any]]]:
        """Messages published to the session from now on (the subscription is live on entry); after a
        reconnection of the bus, a :data:`RECONNECTED` message."""
        ...

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        """Add the task to ``scope``'s list; ``True`` if it was not in it yet."""
        ...

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]: ...

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        """Keep a task the shim made itself (see ``LegacyTasks.inline_as_task``)."""
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
    """Sessions of one process (the embedded default). Every map is swept of lapsed entries every minute
    (:meth:`sweep`) and never holds more than :data:`CEILING` entries (the oldest go first), so the
    process can run for weeks."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[str, tuple[LegacySession, float]] = {}
        self._by_principal: defaultdict[str, set[str]] = defaultdict(set)
        self._queues: defaultdict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        #: scope -> task id -> (created ms, time the entry lapses)
        self._index: defaultdict[str, dict[str, tuple[int, float]]] = defaultdict(dict)
        self._cancelled: dict[str, float] = {}
        self._tasks: dict[str, tuple[dict[str, Any], float]] = {}
        self._held: dict[str, tuple[str, float]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.places = MemoryPlaces()

    def _start_sweeping(self) -> None:
        if self._sweeper is None:
            with contextlib.suppress(RuntimeError):  # no running loop (used synchronously in a test)
                self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_EVERY_S)
            self.sweep()

    def sweep(self) -> None:
        """Drop every lapsed entry, and the oldest beyond each ceiling."""
        now = self._clock()
        self._sessions = within_ceiling({key: value for key, value in self._sessions.items() if value[1] > now})
        by_principal: defaultdict[str, set[str]] = defaultdict(set)
        for session_id, (session, _) in self._sessions.items():
            by_principal[session.principal].add(session_id)
        self._by_principal = by_principal
        self._cancelled = within_ceiling({key: until for key, until in self._cancelled.items() if until > now})
        self._tasks = within_ceiling({key: value for key, value in self._tasks.items() if value[1] > now})
        self._held = within_ceiling({key: value for key, value in self._held.items() if value[1] > now})
        self.places.sweep()
        for scope in list(self._index):
            live = {task_id: entry for task_id, entry in self._index[scope].items() if entry[1] > now}
            if live:
                self._index[scope] = within_ceiling(live, _INDEX_PER_SCOPE)
            else:
                del self._index[scope]

    def sizes(self) -> dict[str, int]:
        """How many entries each map holds (for tests and operators)."""
        return {
            "sessions": len(self._sessions),
            "index": sum(len(entries) for entries in self._index.values()),
            "cancelled": len(self._cancelled),
            "tasks": len(self._tasks),
            "held": len(self._held),
        }

    async def create(self, session: LegacySession, cap: int) -> None:
        self._start_sweeping()
        now = self._clock()
        mine = self._by_principal[session.principal]
        for session_id in [key for key in mine if self._sessions.get(key, (None, 0.0))[1] <= now]:
            mine.discard(session_id)
            self._sessions.pop(session_id, None)
        if 0 < cap <= len(mine):
            raise TooManySessions(session.principal)
        mine.add(session.session_id)
        await self.save(session)

    async def save(self, session: LegacySession) -> None:
        self._sessions[session.session_id] = (session, self._clock() + self._ttl_s)
        if len(self._sessions) > CEILING:
            self.sweep()

    async def load(self, session_id: str) -> LegacySession | None:
        found = self._sessions.get(session_id)
        if found is None or found[1] < self._clock():
            self._sessions.pop(session_id, None)
            return None
        self._sessions[session_id] = (found[0], self._clock() + self._ttl_s)
        return found[0]

    async def delete(self, session: LegacySession) -> None:
        self._sessions.pop(session.session_id, None)
        self._by_principal[session.principal].discard(session.session_id)

    async def publish(self, session_id: str, message: dict[str, Any]) -> None:
        for queue in self._queues.get(session_id, ()):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(message)

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(_BUS_QUEUE)
        self._queues[session_id].add(queue)
        try:
            yield queue
        finally:
            self._queues[session_id].discard(queue)
            if not self._queues[session_id]:
                del self._queues[session_id]

    async def index_task(self, scope: str, task_id: str, created_ms: int) -> bool:
        index = self._index[scope]
        fresh = task_id not in index
        index[task_id] = (index[task_id][0] if not fresh else created_ms, self._clock() + _INDEX_LIFETIME_S)
        if len(index) > _INDEX_PER_SCOPE:
            self._index[scope] = within_ceiling(index, _INDEX_PER_SCOPE)
        return fresh

    async def list_tasks(self, scope: str, offset: int, limit: int) -> list[str]:
        ordered = sorted(self._index.get(scope, {}).items(), key=lambda item: (item[1][0], item[0]))
        return [task_id for task_id, _ in ordered[offset : offset + limit]]

    async def save_task(self, task: dict[str, Any], ttl_ms: int) -> None:
        self._tasks[str(task["taskId"])] = (task, self._clock() + ttl_ms / 1000)

    async def load_task(self, task_id: str) -> dict[str, Any] | None:
        found = self._tasks.get(task_id)
        return found[0] if found is not None and found[1] > self._clock() else None

    async def mark_cancelled(self, task_id: str, ttl_ms: int) -> None:
        self._cancelled[task_id] = self._clock() + ttl_ms / 1000

    async def was_cancelled(self, task_id: str) -> bool:
        return self._cancelled.get(task_id, 0.0) > self._clock()

    async def hold(self, key: str, holder: str, ttl_ms: int) -> bool:
        now = self._clock()
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
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
