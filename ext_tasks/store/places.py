"""Owners' places: what the per-principal caps count, and the in-memory ledger of them.

Every task kept has a place among its owner's: its expiry, whether it is unfinished, and the bytes it
is charged (:func:`~ext_tasks.protocol.tasks.stored_bytes`). The caps of an
:class:`~.base.ActiveLimit` are checked against an owner's places and a new place is taken in one
atomic step (here: one method that never awaits; on Valkey: one script in the owner's slot, see
:mod:`.valkey.places`), so no interleaving of creations goes past them.

What a task is charged, and when:

* at creation, its whole record (arguments, the capabilities kept, answers and state handed over by a
  preflight), checked against the budget;
* before ``tasks/update`` merges answers, the record with them (:meth:`~.base.OwnerPlaces.grow`),
  checked against the budget: answers are the client's, so their growth is refused like a creation;
* when the task finishes, the finished record, unchecked (:meth:`~.base.OwnerPlaces.settle`): what
  the tool produced (its result, at most ``EXT_TASKS_MAX_RESULT_BYTES``, its status message, its
  questions and state) is charged then, since refusing it would throw away work done.

So an owner's charged bytes stay within ``max_bytes`` except by what its unfinished tasks' tools add
when they finish; past the budget it is refused new tasks and answers until enough places lapse. A
place lapses at its task's expiry, and gives its bytes back with it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..clock import now_ms
from ..protocol.tasks import TaskRecord, stored_bytes
from .base import ActiveLimit, Place, TooManyActiveTasks, TooManyStoredBytes, TooManyStoredTasks

#: The expiry of a place whose task never expires.
NEVER_MS = 2**52


def place_of(record: TaskRecord) -> Place:
    """The place ``record`` takes (or settles to) among its owner's."""
    return Place(record.owner, record.task_id, record.expires_at_ms, stored_bytes(record), record.terminal)


def place_changes(before: TaskRecord, after: TaskRecord) -> bool:
    """The task finished, or a finished task's expiry moved (a sensitive outcome was handed out)."""
    return after.terminal and (not before.terminal or after.expires_at_ms != before.expires_at_ms)


class _Ledger:
    """One owner's places: expiry by member, the unfinished ones, and the bytes charged."""

    __slots__ = ("charges", "expiry", "total", "unfinished")

    def __init__(self) -> None:
        self.expiry: dict[str, int] = {}
        self.unfinished: set[str] = set()
        self.charges: dict[str, int] = {}
        self.total = 0

    def lapse(self, now_ms: int) -> None:
        for member in [member for member, until in self.expiry.items() if until <= now_ms]:
            self.forget(member)

    def forget(self, member: str) -> None:
        self.expiry.pop(member, None)
        self.unfinished.discard(member)
        self.total -= self.charges.pop(member, 0)


class MemoryPlaces:
    """The places of one process (the memory task store's, or the legacy proxy's own). No method awaits
    in the middle of a change, so on one event loop each is atomic."""

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or now_ms
        self._owners: dict[str, _Ledger] = {}

    async def take(self, place: Place, limit: ActiveLimit) -> None:
        ledger = self._owners.setdefault(place.owner, _Ledger())
        ledger.lapse(limit.now_ms)
        if 0 < limit.stored_cap <= len(ledger.expiry):
            raise TooManyStoredTasks(place.owner)
        if not place.finished and 0 < limit.cap <= len(ledger.unfinished):
            raise TooManyActiveTasks(place.owner)
        if limit.max_bytes > 0:
            if ledger.total + place.size > limit.max_bytes:
                raise TooManyStoredBytes(place.owner)
            ledger.charges[place.member] = place.size
            ledger.total += place.size
        ledger.expiry[place.member] = NEVER_MS if place.expires_at_ms is None else place.expires_at_ms
        if not place.finished:
            ledger.unfinished.add(place.member)

    async def grow(self, place: Place, limit: ActiveLimit) -> None:
        ledger = self._owners.get(place.owner)
        charged = None if ledger is None else ledger.charges.get(place.member)
        if ledger is None or charged is None or place.size <= charged:
            return
        if ledger.total + place.size - charged > limit.max_bytes > 0:
            ledger.lapse(limit.now_ms)
            if ledger.total + place.size - charged > limit.max_bytes:
                raise TooManyStoredBytes(place.owner)
        ledger.charges[place.member] = place.size
        ledger.total += place.size - charged

    async def settle(self, place: Place) -> None:
        ledger = self._owners.get(place.owner)
        if ledger is None or place.member not in ledger.expiry:
            return
        ledger.unfinished.discard(place.member)
        ledger.expiry[place.member] = NEVER_MS if place.expires_at_ms is None else place.expires_at_ms
        charged = ledger.charges.get(place.member)
        if charged is not None:
            ledger.charges[place.member] = place.size
            ledger.total += place.size - charged

    async def give_back(self, owner: str, member: str) -> None:
        ledger = self._owners.get(owner)
        if ledger is not None:
            ledger.forget(member)

    def sweep(self) -> None:
        """Forget every lapsed place, and owners left without any."""
        now = self._clock_ms()
        for owner in list(self._owners):
            ledger = self._owners[owner]
            ledger.lapse(now)
            if not ledger.expiry:
                del self._owners[owner]

    def sizes(self) -> dict[str, int]:
        """Places unfinished, places kept, and bytes charged, over every owner (for tests and operators)."""
        ledgers = self._owners.values()
        return {
            "active": sum(len(ledger.unfinished) for ledger in ledgers),
            "stored": sum(len(ledger.expiry) for ledger in ledgers),
            "bytes": sum(ledger.total for ledger in ledgers),
        }

    async def charged(self, owner: str) -> int:
        ledger = self._owners.get(owner)
        return 0 if ledger is None else ledger.total
