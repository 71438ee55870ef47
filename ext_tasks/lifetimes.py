"""Lifetimes that fit the work: how long a task is kept, decided from the server's settings and its tool.

* **Granted** at creation: ``EXT_TASKS_TASK_TTL_MS``, the tool's ``ttl_ms`` or a 2025-11-25 client's
  ``ttl`` hint, at most ``EXT_TASKS_TASK_MAX_TTL_MS``. It is the ``ttlMs`` of ``CreateTaskResult``.
* **While unfinished** (``working``, ``input_required``) a task never expires: its record is kept until
  its life's bound (created + the maximum + the grant), and every read is told ``ttlMs`` = its age + the
  grant (:func:`~ext_tasks.protocol.task_views.reported_ttl`), so ``createdAt + ttlMs`` is always ahead of
  now, without a write to keep it so.
* **Bounded**: a task still unfinished at ``createdAt`` + the maximum ends ``failed``; a tool's
  ``timeout_s`` ends a run that takes longer (``failed``, the coroutine cancelled where it runs), and its
  ``input_timeout_s`` a wait for answers that takes longer (``failed`` too: the client did not answer in
  time, which is an error of the call, not a cancellation anyone asked for).
* **Once finished**, retention counts from the end, by outcome (``EXT_TASKS_RETAIN_COMPLETED_MS``,
  ``..._FAILED_MS``, ``..._CANCELLED_MS``, or the tool's :class:`~ext_tasks.tools.Retention`), never less
  than the grant (a reader was promised that much) nor more than the maximum. A sensitive task's grace
  after its outcome was read shortens it afterwards, as before.

:meth:`Lifetimes.fit` applies these to a record about to be committed, whoever commits it (the worker,
``tasks/cancel``, ``tasks/update``, the sweep of overdue waits): the ``ttl_ms`` of a task that ends and
the ``deadline_ms`` of a wait that begins travel in the same compare-and-set as the status.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final, Protocol, TypeVar

import msgspec

from .clock import now_ms, stop_if_cancelled
from .lifecycle import task_event
from .options import TaskOptions
from .protocol.errors import InternalError
from .protocol.states import TaskEvent, TaskStatus
from .protocol.tasks import TaskRecord, failed
from .store.base import InputDeadlines, Records, TaskStoreUnavailable
from .tools import Tool

#: Where a timeout's error says what ran out (``run``, ``input`` or ``life``) and its limit in seconds.
TIMEOUT_DATA_KIND: Final = "timeout"
#: The most overdue waits one sweep ends (the next sweep takes the rest).
SWEEP_BATCH: Final = 100
ToolLookup = Callable[[str], Tool | None]
Clock = Callable[[], int]
T = TypeVar("T")


def _no_tools(name: str) -> Tool | None:
    return None


class RunTimedOut(Exception):
    """A run went past its limit and was stopped; ``error`` is what its task ends ``failed`` with."""

    def __init__(self, error: dict[str, object]) -> None:
        super().__init__(error.get("message"))
        self.error = error


class Lifetimes:
    def __init__(
        self, options: TaskOptions | None = None, tools: ToolLookup = _no_tools, *, clock_ms: Clock = now_ms
    ) -> None:
        self.options = options or TaskOptions()
        self._tools = tools
        self._clock_ms = clock_ms

    def now_ms(self) -> int:
        return self._clock_ms()

    async def within_limit(self, record: TaskRecord, tool: Tool | None, call: Awaitable[T]) -> T:
        """``call`` (a run of ``record``'s tool), cancelled past its limit (:meth:`run_limit`): then
        :class:`RunTimedOut`, carrying the error its task ends with."""
        deadline_ms, error = self.run_limit(record, tool, self._clock_ms())
        limit = asyncio.timeout(max(0, deadline_ms - self._clock_ms()) / 1000)
        try:
            async with limit:
                return await call
        except TimeoutError:
            if limit.expired():
                raise RunTimedOut(error) from None
            raise

    # --- at creation --------------------------------------------------------------------------------

    def grant(self, tool: Tool, hint_ms: int | None = None) -> int:
        """The lifetime granted: the client's hint (2025-11-25 ``params.task.ttl``) if any, else the
        tool's own, else the default; never more than the maximum."""
        wanted = hint_ms if hint_ms is not None and hint_ms > 0 else tool.ttl_ms or self.options.task_ttl_ms
        return min(int(wanted), self.options.task_max_ttl_ms)

    def kept_while_unfinished(self, grant_ms: int) -> int:
        """``ttl_ms`` of an unfinished task: the longest it may stay so, then its grant (by then the
        worker or the sweep has ended it, and its retention replaces this)."""
        return self.options.task_max_ttl_ms + grant_ms

    # --- bounds ---------------------------------------------------------------------------------------

    def life_bound_ms(self, record: TaskRecord) -> int:
        """When the task, still unfinished, ends ``failed`` whatever its tool says."""
        return record.created_at_ms + self.options.task_max_ttl_ms

    def run_limit(self, record: TaskRecord, tool: Tool | None, now_ms: int) -> tuple[int, dict[str, object]]:
        """When a run starting at ``now_ms`` is stopped (its tool's ``timeout_s``, or the task's bound),
        and the error the task then ends ``failed`` with."""
        bound = self.life_bound_ms(record)
        if tool is not None and tool.timeout_s is not None and now_ms + tool.timeout_s * 1000 < bound:
            limit = tool.timeout_s
            message = f"The tool ran longer than its timeout of {_seconds(limit)} s; it was stopped"
            return now_ms + int(limit * 1000), _timed_out(message, "run", limit)
        return bound, self._life_error()

    def _life_error(self) -> dict[str, object]:
        limit = self.options.task_max_ttl_ms / 1000
        return _timed_out(
            f"The task stayed unfinished longer than the server's limit of {_seconds(limit)} s "
            "(EXT_TASKS_TASK_MAX_TTL_MS); it was stopped",
            "life",
            limit,
        )

    def before_run(self, record: TaskRecord, interrupted: int, max_attempts: int) -> TaskRecord | None:
        """The end of a task a worker must not run again (``None``: run it): past its life's bound, or
        its runs interrupted ``max_attempts`` times (``EXT_TASKS_MAX_ATTEMPTS``)."""
        now = self._clock_ms()
        ended = self.overdue(record, now)
        if ended is None and interrupted >= max_attempts:
            error = InternalError(f"The task's run was interrupted {interrupted} times; giving up").to_error()
            ended = self.fit(record, failed(msgspec.structs.replace(record, attempts=interrupted), error, now))
        return ended

    def overdue(self, record: TaskRecord, now_ms: int) -> TaskRecord | None:
        """The record ending an unfinished task past its bound, or a wait for input past its deadline
        (``None``: not overdue). Ends ``failed``, with a statusMessage saying which limit ran out."""
        if record.terminal:
            return None
        if record.status is TaskStatus.INPUT_REQUIRED and record.deadline_ms is not None:
            if now_ms < record.deadline_ms:
                return None
            tool = self._tools(record.tool)
            limit = tool.input_timeout_s if tool is not None else None
            if limit is not None and record.deadline_ms < self.life_bound_ms(record):
                message = f"No answer came within the tool's input timeout of {_seconds(limit)} s"
                error = _timed_out(message, "input", limit)
            else:
                error = self._life_error()
            return self.fit(record, failed(record, error, now_ms))
        if now_ms < self.life_bound_ms(record):
            return None
        return self.fit(record, failed(record, self._life_error(), now_ms))

    # --- a record about to be committed -------------------------------------------------------------

    def fit(self, before: TaskRecord, after: TaskRecord) -> TaskRecord:
        """``after`` with the lifetime its change calls for: a task that ends is kept its retention from
        now; a wait for input that begins gets its deadline."""
        if after.grant_ms is None:
            return after  # a record of an earlier version keeps the lifetime it was created with
        now = after.updated_at_ms
        if after.terminal and not before.terminal:
            ttl_ms = now - after.created_at_ms + self.retention(after)
            return msgspec.structs.replace(after, ttl_ms=ttl_ms)
        if after.status is TaskStatus.INPUT_REQUIRED and before.status is not TaskStatus.INPUT_REQUIRED:
            return msgspec.structs.replace(after, deadline_ms=self._input_deadline(after, now))
        # A deadline left behind by an earlier wait means nothing outside ``input_required``; it stays
        # (clearing it would cost the commit that ends the wait one more command).
        return after

    def _input_deadline(self, record: TaskRecord, now_ms: int) -> int:
        bound = self.life_bound_ms(record)
        tool = self._tools(record.tool)
        if tool is None or tool.input_timeout_s is None:
            return bound
        return min(bound, now_ms + int(tool.input_timeout_s * 1000))

    def retention(self, record: TaskRecord) -> int:
        """How long ``record`` (finished) is kept after its end."""
        options = self.options
        tool = self._tools(record.tool)
        retain = tool.retention if tool is not None else None
        configured = {
            TaskStatus.COMPLETED: (retain and retain.completed_ms) or options.retain_completed_ms,
            TaskStatus.FAILED: (retain and retain.failed_ms) or options.retain_failed_ms,
            TaskStatus.CANCELLED: (retain and retain.cancelled_ms) or options.retain_cancelled_ms,
        }.get(record.status)
        grant = record.grant_ms or options.task_ttl_ms
        return min(max(configured or grant, grant), options.task_max_ttl_ms)


class SweptStore(Records, InputDeadlines, Protocol):
    """What the sweep of overdue waits uses of a task store."""


async def end_overdue(store: SweptStore, lifetimes: Lifetimes, clock_ms: Callable[[], int]) -> int:
    """End the waits for input past their deadline (``failed``), however many workers sweep at once: each
    end is a compare-and-set, so a wait answered or ended meanwhile is left alone. Returns how many."""
    ended = 0
    for record in await store.overdue(clock_ms(), SWEEP_BATCH):
        outcome = lifetimes.overdue(record, clock_ms())
        if outcome is not None and await store.commit(record, outcome):
            task_event(record.status, TaskEvent.FAILED, outcome, reason="timeout")
            ended += 1
    return ended


class OverdueSweep:
    """A worker's loop ending the waits for input past their deadline, which no reader may come to
    notice: every ``every_s`` (half a lease), one read per partition."""

    def __init__(self, store: SweptStore, lifetimes: Lifetimes, *, every_s: float) -> None:
        self._store = store
        self._lifetimes = lifetimes
        self._every_s = every_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            with contextlib.suppress(TaskStoreUnavailable):  # the next sweep tries again
                await end_overdue(self._store, self._lifetimes, self._lifetimes.now_ms)
            stop_if_cancelled()


def _timed_out(message: str, kind: str, limit_s: float) -> dict[str, object]:
    return InternalError(message, data={TIMEOUT_DATA_KIND: kind, "limitSeconds": limit_s}).to_error()


def _seconds(value: float) -> str:
    return f"{value:g}"
