"""What the engine and the workers need from a task store, one small protocol per noun.

* :class:`Records`: the tasks themselves (create, read, compare-and-set).
* :class:`RunQueue`: queued executions of tasks, delivered to workers at least once.
* :class:`Broadcast`: the changes of one task, to whoever watches it (listeners, the worker running it).
* :class:`Claims`: single-use keys with a lifetime (single-use requestState, poll-rate limits).

:class:`TaskStore` is all four plus the owners' places, opening and closing: what the composition root
builds and the contract tests check. A consumer is typed by the nouns it uses, not by it: the engine's
task methods by records, claims and broadcast (``EngineStore`` in :mod:`ext_tasks.task_methods`), a
worker by the queue, records and broadcast (``WorkerStore`` in :mod:`ext_tasks.worker`), a commit
through an outage by the records, the legacy shim by the places. Guarantees every implementation gives (the
contract tests in ``tests/contract`` check them on memory, one Valkey and a Valkey Cluster):

* ``create`` is durable before it returns, and queues the task's first run in the same atomic step.
  With an :class:`IdempotencyClaim` it first looks the claim's key up, in the same step: if a task
  was already created under it (within its window), nothing is created and that task is named
  instead, so concurrent resends on any instances start exactly one run.
* ``commit`` is a compare-and-set on ``version``: it applies ``after`` only if the stored record still
  has ``before.version``; otherwise nothing changes and it returns ``False``. In the same atomic step it
  can queue a run (so a crash can never leave a task that needs a run without one) and acknowledge the
  run that produced the change (so a worker's outcome and its acknowledgement are one round trip).
* Every successful commit reaches the task's watchers (``watch``), in commit order; a watcher that
  subscribes and then reads the record misses nothing.
* Records disappear when their TTL lapses; ``lookup`` then answers :class:`Expired` (for a while) rather
  than ``None``, so clients are told "expired" instead of "not found". A commit may move the TTL (a
  finished task is kept its retention from its end): the record, and the "expired" after it, follow.
* Waits for input with a deadline are listed by :meth:`InputDeadlines.overdue` once it has passed, so a
  sweep ends them without anyone reading them.
* The owner's caps (:class:`ActiveLimit`: unfinished tasks, kept tasks, bytes kept) are exact: checked
  and charged in one atomic step, so concurrent creations on any instances never go past them; a
  task's place (and the bytes it is charged) lapses with the task (:class:`OwnerPlaces`).
* A commit may instead schedule the task's next run for later (``retry_at_ms``, a retry with backoff):
  the run is kept in the store, due at that wall-clock instant, until ``promote_due`` queues it; a
  worker that schedules a run and stops loses nothing, since any worker's promotion queues it.
* Runs are delivered at least once: a run taken by a worker that stops heartbeating is handed to
  another worker by ``reclaim`` once it has been idle longer than the lease. ``Run.attempt`` counts the
  deliveries of the run (a reclaimed or given-back run comes back with the next number).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final, Protocol, TypedDict, Unpack

from ..protocol.tasks import TaskRecord
from .connection.errors import TaskStoreUnavailable as TaskStoreUnavailable  # raised there, caught from here
from .ids import partition_of_key
from .listing import TaskListing

#: How long an expired task is still reported as "expired" rather than "not found".
TOMBSTONE_MS: Final = 24 * 3600 * 1000


class Expired:
    """The task existed and its TTL has lapsed. ``owner`` lets callers answer a stranger "not found"."""

    __slots__ = ("owner",)

    def __init__(self, owner: str) -> None:
        self.owner = owner


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """``key`` is already scoped to the principal (callers hash principal and client key together);
    ``fingerprint`` identifies the tool and arguments the key was first used with."""

    key: str
    fingerprint: str
    window_ms: int

    @property
    def partition(self) -> str:
        """The partition a task created under this key must have (``new_task_id(claim.partition)``), so
        the key and the task share one slot."""
        return partition_of_key(self.key)


@dataclass(frozen=True, slots=True)
class ActiveLimit:
    """At most ``cap`` tasks of one owner may be unfinished (and unexpired) at once, at most
    ``stored_cap`` kept in any status, and those kept may hold at most ``max_bytes`` bytes in all
    (:func:`~ext_tasks.protocol.tasks.stored_bytes`; 0: no such cap)."""

    cap: int
    now_ms: int
    stored_cap: int = 0
    max_bytes: int = 0

    @property
    def counts(self) -> bool:
        """Whether any cap is set (else an owner's places need not be kept)."""
        return self.cap > 0 or self.stored_cap > 0 or self.max_bytes > 0


class OverCap(Exception):
    """A creation (or a growth) refused by one of the owner's caps."""


class TooManyActiveTasks(OverCap):
    """``create`` refused: the owner already has ``ActiveLimit.cap`` unfinished tasks."""


class TooManyStoredTasks(OverCap):
    """``create`` refused: the owner already has ``ActiveLimit.stored_cap`` tasks kept (any status)."""


class TooManyStoredBytes(OverCap):
    """Refused: what the owner keeps would go past ``ActiveLimit.max_bytes``."""


@dataclass(frozen=True, slots=True)
class Place:
    """What an owner's caps count of one thing kept: ``size`` bytes until ``expires_at_ms`` (``None``:
    never), and unfinished (counted by the active cap too) until ``finished``."""

    owner: str
    member: str
    expires_at_ms: int | None
    size: int
    finished: bool = False


class OwnerPlaces(Protocol):
    """Each owner's places: one per task kept (and per task the legacy shim keeps itself), in one atomic
    ledger per owner, so its caps are exact across instances."""

    async def take(self, place: Place, limit: ActiveLimit) -> None:
        """Count ``place``, unless a cap of ``limit`` refuses it: :class:`TooManyStoredTasks`, then
        :class:`TooManyActiveTasks` (an unfinished place), then :class:`TooManyStoredBytes`. Places
        that lapsed by ``limit.now_ms`` no longer count, and their bytes are given back."""
        ...

    async def grow(self, place: Place, limit: ActiveLimit) -> None:
        """Charge a counted place ``place.size`` bytes if that is more than it is charged now, unless
        that takes its owner past ``limit.max_bytes`` (:class:`TooManyStoredBytes`). A place charged
        nothing (taken without a byte cap) stays so."""
        ...

    async def settle(self, place: Place) -> None:
        """The place's thing finished, or its expiry moved: it no longer counts as unfinished, lapses
        at ``place.expires_at_ms``, and (if it is charged) is charged ``place.size`` from now on."""
        ...

    async def give_back(self, owner: str, member: str) -> None:
        """Forget a place (and its bytes) at once."""
        ...

    async def charged(self, owner: str) -> int:
        """The bytes ``owner``'s places are charged now (lapsed places count until a cap forgets them)."""
        ...


@dataclass(frozen=True, slots=True)
class ExistingTask:
    """The task an idempotency key already names."""

    task_id: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Run:
    """One queued execution of a task. ``delivery`` identifies it in the queue (for ack and heartbeat);
    ``attempt`` is 1 the first time it is delivered, and one more each time it comes back because its
    worker stopped (or gave it back at shutdown)."""

    task_id: str
    delivery: str
    attempt: int = 1


#: What a watcher of a task receives: ``None`` when the subscription is live (again, after a break:
#: changes may have been missed, read the record), else the record as that commit left it. The store
#: publishes record versions; what a client is sent of one is rendered above it (:mod:`ext_tasks.notify`).
WatchItem = TaskRecord | None


class Followups(TypedDict, total=False):
    """What a commit also does, in the same atomic step as the change: ``enqueue`` queues a run of the
    task, ``retry_at_ms`` schedules one due then (:meth:`RunQueue.promote_due` queues it), ``finishing``
    acknowledges the run that produced the change."""

    enqueue: bool
    finishing: Run | None
    retry_at_ms: int | None


#: What :meth:`FlowGates.enter` answers when the run entered (else: how many wait ahead of it).
ENTERED = -1


@dataclass(frozen=True, slots=True)
class Gate:
    """``name`` says what it bounds (``tool:deploy``, ``tool:deploy:key:billing``, ``principal:<id>``);
    at most ``limit`` runs hold a place in it at once."""

    name: str
    limit: int


class FlowGates(Protocol):
    async def enter(self, gate: Gate, task_id: str, *, now_ms: int, hold_ms: int, wait_ms: int) -> int:
        """Take a place in ``gate`` for ``task_id`` until ``now_ms + hold_ms`` (a place it holds is
        renewed): :data:`ENTERED`. If the gate is full, or runs that came before wait for the free
        places, the task waits in line instead (keeping the place in line it had, until
        ``now_ms + wait_ms``) and the answer is how many runs are ahead of it. Places and waits that
        lapsed by ``now_ms`` are dropped first."""
        ...

    async def renew(self, gate: Gate, task_id: str, *, until_ms: int) -> bool:
        """Keep the task's place until ``until_ms``; ``False`` if it holds none (it lapsed)."""
        ...

    async def leave(self, gate: Gate, task_id: str, *, now_ms: int) -> list[str]:
        """Give back the task's place, or its wait in line; the tasks first in line that may enter now
        (as many as there are free places), to be woken."""
        ...

    async def take_token(self, bucket: str, *, rate_per_s: float, burst: int, now_ms: int) -> int:
        """Take a token from ``bucket`` (full at first): 0, or else the milliseconds until one is there."""
        ...


class Records(Protocol):
    async def create(
        self,
        record: TaskRecord,
        idempotency: IdempotencyClaim | None = None,
        limit: ActiveLimit | None = None,
        *,
        start_at_ms: int | None = None,
    ) -> ExistingTask | None:
        """Create ``record`` (and queue its run, or with ``start_at_ms`` schedule it due then: a run
        that waits in a gate's line); or, if ``idempotency`` names an earlier task, only return that
        task. With ``limit``, first take the task's place (charged its
        :func:`~ext_tasks.protocol.tasks.stored_bytes`): an :class:`OverCap` refusal creates nothing."""
        ...

    async def lookup(self, task_id: str) -> TaskRecord | Expired | None: ...

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        """The owner of each live task among ``task_ids`` (in one round trip per shard: listen checks up
        to a thousand ids at once)."""
        ...

    async def commit(self, before: TaskRecord, after: TaskRecord, **then: Unpack[Followups]) -> bool:
        """Replace ``before`` by ``after`` if the stored version is still ``before.version``, and do what
        ``then`` says in the same step (:class:`Followups`). A task that finished (or whose expiry moved)
        then settles its place, charged the finished record's size."""
        ...


class InputDeadlines(Protocol):
    async def overdue(self, now_ms: int, count: int) -> list[TaskRecord]:
        """Up to ``count`` tasks waiting in ``input_required`` whose ``deadline_ms`` is ``now_ms`` or
        earlier, soonest first. A commit that takes a task out of ``input_required`` (or gives it another
        deadline) takes it off this list in the same step; an entry whose task is gone is dropped."""
        ...


class RunQueue(Protocol):
    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        """Up to ``count`` new runs for ``consumer``, waiting at most ``block_ms`` for one."""
        ...

    async def heartbeat(self, consumer: str, runs: list[Run]) -> list[Run]:
        """Tell the queue that ``consumer`` still works on ``runs`` (keeps them from being reclaimed);
        returns those of ``runs`` it no longer holds (reclaimed by another worker after a pause longer
        than the lease, or forgotten by a promoted replica): their execution must stop, unacknowledged."""
        ...

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        """Take over runs whose worker has not heartbeated for ``min_idle_ms``."""
        ...

    async def ack(self, run: Run) -> None: ...

    async def wake(self, task_ids: Sequence[str]) -> int:
        """Queue the scheduled runs of ``task_ids`` at once, whenever they were due (a gate's place came
        free for them); a task with no scheduled run is left alone. Returns how many were queued."""
        ...

    async def requeue(self, run: Run) -> None:
        """Give a run back to the queue at once (graceful shutdown), so another worker takes it; it
        comes back as the next attempt."""
        ...

    async def queue_depth(self) -> int:
        """Runs queued or in flight (for the metrics)."""
        ...

    async def promote_due(self, now_ms: int, task_ids: Sequence[str] = ()) -> int:
        """Queue the scheduled runs due by ``now_ms`` (each once, however many workers promote at once);
        ``task_ids`` narrows the look to their partitions (empty: every partition). Returns how many."""
        ...


class Broadcast(Protocol):
    def watch(self, task_id: str) -> AbstractAsyncContextManager[asyncio.Queue[WatchItem]]:
        """The task's changes while the block runs: first ``None`` once nothing committed from then on
        can be missed, then each committed change (``None`` again after a reconnection)."""
        ...


class Claims(Protocol):
    async def claim(self, key: str, ttl_ms: int) -> bool:
        """Take ``key`` for ``ttl_ms`` unless someone holds it: ``True`` the first time, ``False`` after
        (used for single-use requestState and for polling rate limits)."""
        ...


class TaskStore(Records, RunQueue, Broadcast, Claims, InputDeadlines, Protocol):
    @property
    def places(self) -> OwnerPlaces:
        """The owners' places, which ``create`` takes and ``commit`` settles; the engine grows a place
        before it merges answers, and the legacy shim counts its own tasks there."""
        ...

    @property
    def gates(self) -> FlowGates:
        """Flow control's gates and token buckets (:mod:`.gates`)."""
        ...

    @property
    def listing(self) -> TaskListing:
        """The operator's view of what the store keeps (:mod:`.listing`): the admin listener's only."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise :class:`TaskStoreUnavailable` unless the store answers."""
        ...
