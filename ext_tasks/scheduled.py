"""A worker's side of retries with backoff: the outcome of a transient failure, and promoting the
scheduled runs when they are due.

A retry is a run the store keeps scheduled (``commit(..., retry_at_ms=...)``), not a coroutine asleep
here: a worker that stops loses nothing. :class:`DueRuns` keeps what it costs the store small:

* the worker that scheduled a retry remembers when it is due, and its take loop promotes exactly those
  partitions then (one script per partition with something due), shortening its blocking read so the
  retry starts on time, not a block later;
* every ``sweep_every_s`` (the lease: a crashed worker's runs are reclaimed on the same clock) it
  promotes every partition, so a retry scheduled by a worker that died meanwhile runs on another.

With no retry scheduled, the take loop's only extra cost is the sweep: no command per task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from .context import RetryLater
from .protocol.errors import InternalError
from .protocol.states import TaskEvent
from .protocol.tasks import TaskRecord, failed, retry_scheduled
from .retry import GiveUp, Retry, plan_retry
from .store.base import TaskStoreUnavailable

logger = logging.getLogger("ext_tasks.worker")


def retry_outcome(
    record: TaskRecord, policy: Retry | None, asked: RetryLater, now_ms: int
) -> tuple[TaskEvent, TaskRecord, int | None]:
    """The attempt running ``record`` failed transiently (``asked``): the next attempt scheduled, with
    the instant it is due (the task stays ``working`` and says when), or, past the last attempt, the
    task ``failed`` with the last reason and the number of attempts made (and no instant)."""
    plan = plan_retry(policy, record.retries, asked)
    if isinstance(plan, GiveUp):
        error = InternalError(plan.message, data={"attempts": plan.attempts}).to_error()
        return TaskEvent.FAILED, failed(record, error, now_ms), None
    due_at_ms = now_ms + round(plan.delay_s * 1000)
    return TaskEvent.RETRY_SCHEDULED, retry_scheduled(record, plan.status_message, now_ms), due_at_ms


class Promoter(Protocol):
    """What promoting needs of the store: its run queue's ``promote_due``."""

    async def promote_due(self, now_ms: int, task_ids: Sequence[str] = ()) -> int: ...


class DueRuns:
    """The retries one worker scheduled, and when to promote them (and everyone's)."""

    def __init__(self, store: Promoter, clock_ms: Callable[[], int], *, sweep_every_s: float) -> None:
        self._store = store
        self._clock_ms = clock_ms
        self._sweep_every_s = sweep_every_s
        self._next_sweep = time.monotonic() + sweep_every_s
        #: Task id -> when its scheduled run is due (wall clock, as the store keeps it).
        self._due: dict[str, int] = {}

    def add(self, task_id: str, due_at_ms: int) -> None:
        self._due[task_id] = due_at_ms

    def wait_s(self) -> float | None:
        """How long until the next known retry is due (``None``: none known)."""
        if not self._due:
            return None
        return max(0.0, (min(self._due.values()) - self._clock_ms()) / 1000)

    def block_ms(self, block_ms: int) -> int:
        """``block_ms``, shortened to end when the next known retry is due (at least 1: 0 blocks forever)."""
        wait = self.wait_s()
        return block_ms if wait is None else max(1, min(block_ms, int(wait * 1000) + 1))

    async def promote(self) -> None:
        """Promote what is due: every partition on the sweep's clock, else the partitions of the known
        retries that are due (nothing at all when none is)."""
        now = self._clock_ms()
        sweep = time.monotonic() >= self._next_sweep
        due = [task_id for task_id, due_at in self._due.items() if due_at <= now]
        if not sweep and not due:
            return
        try:
            await self._store.promote_due(now, () if sweep else due)
        except TaskStoreUnavailable as exc:  # kept: tried again on the next turn of the take loop
            logger.warning("promoting due retries failed (%s); trying again", exc.detail)
            return
        if sweep:
            self._next_sweep = time.monotonic() + self._sweep_every_s
            due = [task_id for task_id, due_at in self._due.items() if due_at <= now]
        for task_id in due:
            self._due.pop(task_id, None)
