"""The task status machine of the Tasks extension, as data.

``TRANSITIONS`` maps (status, event) to the next status. Terminal statuses have no outgoing edge, so
"complete after cancel" is a table miss (:class:`InvalidTransition`), and the caller decides what that
means (a late worker result simply loses). :func:`apply` is pure: no clock, no store.
"""

from __future__ import annotations

from enum import StrEnum
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
    INPUT_REQUESTED = "input_requested"  # the function asked the client something
    INPUT_PROVIDED = "input_provided"  # every outstanding request is answered; run again
    SUCCEEDED = "succeeded"  # the function returned (an isError tool result included)
    FAILED = "failed"  # a JSON-RPC-level error, or the run was lost too often
    CANCEL_REQUESTED = "cancel_requested"
    PROGRESSED = "progressed"  # statusMessage or attempt bookkeeping; the status stays


TERMINAL: Final = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})

_W, _I = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED

TRANSITIONS: Final[dict[tuple[TaskStatus, TaskEvent], TaskStatus]] = {
    (_W, TaskEvent.INPUT_REQUESTED): _I,
    (_W, TaskEvent.SUCCEEDED): TaskStatus.COMPLETED,
    (_W, TaskEvent.FAILED): TaskStatus.FAILED,
    (_W, TaskEvent.CANCEL_REQUESTED): TaskStatus.CANCELLED,
    (_W, TaskEvent.PROGRESSED): _W,
    (_I, TaskEvent.INPUT_PROVIDED): _W,
    (_I, TaskEvent.SUCCEEDED): TaskStatus.COMPLETED,
    (_I, TaskEvent.FAILED): TaskStatus.FAILED,
    (_I, TaskEvent.CANCEL_REQUESTED): TaskStatus.CANCELLED,
    (_I, TaskEvent.PROGRESSED): _I,
}


class InvalidTransition(Exception):
    def __init__(self, status: TaskStatus, event: TaskEvent) -> None:
        super().__init__(f"no transition from {status.value!r} on {event.value!r}")
        self.status = status
        self.event = event


def next_status(status: TaskStatus, event: TaskEvent) -> TaskStatus:
    try:
        return TRANSITIONS[(status, event)]
    except KeyError:
        raise InvalidTransition(status, event) from None
