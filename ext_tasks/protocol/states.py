"""The task status machine of the Tasks extension, as data: the one place that names statuses, events,
lifecycle log events, the statuses the transitions metric counts, and the 2025-11-25 status names.

``TABLE`` has one :class:`Edge` per allowed (status, event): the status it leads to and the lifecycle log
event it writes (``None``: not logged). Everything else is derived from it: ``TRANSITIONS`` (the next
status), :attr:`Edge.enters` (the label of ``ext_tasks_task_transitions_total``), ``TERMINAL``, the legacy
names (:func:`legacy_status`) and the diagram (:func:`mermaid`, ``python -m ext_tasks.protocol.states
--mermaid``). A terminal status takes only ``delivered``, to itself; so "complete after cancel" is a table
miss (:class:`InvalidTransition`), and the caller decides what that means (a late worker result simply
loses). Nothing here has a clock or a store: :func:`~ext_tasks.protocol.tasks.transition` applies an edge
to a record, and ``ext_tasks.lifecycle`` logs and counts it once the store committed it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class TaskStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


class TaskEvent(StrEnum):
    CREATED = "created"  # tools/call created the task, its first run queued (there is no status before)
    RUN_STARTED = "run_started"  # a worker began a run (logged; the queue counts the attempt, nothing is written)
    STATUS_REPORTED = "status_reported"  # the running function set its statusMessage
    INPUT_REQUESTED = "input_requested"  # the function asked the client something
    ANSWERED = "answered"  # tasks/update answered some, not all, of the outstanding requests
    INPUT_PROVIDED = "input_provided"  # the last outstanding request is answered; run again
    RERUN_REQUESTED = "rerun_requested"  # a state-only input_required: nothing to ask, run again with the state
    RETRY_SCHEDULED = "retry_scheduled"  # the attempt failed transiently: the next one is scheduled in the store
    RUN_DEFERRED = "run_deferred"  # a gate of flow control was full: the run waits in its line, scheduled
    SUCCEEDED = "succeeded"  # the function returned (an isError tool result included)
    FAILED = "failed"  # a JSON-RPC-level error, or the run was lost too often
    CANCEL_REQUESTED = "cancel_requested"  # tasks/cancel
    DELIVERED = "delivered"  # tasks/get handed out the terminal outcome for the first time; the status stays


@dataclass(frozen=True, slots=True)
class Edge:
    """One row of the table: ``event`` in ``source`` (``None``: no task yet) leads to ``target``, and is
    logged as ``log`` (``None``: not logged)."""

    source: TaskStatus | None
    event: TaskEvent
    target: TaskStatus
    log: str | None

    @property
    def enters(self) -> TaskStatus | None:
        """The status this edge enters, the label of the transitions metric (``None``: it stays)."""
        return None if self.target is self.source else self.target


_W, _I = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED
_C, _F, _X = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED

#: How a task that is not finished ends: the same three edges from ``working`` and ``input_required``.
_ENDINGS: Final = (
    (TaskEvent.SUCCEEDED, _C, "task.completed"),
    (TaskEvent.FAILED, _F, "task.failed"),
    (TaskEvent.CANCEL_REQUESTED, _X, "task.cancelled"),
)

TABLE: Final[tuple[Edge, ...]] = (
    Edge(None, TaskEvent.CREATED, _W, "task.created"),
    Edge(_W, TaskEvent.RUN_STARTED, _W, None),
    Edge(_W, TaskEvent.STATUS_REPORTED, _W, None),
    Edge(_W, TaskEvent.RERUN_REQUESTED, _W, "task.rerun"),
    Edge(_W, TaskEvent.RETRY_SCHEDULED, _W, "task.retry_scheduled"),
    Edge(_W, TaskEvent.RUN_DEFERRED, _W, "task.run_deferred"),
    Edge(_W, TaskEvent.INPUT_REQUESTED, _I, "task.input_requested"),
    *(Edge(_W, event, target, log) for event, target, log in _ENDINGS),
    Edge(_I, TaskEvent.ANSWERED, _I, "task.answered"),
    Edge(_I, TaskEvent.INPUT_PROVIDED, _W, "task.resumed"),
    *(Edge(_I, event, target, log) for event, target, log in _ENDINGS),
    # A finished task's one edge: its outcome handed out for the first time (the status stays).
    *(Edge(status, TaskEvent.DELIVERED, status, "task.result_retrieved") for status in (_C, _F, _X)),
)

_EDGES: Final[Mapping[tuple[TaskStatus | None, TaskEvent], Edge]] = MappingProxyType(
    {(edge.source, edge.event): edge for edge in TABLE}
)
#: (status, event) -> the next status, for every edge out of an existing task.
TRANSITIONS: Final[Mapping[tuple[TaskStatus, TaskEvent], TaskStatus]] = MappingProxyType(
    {(edge.source, edge.event): edge.target for edge in TABLE if edge.source is not None}
)
#: The statuses whose only edge is ``delivered``, to themselves.
TERMINAL: Final = frozenset(
    status for status in TaskStatus if {e.event for e in TABLE if e.source is status} == {TaskEvent.DELIVERED}
)


class InvalidTransition(Exception):
    def __init__(self, status: TaskStatus | None, event: TaskEvent) -> None:
        source = "a task not created yet" if status is None else repr(status.value)
        super().__init__(f"no transition from {source} on {event.value!r}")
        self.status = status
        self.event = event


def edge(source: TaskStatus | None, event: TaskEvent) -> Edge:
    """The table's row for ``event`` in ``source`` (``None``: no task yet).

    Raises:
        InvalidTransition: the table has no such row.
    """
    try:
        return _EDGES[(source, event)]
    except KeyError:
        raise InvalidTransition(source, event) from None


def next_status(status: TaskStatus, event: TaskEvent) -> TaskStatus:
    return edge(status, event).target


# --- 2025-11-25 ---------------------------------------------------------------------------------------

#: The 2025-11-25 (experimental tasks) name of each status: that revision has the same five.
LEGACY_STATUS: Final[Mapping[TaskStatus, str]] = MappingProxyType({status: status.value for status in TaskStatus})
#: What a status reads as in 2025-11-25 when the task's tool result has ``isError``: a tool error is a
#: ``failed`` task there (a legacy client that never calls ``tasks/result`` sees it in the status).
LEGACY_TOOL_ERROR: Final[Mapping[TaskStatus, str]] = MappingProxyType({_C: LEGACY_STATUS[_F]})
LEGACY_TERMINAL: Final = frozenset(LEGACY_STATUS[status] for status in TERMINAL)
_BY_VALUE: Final = MappingProxyType({status.value: status for status in TaskStatus})


def legacy_status(status: str, *, tool_error: bool = False) -> str:
    """The 2025-11-25 status of a task in wire status ``status`` (``tool_error``: its tool result has
    ``isError``); a status this table does not know, from some other server, is passed on as it is."""
    known = _BY_VALUE.get(status)
    if known is None:
        return status
    if tool_error and known in LEGACY_TOOL_ERROR:
        return LEGACY_TOOL_ERROR[known]
    return LEGACY_STATUS[known]


# --- the diagram --------------------------------------------------------------------------------------

MERMAID_COMMAND: Final = "python -m ext_tasks.protocol.states --mermaid"


def mermaid(table: Sequence[Edge] = TABLE) -> str:
    """The table as a Mermaid ``stateDiagram-v2``: one arrow per row, labelled with the event and the log
    event it writes (docs/architecture.md, "Task states", holds a copy that a unit test compares)."""
    lines = ["stateDiagram-v2", f"    %% generated from ext_tasks/protocol/states.py: {MERMAID_COMMAND}"]
    for row in table:
        label = row.event.value if row.log is None else f"{row.event.value} / {row.log}"
        lines.append(f"    {'[*]' if row.source is None else row.source.value} --> {row.target.value} : {label}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    if list(argv) != ["--mermaid"]:
        sys.stderr.write(f"usage: {MERMAID_COMMAND}\n")
        return 2
    sys.stdout.write(mermaid())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
