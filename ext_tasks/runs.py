"""One task run on a worker: the envelope its tool sees, and what the worker keeps of it while it runs
(kept apart from :mod:`.worker`, which takes, runs and commits them)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import msgspec

from .lifecycle import task_event
from .outage import OUTAGE_S, commit_through_outage
from .protocol.envelope import Envelope
from .protocol.states import TaskEvent
from .protocol.tasks import TaskRecord, status_reported
from .protocol.versions import MODERN_2026_07_28
from .store.base import Records, Run, TaskStoreUnavailable

logger = logging.getLogger("ext_tasks.worker")


def run_envelope(record: TaskRecord) -> Envelope:
    """The envelope a task's run sees, built from what its record stored of the creating request's: the
    client's capabilities (which questions the tool may ask) and its era (tasks exist only in
    2026-07-28; the shim's legacy tasks are created through the engine too). What belonged to that
    request alone is not there: a run has no stream to log or report progress on, and no client info or
    idempotency key to act on."""
    return Envelope(
        protocol_version=MODERN_2026_07_28,
        client_capabilities=record.client_capabilities,
        client_info=None,
        log_level=None,
        progress_token=None,
    )


class RunInProgress:
    """One run in progress: the record as last committed (status messages bump it), and whether the
    run was acknowledged with its outcome."""

    def __init__(self, run: Run, reclaimed: bool = False) -> None:
        self.run = run
        #: Taken over from a worker that stopped heartbeating it (a crash), not from the queue.
        self.reclaimed = reclaimed
        self.stored: TaskRecord | None = None
        self.acknowledged = False
        #: When the next attempt is due, if this one ended by scheduling a retry.
        self.retry_at_ms: int | None = None

    @property
    def attempt(self) -> int:
        """This run's attempt: its deliveries, and the task's runs interrupted before a gate deferred it."""
        assert self.stored is not None
        return self.run.attempt + self.stored.carried_attempts

    @property
    def working(self) -> TaskRecord:
        """The stored record with this run's attempt counted (committed with the next change)."""
        assert self.stored is not None
        if self.stored.attempts == self.attempt:
            return self.stored
        return msgspec.structs.replace(self.stored, attempts=self.attempt)


def status_reporter(
    store: Records, holder: RunInProgress, clock_ms: Callable[[], int]
) -> Callable[[str], Awaitable[None]]:
    """What ``ctx.report_status`` does in a run: commit the message (through an outage of up to
    :data:`~.outage.OUTAGE_S`); one that still cannot be stored is skipped, the run goes on."""

    async def set_status(message: str) -> None:
        current, stored = holder.working, holder.stored
        assert stored is not None
        updated = status_reported(current, message, clock_ms())
        deadline = time.monotonic() + OUTAGE_S
        try:
            stored_now = await commit_through_outage(store, stored, updated, now_ms=clock_ms, deadline=deadline)
        except TaskStoreUnavailable:  # progress, not the outcome: the run goes on without it
            logger.warning("status message of %s not stored: the task store was unavailable", current.task_id)
            return
        if stored_now:
            task_event(current.status, TaskEvent.STATUS_REPORTED, updated)
            holder.stored = updated

    return set_status
