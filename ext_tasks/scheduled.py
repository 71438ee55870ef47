"""A worker's side of retries with backoff: the outcome of a transient failure, and promoting the
scheduled runs when they are due.

A retry is a run the store keeps scheduled (``commit(..., retry_at_ms=...)``), not a coroutine asleep
here: a worker that stops loses nothing. :class:`DueRuns` keeps what it costs the store small:

* the worker that scheduled a retry remembers when it is due, and promotes exactly those partitions
  then (one script per partition with something due): the run enters the stream on time, and the
  blocking read of whichever worker has room wakes for it;
* every ``sweep_every_s`` (the lease: a crashed worker's runs are reclaimed on the same clock) it
  promotes every partition, so a retry scheduled by a worker that died meanwhile runs on another.

With no retry scheduled, the only cost is the sweep (one pipelined ``ZCOUNT`` per partition per lease,
per worker, and a script only for a partition with something due): no command per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from .clock import stop_if_cancelled
from .context import RetryLater
from .protocol.errors import InternalError
from .protocol.states import TaskEvent
from .protocol.tasks import TaskRecord, failed, retry_scheduled
from .retry import GiveUp, Retry, plan_retry
from .store.base import TaskStoreUnavailable

logger = logging.getLogger("ext_tasks.worker")
#: The pause before promoting again after the store refused.
_PAUSE_S: Final = 1.0


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
    return TaskEvent.RETRY_SCHEDULED, retry_scheduled(record, plan.status_message, due_at_ms, now_ms), due_at_ms


class Promoter(Protocol):
    """What promoting needs of the store: its run queue's ``promote_due``."""

    async def promote_due(self, now_ms: int, task_ids: Sequence[str] = ()) -> int: ...


class DueRuns:
    """The retries one worker scheduled, promoted when due by a loop of their own (and everyone's, on
    the sweep's clock). A loop apart from the take loop: that one may be blocked in a read for a while,
    and a run promoted into the stream wakes whichever worker's read is waiting."""

    def __init__(self, store: Promoter, clock_ms: Callable[[], int], *, sweep_every_s: float) -> None:
        self._store = store
        self._clock_ms = clock_ms
        self._sweep_every_s = sweep_every_s
        # The first sweep at once: retries of a worker that stopped before this one started wait no lease.
        self._next_sweep = time.monotonic()
        #: Task id -> when its scheduled run is due (wall clock, as the store keeps it).
        self._due: dict[str, int] = {}
        self._added = asyncio.Event()

    def add(self, task_id: str, due_at_ms: int) -> None:
        self._due[task_id] = due_at_ms
        self._added.set()

    def _wait_s(self) -> float:
        """How long until the next known retry is due, or the next sweep."""
        wait = self._next_sweep - time.monotonic()
        if self._due:
            wait = min(wait, (min(self._due.values()) - self._clock_ms()) / 1000)
        return max(0.0, wait)

    async def run(self) -> None:
        """Promote what is due, for as long as the worker runs."""
        while True:
            self._added.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._wait_s()):
                    await self._added.wait()
            try:
                await self.promote()
            except TaskStoreUnavailable as exc:  # kept: tried again after a pause
                logger.warning("promoting due retries failed (%s); trying again in %gs", exc.detail, _PAUSE_S)
                await asyncio.sleep(_PAUSE_S)
            stop_if_cancelled()

    async def promote(self) -> None:
        """Promote what is due: every partition on the sweep's clock, else the partitions of the known
        retries that are due (nothing at all when none is)."""
        now = self._clock_ms()
        sweep = time.monotonic() >= self._next_sweep
        due = [task_id for task_id, due_at in self._due.items() if due_at <= now]
        if not sweep and not due:
            return
        await self._store.promote_due(now, () if sweep else due)
        if sweep:
            self._next_sweep = time.monotonic() + self._sweep_every_s
        for task_id in due:
            self._due.pop(task_id, None)
