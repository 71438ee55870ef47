"""One task run on a worker: the envelope its tool sees, and what the worker keeps of it while it runs
(kept apart from :mod:`.worker`, which takes, runs and commits them)."""

from __future__ import annotations

import msgspec

from .protocol.envelope import Envelope
from .protocol.tasks import TaskRecord
from .protocol.versions import MODERN_2026_07_28
from .store.base import Run


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
    def working(self) -> TaskRecord:
        """The stored record with this run's attempt counted (committed with the next change)."""
        assert self.stored is not None
        if self.stored.attempts == self.run.attempt:
            return self.stored
        return msgspec.structs.replace(self.stored, attempts=self.run.attempt)
