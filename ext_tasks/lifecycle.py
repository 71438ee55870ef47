"""Structured lifecycle events of tasks, and the JSON log format.

Every committed transition is reported here (:func:`task_event`); the status table
(``protocol.states.TABLE``) says whether it is logged, under which name (``task.created``,
``task.completed`` ...), and which status it enters for ``ext_tasks_task_transitions_total``. Each logged
event is one log line (``logger ext_tasks.lifecycle``) with ``event``, ``task_id``, ``tool`` and
``principal`` (a short one-way tag, not the principal itself); with ``EXT_TASKS_LOG_FORMAT=json`` (the
default) every line is one JSON object. Arguments, answers, results, ``requestState`` and credentials
are never logged.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.json import JsonFormatter as BaseJsonFormatter

from .metrics import TASK_TRANSITIONS
from .protocol.states import TaskEvent, TaskStatus, edge
from .protocol.tasks import TaskRecord

logger = logging.getLogger("ext_tasks.lifecycle")


def principal_tag(principal: str) -> str:
    return hashlib.sha256(f"ext-tasks/principal/{principal}".encode()).hexdigest()[:12]


def task_event(source: TaskStatus | None, event: TaskEvent, record: TaskRecord, /, **fields: Any) -> None:
    """Report the committed transition ``event`` out of ``source`` (``None``: the task was created), which
    left ``record``: count the status it enters and log it, as its row in the table says; ``fields`` go
    into the log line.

    Raises:
        InvalidTransition: the table has no such row (a programming error, as is a ``record`` that is
            not in the status the row leads to).
    """
    row = edge(source, event)
    assert row.target is record.status, f"{event.value} from {source} leads to {row.target}, not {record.status}"
    if row.enters is not None:
        TASK_TRANSITIONS.labels(row.enters.value).inc()
    if row.log is None:
        return
    extra = {"event": row.log, "task_id": record.task_id, "tool": record.tool, "principal": principal_tag(record.owner)}
    logger.info(row.log, extra={**extra, **fields})


class JsonFormatter(BaseJsonFormatter):
    """One JSON object per line: time (UTC, milliseconds), level, logger, message, and any ``extra``
    fields; an exception as its formatted traceback. The records are python-json-logger's; this names
    the fields and writes the time and level as the log lines always had them."""

    def __init__(self) -> None:
        super().__init__(
            "{asctime}{levelname}{name}{message}",
            style="{",
            json_default=str,
            rename_fields={"asctime": "ts", "levelname": "level", "name": "logger", "exc_info": "exception"},
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        log_data["level"] = str(log_data["level"]).lower()
        return log_data
