"""What a reader is told of a task: its record rendered as the wire's ``Task``/``DetailedTask`` and the
results that carry one, at the moment it is read (the ``ttlMs`` it is promised then, the poll interval
suggested for its age, a sensitive outcome withheld from a status read, the attempts in ``_meta``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from .result_types import CreateTaskResult, DetailedTask, GetTaskResult, Task
from .states import TaskStatus
from .tasks import META_RETRIES, META_RUN_ATTEMPTS, TaskRecord


def poll_interval(record: TaskRecord, now_ms: int | None) -> int:
    """The suggested poll interval at ``now_ms``: a tenth of the task's age, at least the record's
    starting interval and at most its ceiling. Short tasks are polled briskly, long ones rarely."""
    start = record.poll_interval_ms
    if now_ms is None or record.poll_max_ms is None:
        return start
    return int(min(record.poll_max_ms, max(start, (now_ms - record.created_at_ms) // 10)))


def reported_ttl(record: TaskRecord, now_ms: int | None) -> int | None:
    """The ``ttlMs`` a reader is told at ``now_ms`` (``None``: as of the last update).

    An unfinished task's record is kept until its life's bound (``ttl_ms``: the longest it may stay
    unfinished, and then some), so it never expires while it lives; what a reader is promised is its
    grant counted from now, which moves ahead with every read and never past what is kept. A finished
    task's ``ttl_ms`` is its retention counted from its end: the truth as stored.
    """
    if record.terminal or record.grant_ms is None or record.ttl_ms is None:
        return record.ttl_ms
    at = record.updated_at_ms if now_ms is None else max(now_ms, record.updated_at_ms)
    return min(record.ttl_ms, at - record.created_at_ms + record.grant_ms)


def iso8601(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _task_members(record: TaskRecord, now_ms: int | None) -> dict[str, Any]:
    members: dict[str, Any] = {
        "task_id": record.task_id,
        "status": record.status.value,
        "created_at": iso8601(record.created_at_ms),
        "last_updated_at": iso8601(record.updated_at_ms),
        "ttl_ms": reported_ttl(record, now_ms),
        "poll_interval_ms": poll_interval(record, now_ms),
    }
    if record.status_message is not None:
        members["status_message"] = record.status_message
    return members


_WITHHELD = "The outcome is withheld until it is retrieved"


def _status_member(record: TaskRecord, status_only: bool) -> dict[str, Any]:
    """The member of the record's status (``inputRequests``, ``result`` or ``error``). For a status-only
    read, a sensitive outcome not yet handed out is withheld (whether the tool reported an error stays,
    since a status depends on it)."""
    withheld = status_only and record.sensitive and record.delivered_at_ms is None
    if record.status is TaskStatus.INPUT_REQUIRED:
        return {"input_requests": dict(record.input_requests)}
    if record.status is TaskStatus.COMPLETED and record.result is not None:
        if withheld:
            return {"result": {"content": [], "isError": bool(record.result.get("isError"))}}
        return {"result": record.result}
    if record.status is TaskStatus.FAILED and record.error is not None:
        if withheld:
            return {"error": {"code": record.error.get("code"), "message": _WITHHELD}}
        return {"error": record.error}
    return {}


def create_task_result(record: TaskRecord, now_ms: int | None = None) -> CreateTaskResult:
    """``CreateTaskResult`` (``resultType: "task"``); ``now_ms`` dates the poll-interval suggestion."""
    return CreateTaskResult(**_task_members(record, now_ms))


def get_task_result(record: TaskRecord, now_ms: int | None = None, *, status_only: bool = False) -> GetTaskResult:
    """The ``tasks/get`` result: the ``DetailedTask`` with its run attempts in ``_meta``; ``status_only``
    withholds a sensitive outcome not handed out yet (see :func:`_status_member`)."""
    return GetTaskResult(
        **_task_members(record, now_ms), **_status_member(record, status_only), meta=attempts_meta(record)
    )


def task_wire(record: TaskRecord, now_ms: int | None = None) -> dict[str, Any]:
    """The ``Task`` fields shared by ``CreateTaskResult``, ``tasks/get`` and ``notifications/tasks``, as
    a JSON object; ``now_ms`` dates the poll-interval suggestion."""
    wire: dict[str, Any] = msgspec.to_builtins(Task(**_task_members(record, now_ms)))
    return wire


def detailed_task_wire(record: TaskRecord, now_ms: int | None = None) -> dict[str, Any]:
    """``DetailedTask`` as a JSON object: the status-specific member (inputRequests, result or error)
    included."""
    task = DetailedTask(**_task_members(record, now_ms), **_status_member(record, False))
    wire: dict[str, Any] = msgspec.to_builtins(task)
    return wire


def attempts_meta(record: TaskRecord) -> dict[str, Any]:
    if record.retries:
        return {META_RUN_ATTEMPTS: record.attempts, META_RETRIES: record.retries}
    return {META_RUN_ATTEMPTS: record.attempts}
