"""Task workers: take queued runs, execute them, commit each outcome through the store's compare-and-set.

A worker runs inside every server process (and alone as ``ext-tasks worker``). For each run it:

1. reads the record (one read: the queue already counted the attempt, ``Run.attempt``); skips runs of
   tasks that are gone, terminal or waiting for input; past the attempt limit the task ends ``failed``;
2. calls the tool with every answer so far and its saved state (``ctx.task_id`` is stable across
   re-runs and recoveries: tools use it as their idempotency key);
3. commits ``completed``, ``failed`` or ``input_required`` and acknowledges the run in the same step; a
   commit that loses (the task was cancelled meanwhile) is dropped, which is the correct outcome. A
   transient failure (the tool's ``retry=``, or ``ctx.retry_later``) instead schedules the next attempt
   in the store in that step, promoted when due (:mod:`.scheduled`).

While runs are in flight the worker heartbeats them; a run whose worker stops heartbeating for longer
than the lease is reclaimed by another worker (so a run is executed *at least once*). A run still going
after a moment watches its task (:mod:`.cancel_watch`), so a cancellation from any instance stops the
running coroutine at once.

A run outlasts a store outage (:mod:`.outage`): a failover, or a store that refuses writes (Valkey at
maxmemory). Reading its task and storing its status messages are tried again for up to
:data:`~.outage.OUTAGE_S` (a status message that still cannot be stored is skipped; the run goes on);
its outcome is tried again until it is stored, the run heartbeated meanwhile, and a write whose answer
was lost is judged by the record itself. So an outage costs a run a pause rather than an attempt and a
second execution, and **a run is acknowledged only once its outcome is stored** (or no longer needed:
the task ended otherwise). A run that fails any other way is left unacknowledged too: it is reclaimed
after its lease and counts as an interrupted attempt, so :attr:`~.options.WorkerOptions.max_attempts`
bounds it, and past the limit the task ends ``failed`` without running the tool again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from . import tracing_tasks
from .auth import principal_from_grant
from .cancel_watch import stop_when_cancelled
from .clock import now_ms, stop_if_cancelled
from .context import Context, InputRequired, RetryLater, missing_capabilities
from .flow import FlowControl, RunPlaces, Waiting
from .invoke import invoke_tool
from .lifecycle import task_event
from .lifetimes import Lifetimes, OverdueSweep, RunTimedOut
from .metrics import LEASE_RECLAIMS, QUEUE_DEPTH
from .options import TaskOptions, WorkerOptions
from .outage import commit_through_outage, through_outage
from .protocol.errors import InternalError, MissingClientCapability, ProtocolError
from .protocol.states import TaskEvent, TaskStatus
from .protocol.tasks import (
    TaskRecord,
    completed,
    failed,
    input_requested,
    rerun_requested,
    result_too_large,
    run_deferred,
)
from .runs import RunInProgress, run_envelope, status_reporter
from .scheduled import DueRuns, retry_outcome
from .store.base import Broadcast, InputDeadlines, Records, Run, RunQueue, TaskStoreUnavailable
from .tools import ToolRegistry

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger("ext_tasks.worker")

_encoder: Final = msgspec.json.Encoder()
#: How often the queue depth gauge is refreshed.
_DEPTH_EVERY_S: Final = 15.0
#: What a run ended with: the table's event, and the record after it.
_Outcome = tuple[TaskEvent, TaskRecord]


class WorkerStore(RunQueue, Records, Broadcast, InputDeadlines, Protocol):
    """What a worker uses of a task store: its run queue, records, broadcast (cancellations), overdue waits."""


class Worker:
    def __init__(
        self,
        store: WorkerStore,
        registry: ToolRegistry,
        options: WorkerOptions | None = None,
        *,
        consumer: str | None = None,
        clock_ms: Callable[[], int] = now_ms,
        lifetimes: Lifetimes | None = None,
        flow: FlowControl | None = None,
    ) -> None:
        self.store = store
        #: The gates runs pass (``None``: no flow control), and the runs in progress that hold places.
        self.flow = flow
        self._places = RunPlaces(flow) if flow is not None else None
        self.registry = registry
        self.options = options or WorkerOptions()
        self.lifetimes = lifetimes or Lifetimes(TaskOptions(), registry.find_tool, clock_ms=clock_ms)
        self._overdue = OverdueSweep(store, self.lifetimes, every_s=self.options.lease_s / 2)  # waits past due
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{id(self):x}"
        self._clock_ms = clock_ms
        #: Runs executing here, by delivery id (one task may briefly have two: a finishing run that is
        #: still acknowledging, and the next run that an answer queued).
        #: Keyed by (task id, delivery): a delivery id is unique within one partition's stream only.
        self._running: dict[tuple[str, str], tuple[Run, asyncio.Task[None]]] = {}
        #: Runs stopped because the queue handed them to another worker (not to be acknowledged).
        self._lost: set[tuple[str, str]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._down: set[str] = set()
        self._stopping = asyncio.Event()
        #: Retries this worker scheduled, promoted into the queue when due (any worker's sweep does it too).
        self._due = DueRuns(store, clock_ms, sweep_every_s=self.options.lease_s)

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._supervised("take-runs", self._take_runs), name="ext-tasks-take-runs"),
            asyncio.create_task(self._supervised("heartbeats", self._heartbeats), name="ext-tasks-heartbeats"),
            asyncio.create_task(self._supervised("retries", self._due.run), name="ext-tasks-due-retries"),
            asyncio.create_task(self._supervised("overdue", self._overdue.run), name="ext-tasks-overdue"),
        ]

    @property
    def healthy(self) -> bool:
        """Every loop of a started worker is running (none is dead or waiting to be started again)."""
        return bool(self._loops) and not self._down and all(not loop.done() for loop in self._loops)

    async def _supervised(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run ``loop`` for as long as the worker runs: one that dies, for any reason, is logged and
        started again, so a store that came back empty (or any bug) never leaves tasks queued forever."""
        while not self._stopping.is_set():
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self._down.add(name)
                logger.exception("worker loop %s died; starting it again in %gs", name, self.options.restart_pause_s)
                await asyncio.sleep(self.options.restart_pause_s)
                self._down.discard(name)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Take no new runs; let running ones finish within ``grace_s``; give the rest back to the queue."""
        self._stopping.set()
        for loop in self._loops:
            loop.cancel()
        running = [task for _, task in self._running.values()]
        if running:
            await asyncio.wait(running, timeout=grace_s)
        for run, task in list(self._running.values()):
            task.cancel()
            with contextlib.suppress(TaskStoreUnavailable):
                await self.store.requeue(run)
        await asyncio.gather(*self._loops, *(task for _, task in self._running.values()), return_exceptions=True)

    # --- the loops --------------------------------------------------------------------------------

    async def _take_runs(self) -> None:
        lease_ms = int(self.options.lease_s * 1000)
        next_reclaim = 0.0
        while not self._stopping.is_set():
            free = self.options.run_concurrency - len(self._running)
            if free <= 0:
                await asyncio.wait([task for _, task in self._running.values()], return_when=asyncio.FIRST_COMPLETED)
                continue
            runs: list[Run] = []
            reclaimed = 0
            try:
                if time.monotonic() >= next_reclaim:
                    next_reclaim = time.monotonic() + self.options.lease_s / 2
                    runs = await self.store.reclaim(self.consumer, lease_ms, free)
                    reclaimed = len(runs)
                    if runs:
                        LEASE_RECLAIMS.inc(len(runs))
                        logger.warning("reclaimed %d run(s) whose worker stopped", len(runs))
            except TaskStoreUnavailable as exc:  # no reclaim this time; queued runs are still taken
                logger.warning(
                    "reclaiming runs failed (%s); trying again in %.1fs", exc.detail, self.options.lease_s / 2
                )
            try:
                if len(runs) < free:
                    runs += await self.store.next_runs(self.consumer, free - len(runs), self.options.block_ms)
            except TaskStoreUnavailable as exc:
                logger.warning("task store unavailable (%s); retrying in 1s", exc.detail)
                await asyncio.sleep(1.0)
            for index, run in enumerate(runs):
                self._spawn(run, reclaimed=index < reclaimed)

    def _spawn(self, run: Run, *, reclaimed: bool = False) -> None:
        key = (run.task_id, run.delivery)
        if key in self._running:
            # Our own run, handed back to us by a reclaim while it still runs here (a heartbeat was
            # late): the running execution goes on and acknowledges it; a second one would only race it.
            return
        task = asyncio.create_task(self._execute_and_ack(run, reclaimed), name=f"ext-tasks-run-{run.task_id}")
        watching = stop_when_cancelled(self.store, run.task_id, task)
        watcher = asyncio.create_task(watching, name=f"ext-tasks-watch-{run.task_id}")
        self._running[key] = (run, task)

        def ended(_: object) -> None:
            watcher.cancel()
            self._running.pop(key, None)
            self._lost.discard(key)

        task.add_done_callback(ended)

    async def _heartbeats(self) -> None:
        depth_due = 0.0
        while True:
            await asyncio.sleep(self.options.lease_s / 3)
            runs = [run for run, _ in self._running.values()]
            with contextlib.suppress(TaskStoreUnavailable):
                for run in await self.store.heartbeat(self.consumer, runs):
                    self._stop_lost(run)
                if self._places is not None:
                    await self._places.renew()
                if time.monotonic() >= depth_due:
                    depth_due = time.monotonic() + _DEPTH_EVERY_S
                    QUEUE_DEPTH.set(await self.store.queue_depth())
            stop_if_cancelled()

    def _stop_lost(self, run: Run) -> None:
        """The queue no longer counts ``run`` as ours: another worker took it over (this process paused
        longer than the lease) or a promoted replica never saw our claim. Stop it, unacknowledged: the
        run belongs to its new holder, and two executions at once would race."""
        key = (run.task_id, run.delivery)
        running = self._running.get(key)
        if running is None:
            return
        logger.warning(
            "the run of %s is no longer this worker's (taken over, or lost in a failover); stopping it", run.task_id
        )
        self._lost.add(key)
        running[1].cancel()

    # --- one run ----------------------------------------------------------------------------------

    async def _execute_and_ack(self, run: Run, reclaimed: bool = False) -> None:
        holder = RunInProgress(run, reclaimed)
        try:
            await self._execute(holder)
            if holder.acknowledged:
                return
        except asyncio.CancelledError:
            if self._stopping.is_set():
                raise  # shutdown: `stop` gives the run back to the queue
            if (run.task_id, run.delivery) in self._lost:
                return  # another worker holds the run now: its ack, not ours
            # Cancelled through tasks/cancel: the record already says so.
        except TaskStoreUnavailable:
            logger.warning("task store unavailable while running %s; the run will be reclaimed", run.task_id)
            return
        except Exception:
            # Unacknowledged: reclaimed after the lease as an interrupted attempt (bounded by the limit).
            logger.exception("worker failed on task %s; its run will be reclaimed after its lease", run.task_id)
            return
        with contextlib.suppress(TaskStoreUnavailable):
            await self.store.ack(run)

    async def execute(self, task_id: str, *, attempt: int = 1) -> TaskRecord | None:
        """Run one task to its next resting point, as its ``attempt``-th delivery; returns the committed
        record (``None`` if skipped)."""
        return await self._execute(RunInProgress(Run(task_id=task_id, delivery="", attempt=attempt)))

    async def _execute(self, holder: RunInProgress) -> TaskRecord | None:
        run = holder.run
        record = await through_outage(lambda: self.store.lookup(run.task_id))
        if not isinstance(record, TaskRecord) or record.status is not TaskStatus.WORKING:
            if isinstance(record, TaskRecord) and record.terminal and self.flow is not None:
                await self.flow.leave(record)  # ended while it waited in a gate's line: its turn goes
            return None
        holder.stored = record
        attempt = partial(self._attempt, holder, record)
        return await tracing_tasks.traced_run(record, holder.attempt, holder.reclaimed, attempt)

    async def _attempt(self, holder: RunInProgress, record: TaskRecord, span: Span | None = None) -> TaskRecord | None:
        """The run's attempt on ``record`` (read, working): the tool's outcome committed."""
        run = holder.run
        # Queued (or lost) past its life's bound, or its runs interrupted too often: it ends unrun.
        if outcome := self.lifetimes.before_run(record, interrupted := holder.attempt - 1, self.options.max_attempts):
            if not await self._commit(holder, outcome):
                return None
            task_event(record.status, TaskEvent.FAILED, outcome, attempts=interrupted)
            tracing_tasks.run_outcome(span, TaskEvent.FAILED, holder.attempt, outcome.error)
            if self.flow is not None:  # the places it took when it was created
                await self.flow.leave(record)
            return outcome
        if self.flow is None or self._places is None:
            return await self._run_attempt(holder, record, span)
        if waiting := await self.flow.enter(record):
            return await self._defer(holder, waiting, span)
        key = (run.task_id, run.delivery)
        async with self._places.held(key, record, taken_over=lambda: key in self._lost):
            return await self._run_attempt(holder, record, span)

    async def _defer(self, holder: RunInProgress, waiting: Waiting, span: Span | None) -> TaskRecord | None:
        """A gate is full: the run waits in its line, scheduled (woken when a place comes free)."""
        deferred = run_deferred(holder.working, waiting.message, waiting.retry_at_ms, self._clock_ms())
        if not await self._commit(holder, deferred, retry_at_ms=waiting.retry_at_ms):
            assert self.flow is not None and holder.stored is not None
            await self.flow.leave(holder.stored)  # the task changed meanwhile (cancelled): its turn goes
            return None
        self._due.add(deferred.task_id, waiting.retry_at_ms)
        task_event(TaskStatus.WORKING, TaskEvent.RUN_DEFERRED, deferred)
        tracing_tasks.run_outcome(span, TaskEvent.RUN_DEFERRED, holder.attempt)
        return deferred

    async def _run_attempt(self, holder: RunInProgress, record: TaskRecord, span: Span | None) -> TaskRecord | None:
        run = holder.run
        task_event(record.status, TaskEvent.RUN_STARTED, holder.working, attempt=holder.attempt)
        event, outcome = await self._outcome(holder)
        outcome = self.lifetimes.fit(record, outcome)  # a retention from its end, a wait's deadline
        # A state-only question leaves the task working with new state: it must be queued again.
        rerun = event is TaskEvent.RERUN_REQUESTED
        status = record.status
        if await self._commit(holder, outcome, enqueue=rerun, retry_at_ms=holder.retry_at_ms):
            if holder.retry_at_ms is not None:
                self._due.add(run.task_id, holder.retry_at_ms)
            task_event(status, event, outcome, attempt=holder.attempt)
            tracing_tasks.run_outcome(span, event, holder.attempt, outcome.error)
            return outcome
        tracing_tasks.run_outcome(span, None, holder.attempt)  # the task changed meanwhile (cancelled): dropped
        return None

    async def _commit(
        self, holder: RunInProgress, outcome: TaskRecord, *, enqueue: bool = False, retry_at_ms: int | None = None
    ) -> bool:
        """Commit the run's outcome and acknowledge the run in the same step, however long the store
        refuses it (the run stays ours meanwhile: it is heartbeated while it runs)."""
        assert holder.stored is not None
        finishing = holder.run if holder.run.delivery else None
        committed = await commit_through_outage(
            self.store,
            holder.stored,
            outcome,
            enqueue=enqueue,
            finishing=finishing,
            now_ms=self._clock_ms,
            retry_at_ms=retry_at_ms,
        )
        holder.acknowledged = committed and finishing is not None
        return committed

    async def _outcome(self, holder: RunInProgress) -> _Outcome:
        record = holder.working
        tool = self.registry.find_tool(record.tool)
        if tool is None:
            return TaskEvent.FAILED, failed(
                record, InternalError(f"Tool {record.tool!r} is no longer served").to_error(), self._clock_ms()
            )

        ctx = Context(
            principal=principal_from_grant(record.owner, record.grant),
            envelope=run_envelope(record),
            answers=record.answers,
            state=record.state,
            task_id=record.task_id,
            on_status=status_reporter(self.store, holder, self._clock_ms),
        )
        try:
            result = await self.lifetimes.within_limit(record, tool, invoke_tool(tool, record.arguments, ctx))
        except RunTimedOut as stopped:  # the coroutine was cancelled here, where it ran
            return TaskEvent.FAILED, failed(holder.working, stopped.error, self._clock_ms())
        except InputRequired as asked:
            missing = missing_capabilities(asked.requests.values(), record.client_capabilities)
            if missing:
                refused = MissingClientCapability(missing).to_error()
                return TaskEvent.FAILED, failed(holder.working, refused, self._clock_ms())
            state = asked.state if asked.state is not None else ctx.state
            if not asked.requests:
                return TaskEvent.RERUN_REQUESTED, rerun_requested(holder.working, state, self._clock_ms())
            requests = {key: request.to_wire() for key, request in asked.requests.items()}
            return TaskEvent.INPUT_REQUESTED, input_requested(holder.working, requests, state, self._clock_ms())
        except RetryLater as asked:
            # Transient: the next attempt scheduled in the store, or the task failed past the last one.
            event, outcome, holder.retry_at_ms = retry_outcome(holder.working, tool.retry, asked, self._clock_ms())
            return event, outcome
        except ProtocolError as exc:
            # A tool's protocol failure is the task's outcome, with its own code and message. Anything
            # else is a failure of this worker: the run is reclaimed (``_execute_and_ack``).
            return TaskEvent.FAILED, failed(holder.working, exc.to_error(), self._clock_ms())
        size = len(_encoder.encode(result))
        if size > self.options.max_result_bytes:
            logger.warning("tool %s returned %d bytes for task %s: too large to keep", tool.name, size, record.task_id)
            error = result_too_large(size, self.options.max_result_bytes)
            return TaskEvent.FAILED, failed(holder.working, error, self._clock_ms())
        # The record keeps the result as the JSON object it is sent as (``resultType``, its tag, included).
        return TaskEvent.SUCCEEDED, completed(holder.working, msgspec.to_builtins(result), self._clock_ms())
