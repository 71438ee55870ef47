"""Valkey refusing a command for now, told apart from a command that is wrong.

Valkey refuses writes while it is at ``maxmemory`` under ``noeviction`` (``OOM``), while a script or
function runs past ``busy-reply-threshold`` (``BUSY``: every command), while it loads its data set
(``LOADING``), on a replica that lost its primary with ``replica-serve-stale-data no``
(``MASTERDOWN``), with fewer replicas than ``min-replicas-to-write`` (``NOREPLICAS``), after a failed
background save under ``stop-writes-on-bgsave-error`` (``MISCONF``), on a primary demoted in a failover
(``READONLY``), and to a blocked read when a failover changes the node's role (``UNBLOCKED``). Each of
these passes by itself; the same command sent later succeeds. They must answer "store unavailable,
retry later" (HTTP 503), never "internal error", and a task worker must keep the outcome it could not
store rather than drop it.

How they arrive from valkey-py 6 (checked against a real server, ``tests/contract/test_store_refusals``):
``OutOfMemoryError``, ``BusyLoadingError``, ``ReadOnlyError`` and (cluster client) ``MasterDownError``
by class, also when the refusal came from a command inside a Lua script (the script's error reply keeps
the code) or inside a pipeline; the others as a plain ``ResponseError`` whose text starts with the code,
or, inside a pipeline, with the code after ``caused error: (``.

Each refusal seen is counted by reason (``ext_tasks_store_write_refusals_total``) and remembered
(:data:`REFUSALS`): readiness reports a store that refused a write moments ago.

:func:`unavailable_on_connection_errors` is the one mapping of a broken connection, of a cluster that
cannot serve the slot right now, or of such a refusal to :class:`~.errors.TaskStoreUnavailable` (HTTP
503, "retry later"); other errors of Valkey (a script bug) pass through.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Final

from valkey.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
    ValkeyClusterException,
    ValkeyError,
)

from ...metrics import STORE_ACCEPTS_WRITES, STORE_WRITE_REFUSALS
from .errors import TaskStoreUnavailable

#: Error codes of replies that mean "not now", by the reason they are counted under.
_CODES: Final = {
    "OOM": "oom",
    "BUSY": "busy",
    "LOADING": "loading",
    "MASTERDOWN": "masterdown",
    "NOREPLICAS": "noreplicas",
    "MISCONF": "misconf",
    "READONLY": "readonly",
    "UNBLOCKED": "unblocked",
}
#: The classes valkey-py gives some of them (it strips the code from the text of those).
_CLASSES: Final = (
    (OutOfMemoryError, "oom"),
    (BusyLoadingError, "loading"),
    (ReadOnlyError, "readonly"),
    (MasterDownError, "masterdown"),
)
#: valkey-py's pipeline rewrites an error's text as "Command # N (CMD ARGS) of pipeline caused error:
#: ('CODE text',)".
_IN_PIPELINE: Final = re.compile(r"of pipeline caused error: \(?['\"]?([A-Z]+) ")
#: How long after a refusal the store still counts as refusing writes (for readiness).
REMEMBERED_S: Final = 5.0
#: Answers of a cluster (or of a primary that just became a replica) that mean "not now, retry".
_TRANSIENT_REPLIES: Final = (AskError, ClusterDownError, TryAgainError, ReadOnlyError)


def refusal_reason(exc: BaseException) -> str | None:
    """The reason Valkey refused the command that raised ``exc`` (``"oom"``, ``"busy"``, ...), or
    ``None`` when ``exc`` is no such refusal."""
    for cls, reason in _CLASSES:
        if isinstance(exc, cls):
            return reason
    if not isinstance(exc, ResponseError):
        return None
    text = str(exc)
    found = _IN_PIPELINE.search(text)
    code = found[1] if found else text.split(" ", 1)[0]
    return _CODES.get(code)  # exact codes only: BUSYGROUP or BUSYKEY are answers, not refusals


class RefusalLog:
    """When this process last saw the store refuse a command (monotonic seconds)."""

    def __init__(self, remembered_s: float = REMEMBERED_S) -> None:
        self.remembered_s = remembered_s
        self.last_s: float | None = None
        self.last_reason: str | None = None

    def seen(self, reason: str) -> None:
        self.last_s = time.monotonic()
        self.last_reason = reason
        STORE_WRITE_REFUSALS.labels(reason).inc()
        STORE_ACCEPTS_WRITES.set(0)

    def recent(self) -> str | None:
        """The reason of a refusal seen within the last ``remembered_s``, if any."""
        if self.last_s is None or time.monotonic() - self.last_s > self.remembered_s:
            return None
        return self.last_reason


#: The process's one log: every store client of the process reports its refusals here.
REFUSALS: Final = RefusalLog()


@contextlib.contextmanager
def unavailable_on_connection_errors() -> Iterator[None]:
    try:
        yield
    except (ConnectionError, TimeoutError, OSError, ValkeyError, ValkeyClusterException) as exc:
        reason = refusal_reason(exc)
        if reason is not None:  # Valkey refused for now (out of memory, busy, loading, ...): it passes
            REFUSALS.seen(reason)
            raise TaskStoreUnavailable(f"task store refused the command: {reason}") from exc
        if isinstance(exc, ResponseError) and not isinstance(exc, _TRANSIENT_REPLIES):
            raise
        raise TaskStoreUnavailable(f"task store unavailable: {type(exc).__name__}") from exc
