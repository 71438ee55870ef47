"""Structured lifecycle events of tasks, and the JSON log format.

Each event is one log line (``logger ext_tasks.lifecycle``) with ``event``, ``task_id``, ``tool`` and
``principal`` (a short one-way tag, not the principal itself); with ``EXT_TASKS_LOG_FORMAT=json`` (the
default) every line is one JSON object. Arguments, answers, results, ``requestState`` and credentials
are never logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime
from typing import Any, Final

from .metrics import TASK_TRANSITIONS
from .protocol.tasks import TaskRecord

logger = logging.getLogger("ext_tasks.lifecycle")

#: Events that mean the task entered a status, for the transitions metric.
_ENTERS: Final = {
    "task.created": "working",
    "task.input_requested": "input_required",
    "task.resumed": "working",
    "task.completed": "completed",
    "task.failed": "failed",
    "task.cancelled": "cancelled",
}
_STANDARD_ATTRIBUTES: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def principal_tag(principal: str) -> str:
    return hashlib.sha256(f"ext-tasks/principal/{principal}".encode()).hexdigest()[:12]


def task_event(event: str, record: TaskRecord, **fields: Any) -> None:
    status = _ENTERS.get(event)
    if status is not None:
        TASK_TRANSITIONS.labels(status).inc()
    extra = {"event": event, "task_id": record.task_id, "tool": record.tool, "principal": principal_tag(record.owner)}
    logger.info(event, extra={**extra, **fields})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({key: value for key, value in vars(record).items() if key not in _STANDARD_ATTRIBUTES})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
