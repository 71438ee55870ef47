"""The operator's view of the tasks: listing with filters, totals, one task's detail, cancelling one and
purging finished ones (what the admin listener serves, :mod:`ext_tasks.admin_http`).

It reads the store's listing (:mod:`ext_tasks.store.listing`): rows, and the runs workers hold. A task
is **stuck** when nothing will move it on by itself:

* ``working`` with no live lease: its run is held by a worker that has not heartbeated for longer than
  the lease (the worker died, or hangs; another worker reclaims it once it polls), or no worker has
  taken its run for longer than the lease (no worker is running, or all are busy), counted from when
  the run was due for a task waiting for a retry;
* ``input_required`` for longer than the limit (``EXT_TASKS_ADMIN_STUCK_INPUT_S``): the client that
  should answer seems gone.

Everything here is JSON for the admin API (camelCase, times in Unix milliseconds). A sensitive task's
arguments, answers and result are never shown.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from .clock import now_ms
from .lifecycle import task_event
from .protocol.states import TERMINAL, TaskEvent, TaskStatus
from .protocol.tasks import TaskRecord, cancelled
from .store.base import Expired, TaskStore
from .store.listing import Lease, TaskRow, row_of
from .tracing import trace_id_of

logger = logging.getLogger("ext_tasks.operator")

#: The most tasks one listing returns (totals count them all).
MAX_LISTED: Final = 1000
#: How often a cancel retries a compare-and-set that a worker's commit keeps winning.
_CANCEL_TRIES: Final = 20
OPERATOR_CANCEL_MESSAGE: Final = "The task was cancelled by an operator."


class StillChanging(Exception):
    """A cancel lost every compare-and-set to the task's own commits; nothing changed, retry."""


@dataclass(frozen=True, slots=True)
class StuckRule:
    """When a task counts as stuck: ``lease_ms`` (the workers' lease) and ``input_limit_ms``."""

    lease_ms: int
    input_limit_ms: int

    def reason(self, row: TaskRow, lease: Lease | None, now: int) -> str | None:
        quiet_ms = now - row.updated_at_ms
        if row.status is TaskStatus.INPUT_REQUIRED and quiet_ms > self.input_limit_ms:
            return f"input_required for {quiet_ms // 1000} s (limit {self.input_limit_ms // 1000} s)"
        if row.status is not TaskStatus.WORKING:
            return None
        if lease is not None:
            if lease.idle_ms <= self.lease_ms:
                return None
            return f"its worker {lease.holder} has not heartbeated for {lease.idle_ms // 1000} s"
        # A run waiting for its retry is due only then: quiet from then on.
        quiet_ms = now - max(row.updated_at_ms, row.retry_at_ms or 0)
        if quiet_ms > self.lease_ms:
            return f"no worker has taken its run for {quiet_ms // 1000} s"
        return None


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks a listing or a purge is about; every criterion given must hold."""

    statuses: frozenset[TaskStatus] = frozenset()
    tool: str | None = None
    principal: str | None = None
    #: Created at least / at most this long ago.
    older_than_ms: int | None = None
    newer_than_ms: int | None = None
    min_attempts: int | None = None
    stuck: bool = False
    limit: int = MAX_LISTED

    @classmethod
    def from_query(cls, query: Mapping[str, list[str]]) -> TaskFilter:
        """The filter of the admin API's query (``status`` repeated or comma-separated, ``tool``,
        ``principal``, ``older_than_s``, ``newer_than_s``, ``min_attempts``, ``stuck``, ``limit``);
        ``ValueError`` names what does not parse."""

        def one(name: str) -> str | None:
            values = query.get(name) or []
            return values[-1] if values and values[-1] != "" else None

        def number(name: str, scale: int = 1) -> int | None:
            text = one(name)
            if text is None:
                return None
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{name} must be a number") from None
            if value < 0:
                raise ValueError(f"{name} must not be negative")
            return int(value * scale)

        names = [part.strip() for value in query.get("status") or [] for part in value.split(",") if part.strip()]
        try:
            statuses = frozenset(TaskStatus(name) for name in names)
        except ValueError:
            raise ValueError(f"status must be among {', '.join(s.value for s in TaskStatus)}") from None
        return cls(
            statuses=statuses,
            tool=one("tool"),
            principal=one("principal"),
            older_than_ms=number("older_than_s", 1000),
            newer_than_ms=number("newer_than_s", 1000),
            min_attempts=number("min_attempts"),
            stuck=(one("stuck") or "").lower() in ("1", "true", "yes"),
            limit=MAX_LISTED if (limit := number("limit")) is None else min(MAX_LISTED, limit),
        )

    def admits(self, row: TaskRow, now: int, stuck: str | None) -> bool:
        age = now - row.created_at_ms
        return (
            (not self.statuses or row.status in self.statuses)
            and (self.tool is None or row.tool == self.tool)
            and (self.principal is None or row.owner == self.principal)
            and (self.older_than_ms is None or age >= self.older_than_ms)
            and (self.newer_than_ms is None or age <= self.newer_than_ms)
            and (self.min_attempts is None or row.attempts >= self.min_attempts)
            and (not self.stuck or stuck is not None)
        )


@dataclass
class Totals:
    status: Counter[str] = field(default_factory=Counter)
    tool: Counter[str] = field(default_factory=Counter)
    principal: Counter[str] = field(default_factory=Counter)
    stuck: int = 0

    def add(self, row: TaskRow, stuck: bool) -> None:
        self.status[row.status.value] += 1
        self.tool[row.tool] += 1
        self.principal[row.owner] += 1
        self.stuck += stuck

    def as_json(self) -> dict[str, Any]:
        return {
            "all": sum(self.status.values()),
            "stuck": self.stuck,
            "byStatus": {status.value: self.status[status.value] for status in TaskStatus},
            "byTool": dict(self.tool.most_common()),
            "byPrincipal": dict(self.principal.most_common()),
        }


class Operator:
    def __init__(self, store: TaskStore, rule: StuckRule, clock_ms: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.rule = rule
        self._clock_ms = clock_ms

    async def tasks(self, wanted: TaskFilter) -> dict[str, Any]:
        """The tasks ``wanted`` admits (newest first, at most its limit) and their totals."""
        now = self._clock_ms()
        rows = await self.store.listing.rows()
        leases = await self.store.listing.leases()
        totals = Totals()
        shown: list[tuple[TaskRow, Lease | None, str | None]] = []
        for row in rows:
            lease = leases.get(row.task_id)
            stuck = self.rule.reason(row, lease, now)
            if wanted.admits(row, now, stuck):
                totals.add(row, stuck is not None)
                shown.append((row, lease, stuck))
        shown.sort(key=lambda item: item[0].created_at_ms, reverse=True)
        return {
            "now": now,
            "totals": totals.as_json(),
            "tasks": [_row_json(row, lease, stuck, now) for row, lease, stuck in shown[: wanted.limit]],
        }

    async def detail(self, task_id: str) -> dict[str, Any] | None:
        """One task as the operator sees it, with what it keeps (``None``: no such task)."""
        now = self._clock_ms()
        found = await self.store.lookup(task_id)
        if found is None:
            return None
        if isinstance(found, Expired):
            return {"taskId": task_id, "principal": found.owner, "status": "expired"}
        lease = (await self.store.listing.leases()).get(task_id)
        row = row_of(found)
        view = _row_json(row, lease, self.rule.reason(row, lease, now), now)
        hidden = "(sensitive: not shown)"
        view.update(
            version=found.version,
            sensitive=found.sensitive,
            deliveredAt=found.delivered_at_ms,
            arguments=hidden if found.sensitive else found.arguments,
            inputRequests=found.input_requests,
            answeredKeys=sorted(found.answers),
            result=hidden if found.sensitive and found.result is not None else found.result,
        )
        return view

    async def cancel(self, task_id: str) -> dict[str, Any] | None:
        """Cancel an unfinished task (as ``tasks/cancel`` would; its worker is told and stops). A finished
        task is left as it is. ``None``: no such task."""
        for _ in range(_CANCEL_TRIES):
            record = await self.store.lookup(task_id)
            if not isinstance(record, TaskRecord):
                return None
            if record.terminal:
                return {"taskId": task_id, "status": record.status.value, "cancelled": False}
            gone = msgspec.structs.replace(cancelled(record, self._clock_ms()), status_message=OPERATOR_CANCEL_MESSAGE)
            if await self.store.commit(record, gone):
                task_event(record.status, TaskEvent.CANCEL_REQUESTED, gone, by="operator")
                logger.info("task cancelled by an operator", extra={"task_id": task_id})
                return {"taskId": task_id, "status": gone.status.value, "cancelled": True}
        raise StillChanging("the task kept changing concurrently; retry")

    async def purge(self, wanted: TaskFilter) -> dict[str, Any]:
        """Forget now the finished (or expired) tasks ``wanted`` admits; unfinished ones are kept."""
        now = self._clock_ms()
        purged: list[str] = []
        kept = 0
        for row in await self.store.listing.rows():
            if not wanted.admits(row, now, None):  # a finished task is never stuck: `stuck` purges nothing
                continue
            expired = row.expires_at_ms is not None and row.expires_at_ms <= now
            if (row.status in TERMINAL or expired) and await self.store.listing.remove(row.task_id):
                purged.append(row.task_id)
            else:
                kept += 1
        if purged:
            logger.info("tasks purged by an operator", extra={"purged": len(purged), "kept": kept})
        return {"purged": len(purged), "kept": kept, "taskIds": purged}


def _row_json(row: TaskRow, lease: Lease | None, stuck: str | None, now: int) -> dict[str, Any]:
    return {
        "taskId": row.task_id,
        "status": row.status.value,
        "tool": row.tool,
        "principal": row.owner,
        "createdAt": row.created_at_ms,
        "updatedAt": row.updated_at_ms,
        "ageMs": now - row.created_at_ms,
        "expiresAt": row.expires_at_ms,
        "attempts": row.attempts,
        "statusMessage": row.status_message,
        "lastError": row.error,
        "lease": None
        if lease is None
        else {
            "holder": lease.holder,
            "attempt": lease.attempt,
            "idleMs": lease.idle_ms,
            "lastHeartbeat": now - lease.idle_ms,
        },
        "stuck": stuck,
        "traceId": trace_id_of(row.traceparent),
    }
