"""Task workers: take queued runs, execute them, commit each outcome through the store's compare-and-set.

A worker runs inside every server process (and alone as ``ext-tasks worker``). For each run it:

1. reads the record; skips runs of tasks that are gone, terminal or waiting for input;
2. counts the attempt (a committed transition, so a reclaimed run sees it); past the attempt limit the
   task ends ``failed``;
3. calls the tool with every answer so far and its saved state (``ctx.task_id`` is stable across
   re-runs and recoveries: tools use it as their idempotency key);
4. commits ``completed``, ``failed`` or ``input_required``; a commit that loses (the task was cancelled
   meanwhile) is dropped, which is the correct outcome.

While runs are in flight the worker heartbeats them; a run whose worker stops heartbeating for longer
than the lease is reclaimed by another worker (so a run is executed *at least once*). Cancellations
arrive through the store's broadcast and cancel the running coroutine at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec

from .auth import Principal
from .config import WorkerOptions
from .context import Context, InputRequired, missing_capabilities
from .invoke import invoke_tool
from .lifecycle import task_event
from .metrics import LEASE_RECLAIMS, QUEUE_DEPTH
from .protocol.envelope import Envelope
from .protocol.errors import InternalError, MissingClientCapability, ProtocolError
from .protocol.states import TaskEvent, TaskStatus
from .protocol.tasks import (
    TaskRecord,
    completed,
    failed,
    input_requested,
    rerun_requested,
    run_started,
    status_reported,
)
from .protocol.versions import MODERN_2026_07_28
from .store.base import Run, TaskStore, TaskStoreUnavailable
from .tools import ToolRegistry

logger = logging.getLogger("ext_tasks.worker")

_encoder: Final = msgspec.json.Encoder()
#: What a run ended with: the table's event, and the record after it.
_Outcome = tuple[TaskEvent, TaskRecord]


def _now_ms() -> int:
    return int(time.time() * 1000)


class Worker:
    def __init__(
        self,
        store: TaskStore,
        registry: ToolRegistry,
        options: WorkerOptions | None = None,
        *,
        consumer: str | None = None,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.store = store
        self.registry = registry
        self.options = options or WorkerOptions()
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{id(self):x}"
        self._clock_ms = clock_ms
        #: Runs executing here, by delivery id (one task may briefly have two: a finishing run that is
        #: still acknowledging, and the next run that an answer queued).
        self._running: dict[str, tuple[Run, asyncio.Task[None]]] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._down: set[str] = set()
        self._stopping = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._supervised("take-runs", self._take_runs), name="ext-tasks-take-runs"),
            asyncio.create_task(self._supervised("heartbeats", self._heartbeats), name="ext-tasks-heartbeats"),
            asyncio.create_task(
                self._supervised("cancellations", self._listen_for_cancellations), name="ext-tasks-cancellations"
            ),
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
            try:
                runs: list[Run] = []
                if time.monotonic() >= next_reclaim:
                    runs = await self.store.reclaim(self.consumer, lease_ms, free)
                    next_reclaim = time.monotonic() + self.options.lease_s / 2
                    if runs:
                        LEASE_RECLAIMS.inc(len(runs))
                        logger.warning("reclaimed %d run(s) whose worker stopped", len(runs))
                if len(runs) < free:
                    runs += await self.store.next_runs(self.consumer, free - len(runs), self.options.block_ms)
            except TaskStoreUnavailable:
                logger.warning("task store unavailable; retrying in 1s")
                await asyncio.sleep(1.0)
                continue
            for run in runs:
                self._spawn(run)

    def _spawn(self, run: Run) -> None:
        if run.delivery in self._running:
            # Our own run, handed back to us by a reclaim while it still runs here (a heartbeat was
            # late): the running execution goes on and acknowledges it; a second one would only race it.
            return
        task = asyncio.create_task(self._execute_and_ack(run), name=f"ext-tasks-run-{run.task_id}")
        self._running[run.delivery] = (run, task)
        task.add_done_callback(lambda _: self._running.pop(run.delivery, None))

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.options.lease_s / 3)
            runs = [run for run, _ in self._running.values()]
            with contextlib.suppress(TaskStoreUnavailable):
                await self.store.heartbeat(self.consumer, runs)
                QUEUE_DEPTH.set(await self.store.queue_depth())

    async def _listen_for_cancellations(self) -> None:
        while True:
            try:
                async for task_id in self.store.cancellations():
                    for run, execution in list(self._running.values()):
                        if run.task_id == task_id:
                            execution.cancel()
            except TaskStoreUnavailable:
                await asyncio.sleep(1.0)

    # --- one run ----------------------------------------------------------------------------------

    async def _execute_and_ack(self, run: Run) -> None:
        try:
            await self.execute(run.task_id)
        except asyncio.CancelledError:
            if self._stopping.is_set():
                raise  # shutdown: `stop` gives the run back to the queue
            # Cancelled through tasks/cancel: the record already says so.
        except TaskStoreUnavailable:
            logger.warning("task store unavailable while running %s; the run will be reclaimed", run.task_id)
            return
        except Exception:
            logger.exception("worker failed on task %s", run.task_id)
        with contextlib.suppress(TaskStoreUnavailable):
            await self.store.ack(run)

    async def execute(self, task_id: str) -> TaskRecord | None:
        """Run one task to its next resting point; returns the committed record (``None`` if skipped)."""
        record = await self.store.lookup(task_id)
        if not isinstance(record, TaskRecord) or record.status is not TaskStatus.WORKING:
            return None
        if record.attempts >= self.options.max_attempts:
            error = InternalError(f"The task's run was interrupted {record.attempts} times; giving up").to_error()
            outcome = failed(record, error, self._clock_ms())
            if not await self.store.commit(outcome, expect_version=record.version):
                return None
            task_event(record.status, TaskEvent.FAILED, outcome, attempts=record.attempts)
            return outcome
        claimed = run_started(record, self._clock_ms())
        if not await self.store.commit(claimed, expect_version=record.version):
            return None  # another worker or a cancellation got there first
        task_event(record.status, TaskEvent.RUN_STARTED, claimed)
        holder = _Current(claimed)
        event, outcome = await self._outcome(holder)
        # A state-only question leaves the task working with new state: it must be queued again.
        rerun = event is TaskEvent.RERUN_REQUESTED
        current = holder.record
        if await self.store.commit(outcome, expect_version=current.version, enqueue=rerun):
            task_event(current.status, event, outcome, attempt=claimed.attempts)
            return outcome
        return None

    async def _outcome(self, holder: _Current) -> _Outcome:
        record = holder.record
        tool = self.registry.tools.get(record.tool)
        if tool is None:
            return TaskEvent.FAILED, failed(
                record, InternalError(f"Tool {record.tool!r} is no longer served").to_error(), self._clock_ms()
            )

        async def set_status(message: str) -> None:
            current = holder.record
            updated = status_reported(current, message, self._clock_ms())
            if await self.store.commit(updated, expect_version=current.version):
                task_event(current.status, TaskEvent.STATUS_REPORTED, updated)
                holder.record = updated

        ctx = Context(
            principal=Principal(record.owner),
            envelope=Envelope(MODERN_2026_07_28, record.client_capabilities, None, None, None),
            answers=record.answers,
            state=record.state,
            task_id=record.task_id,
            on_status=set_status,
        )
        try:
            result = await invoke_tool(tool, record.arguments, ctx)
        except InputRequired as asked:
            missing = missing_capabilities(asked.requests.values(), record.client_capabilities)
            if missing:
                refused = MissingClientCapability(missing).to_error()
                return TaskEvent.FAILED, failed(holder.record, refused, self._clock_ms())
            state = asked.state if asked.state is not None else ctx.state
            if not asked.requests:
                return TaskEvent.RERUN_REQUESTED, rerun_requested(holder.record, state, self._clock_ms())
            requests = {key: request.to_wire() for key, request in asked.requests.items()}
            return TaskEvent.INPUT_REQUESTED, input_requested(holder.record, requests, state, self._clock_ms())
        except ProtocolError as exc:
            return TaskEvent.FAILED, failed(holder.record, exc.to_error(), self._clock_ms())
        result["resultType"] = "complete"
        size = len(_encoder.encode(result))
        if size > self.options.max_result_bytes:
            logger.warning("tool %s returned %d bytes for task %s: too large to keep", tool.name, size, record.task_id)
            error = InternalError(
                f"The tool's result is too large to keep ({size} bytes; the limit is "
                f"{self.options.max_result_bytes}, EXT_TASKS_MAX_RESULT_BYTES)"
            )
            return TaskEvent.FAILED, failed(holder.record, error.to_error(), self._clock_ms())
        return TaskEvent.SUCCEEDED, completed(holder.record, result, self._clock_ms())


class _Current:
    """The worker's latest committed version of the record it runs (status messages bump it)."""

    def __init__(self, record: TaskRecord) -> None:
        self.record = record
