"""What an operator reads of a store: every task kept, and who holds each run (the admin listener's
data; :mod:`ext_tasks.operator` filters and totals it).

The protocol has no listing, on purpose; the stores have one for their operator only. It reads what
the stores keep anyway, so the hot path pays nothing for it:

* **Rows** (:class:`TaskRow`): the small fields of each task record (never its arguments, answers or
  result: a page of rows stays small). Valkey: ``SCAN`` of each primary for the task keys, then the
  fields of each (pipelined).
* **Leases** (:class:`Lease`): each run a worker holds, its holder, how long since its last heartbeat
  and its attempt. Valkey: the pending entries of each partition's run stream (a worker's heartbeat
  re-claims its entries, so an entry's idle time is the time since its holder's last heartbeat).
* **Removal** of a finished task (``purge``): the record and its tombstone, and its owner's place.

The creating request's W3C ``traceparent``, kept with the record by tracing (``TaskRecord.trace_context``,
the hash field of the same name, :data:`TRACE_FIELD`), is listed with it; a record without one (tracing
off) shows none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..protocol.states import TaskStatus
from ..protocol.tasks import TaskRecord

#: The record field (and Valkey hash field) holding the creating request's W3C ``traceparent``.
TRACE_FIELD: Final = "trace_context"
#: The scalar fields a row is made of (and the structured ``error``), as the Valkey hash names them.
ROW_FIELDS: Final = (
    "task_id",
    "owner",
    "tool",
    "status",
    "created_at_ms",
    "updated_at_ms",
    "ttl_ms",
    "attempts",
    "retry_at_ms",
    "status_message",
    "error",
    TRACE_FIELD,
)


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task as an operator's list shows it."""

    task_id: str
    owner: str
    tool: str
    status: TaskStatus
    created_at_ms: int
    updated_at_ms: int
    expires_at_ms: int | None
    attempts: int
    status_message: str | None = None
    error: Mapping[str, Any] | None = None
    traceparent: str | None = None
    #: When the task's last scheduled retry is due (a task waiting for it is not stuck until then).
    retry_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A run a worker holds: ``holder`` (its consumer name), ``idle_ms`` since it last heartbeated (or
    took the run), and the run's ``attempt``."""

    task_id: str
    holder: str
    idle_ms: int
    attempt: int


def row_of(record: TaskRecord) -> TaskRow:
    return TaskRow(
        task_id=record.task_id,
        owner=record.owner,
        tool=record.tool,
        status=record.status,
        created_at_ms=record.created_at_ms,
        updated_at_ms=record.updated_at_ms,
        expires_at_ms=record.expires_at_ms,
        attempts=record.attempts,
        status_message=record.status_message,
        error=record.error,
        traceparent=record.trace_context,
        retry_at_ms=record.retry_at_ms,
    )


class TaskListing(Protocol):
    """A store's operator side (memory, one Valkey, a cluster: every partition)."""

    async def rows(self) -> list[TaskRow]:
        """Every task kept now (unexpired), in no particular order."""
        ...

    async def leases(self) -> dict[str, Lease]:
        """The runs workers hold now, by task id (the latest attempt where a task has several)."""
        ...

    async def remove(self, task_id: str) -> bool:
        """Forget a finished task now (record, tombstone, owner's place); ``False`` if it is not
        finished (or gone)."""
        ...
