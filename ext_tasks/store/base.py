"""The one interface the engine and the workers need from a task store.

Guarantees every implementation gives (the contract tests in ``tests/contract`` check them):

* ``create`` is durable before it returns, and queues the task's first run in the same atomic step.
  With an :class:`IdempotencyClaim` it first looks the claim's key up, in the same step: if a task
  was already created under it (within its window), nothing is created and that task is named
  instead, so concurrent resends on any instances start exactly one run.
* ``commit`` is a compare-and-set on ``version``: it applies a new record only if the stored one still
  has ``expect_version``; otherwise nothing changes and it returns ``False``. When asked, it queues a
  run and/or announces a cancellation in the same atomic step, so a crash can never leave a task
  that needs a run without one.
* Every create and successful commit is announced (``task_events``) in the same atomic step, so
  listeners on any instance see each transition once and in order.
* Records disappear when their TTL lapses; ``lookup`` then answers :class:`Expired` (for a while) rather
  than ``None``, so clients are told "expired" instead of "not found".
* Runs are delivered at least once: a run taken by a worker that stops heartbeating is handed to
  another worker by ``reclaim`` once it has been idle longer than the lease.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol.errors import Busy
from ..protocol.tasks import TaskRecord


class Expired:
    """The task existed and its TTL has lapsed. ``owner`` lets callers answer a stranger "not found"."""

    __slots__ = ("owner",)

    def __init__(self, owner: str) -> None:
        self.owner = owner


class TaskStoreUnavailable(Busy):
    """The store cannot be reached: requests fail fast with -32603, HTTP 503 and ``Retry-After``
    instead of hanging."""

    def __init__(self, detail: str) -> None:
        super().__init__("Task store unavailable; retry later")
        self.detail = detail


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """``key`` is already scoped to the principal (callers hash principal and client key together);
    ``fingerprint`` identifies the tool and arguments the key was first used with."""

    key: str
    fingerprint: str
    window_ms: int


@dataclass(frozen=True, slots=True)
class ActiveLimit:
    """At most ``cap`` tasks of one owner may be unfinished (and unexpired) at once, and at most
    ``stored_cap`` kept in any status (0: no such cap)."""

    cap: int
    now_ms: int
    stored_cap: int = 0


class TooManyActiveTasks(Exception):
    """``create`` refused: the owner already has ``ActiveLimit.cap`` unfinished tasks."""


class TooManyStoredTasks(Exception):
    """``create`` refused: the owner already has ``ActiveLimit.stored_cap`` tasks kept (any status)."""


@dataclass(frozen=True, slots=True)
class ExistingTask:
    """The task an idempotency key already names."""

    task_id: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Run:
    """One queued execution of a task; ``delivery`` identifies it in the queue (for ack/heartbeat)."""

    task_id: str
    delivery: str


class TaskStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise :class:`TaskStoreUnavailable` unless the store answers."""
        ...

    async def create(
        self, record: TaskRecord, idempotency: IdempotencyClaim | None = None, limit: ActiveLimit | None = None
    ) -> ExistingTask | None:
        """Create ``record`` (and queue its run); or, if ``idempotency`` names an earlier task, only
        return that task. With ``limit``, raise :class:`TooManyActiveTasks` instead of creating a task
        beyond the owner's cap (checked in the same atomic step)."""
        ...

    async def claim(self, key: str, ttl_ms: int) -> bool:
        """Take ``key`` for ``ttl_ms`` unless someone holds it: ``True`` the first time, ``False`` after
        (used for single-use requestState and for polling rate limits)."""
        ...

    async def lookup(self, task_id: str) -> TaskRecord | Expired | None: ...

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        """The owner of each live task among ``task_ids`` (in one round trip: listen checks up to a
        thousand ids at once)."""
        ...

    async def commit(
        self, record: TaskRecord, *, expect_version: int, enqueue: bool = False, cancel: bool = False
    ) -> bool: ...

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        """Up to ``count`` new runs for ``consumer``, waiting at most ``block_ms`` for one."""
        ...

    async def heartbeat(self, consumer: str, runs: list[Run]) -> None:
        """Tell the queue that ``consumer`` still works on ``runs`` (keeps them from being reclaimed)."""
        ...

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        """Take over runs whose worker has not heartbeated for ``min_idle_ms``."""
        ...

    async def ack(self, run: Run) -> None: ...

    async def queue_depth(self) -> int:
        """Runs queued or in flight (for the metrics)."""
        ...

    async def requeue(self, run: Run) -> None:
        """Give a run back to the queue at once (graceful shutdown), so another worker takes it."""
        ...

    def cancellations(self) -> AsyncIterator[str]:
        """Ids of tasks cancelled anywhere, as they are cancelled."""
        ...

    def task_events(self) -> AsyncIterator[dict[str, Any]]:
        """Every created or committed task (:func:`~ext_tasks.protocol.tasks.task_event`), anywhere, in
        commit order. The first item is an empty dict, yielded once the subscription is live: nothing
        committed after it can be missed (earlier events are not replayed)."""
        ...
