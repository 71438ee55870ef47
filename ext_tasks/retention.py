"""A tool's retention by outcome (``@registry.tool(retention=Retention(...))``): how long its finished tasks
are kept after their end. The rules that apply it are :mod:`ext_tasks.lifetimes`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retention:
    """How long a tool's finished tasks are kept after their end, by outcome, in milliseconds (``None``:
    the server's ``EXT_TASKS_RETAIN_*_MS``). Never less than the task's lifetime grant nor more than
    ``EXT_TASKS_TASK_MAX_TTL_MS``: ``@registry.tool(retention=Retention(failed_ms=7 * 86_400_000))``."""

    completed_ms: int | None = None
    failed_ms: int | None = None
    cancelled_ms: int | None = None

    def __post_init__(self) -> None:
        for label, value in vars(self).items():
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"Retention.{label} must be a positive integer number of milliseconds")
