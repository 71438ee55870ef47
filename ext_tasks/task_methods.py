"""The Tasks extension on the engine side: creating tasks from ``tools/call``, and ``tasks/get``,
``tasks/update``, ``tasks/cancel``.

Rules kept here (protocol.md §3): a task is created only for a request that itself declares the
extension (``tasks/*`` from a request that does not declare it answers -32021 when the request is
decoded, ``protocol.requests``); an unknown task, an
expired one and one of another principal answer -32602, the last exactly like an unknown one;
``tasks/update`` ignores keys that are not outstanding and acknowledges with an empty result;
``tasks/cancel`` acknowledges terminal tasks idempotently.

What a client makes a task keep is bounded before anything is stored: its arguments
(``EXT_TASKS_MAX_TASK_ARGUMENT_BYTES``), its answers after each merge (``EXT_TASKS_MAX_ANSWER_BYTES``)
and the capabilities kept (only those tools use, at most 16 KiB) answer -32602 (HTTP 413) past their
bound; the bytes all of a principal's tasks keep (``EXT_TASKS_MAX_STORED_BYTES``) answer 429 like the
count caps (see ``store.places`` for what is charged when).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from msgspec.structs import replace

from . import tracing, tracing_tasks
from .auth import Principal, grant_of
from .clock import now_ms
from .context import Emit
from .flow import FlowControl
from .lifecycle import principal_tag, task_event
from .lifetimes import Lifetimes
from .options import TaskOptions
from .protocol.envelope import Envelope
from .protocol.errors import Busy, InvalidParams, LimitExceeded, ParamsTooLarge
from .protocol.requests import Call, TaskRef, TaskUpdate
from .protocol.result_types import Complete, CreateTaskResult, GetTaskResult
from .protocol.resume import digest_arguments
from .protocol.states import TaskEvent, TaskStatus
from .protocol.task_views import create_task_result, get_task_result, poll_interval
from .protocol.tasks import (
    MAX_CAPABILITY_BYTES,
    TaskRecord,
    answers_merged,
    bounded_status,
    cancelled,
    delivered,
    encoded_size,
    kept_capabilities,
)
from .store.base import (
    ActiveLimit,
    Broadcast,
    Claims,
    ExistingTask,
    Expired,
    IdempotencyClaim,
    OverCap,
    OwnerPlaces,
    Records,
    TooManyActiveTasks,
    TooManyStoredTasks,
)
from .store.ids import new_task_id
from .store.places import place_of
from .tools import Tool

logger = logging.getLogger("ext_tasks.lifecycle")

#: How long tasks/update and tasks/cancel keep retrying a compare-and-set that others keep winning.
COMMIT_BUDGET_S: Final = 5.0


#: Where ``server/discover`` publishes the task policy (this project's own ``_meta`` namespace).
META_TASK_POLICY: Final = "dev.ext-tasks/taskPolicy"


def refusal(over: OverCap, options: TaskOptions) -> LimitExceeded:
    """What a caller past one of its caps is told (HTTP 429, -31429, ``data.limit`` naming the cap)."""
    if isinstance(over, TooManyActiveTasks):
        return LimitExceeded(
            f"Too many unfinished tasks for this caller (the limit is {options.max_active_tasks}); wait for "
            "some to finish",
            limit="max_active_tasks",
            # Tasks take a while to finish: suggest the slowest poll cadence as the wait.
            retry_after_s=math.ceil(options.poll_interval_max_ms / 1000),
        )
    if isinstance(over, TooManyStoredTasks):
        return LimitExceeded(
            f"Too many stored tasks for this caller (the limit is {options.max_stored_tasks}, in any status, "
            "until they expire); wait for some to expire",
            limit="max_stored_tasks",
            retry_after_s=60,
        )
    return LimitExceeded(
        f"This caller's tasks keep too many bytes (the limit is {options.max_stored_bytes} in all, until "
        "they expire); wait for some to expire",
        limit="max_stored_bytes",
        retry_after_s=60,
    )


def check_size(part: str, value: Any, limit: int, setting: str) -> None:
    """Refuse (-32602, HTTP 413) ``value`` if its encoded JSON is larger than ``limit`` bytes."""
    size = encoded_size(value)
    if size > limit:
        raise ParamsTooLarge(part, size, limit, setting=setting)


def _scoped(scope: str, value: str) -> str:
    """A fixed-length digest of ``value`` within ``scope`` (keys of different principals never collide,
    and neither the principal nor the client's key is stored in clear)."""
    return hashlib.sha256(f"{scope}\0{value}".encode()).hexdigest()


class EngineStore(Records, Claims, Broadcast, Protocol):
    """What the engine uses of a task store: the records, claims (poll rate limits), the broadcast its
    change hub follows, and the owners' places it grows before merging answers (no run queue, no
    opening or closing: the composition root does that)."""

    @property
    def places(self) -> OwnerPlaces: ...


class TaskMethods:
    def __init__(
        self,
        store: EngineStore,
        options: TaskOptions | None = None,
        *,
        clock_ms: Callable[[], int] = now_ms,
        commit_budget_s: float = COMMIT_BUDGET_S,
        lifetimes: Lifetimes | None = None,
        flow: FlowControl | None = None,
    ) -> None:
        self.store = store
        #: The gates a task takes its places in when it is created, and the creation rate.
        self.flow = flow
        self.options = options or TaskOptions()
        #: How long tasks are kept (the server's settings and, when given, each tool's own).
        self.lifetimes = lifetimes or Lifetimes(self.options)
        self._clock_ms = clock_ms
        self._commit_budget_s = commit_budget_s

    def ttl_for(self, tool: Tool, hint_ms: int | None = None) -> int:
        """The lifetime the server grants (see :meth:`Lifetimes.grant`)."""
        return self.lifetimes.grant(tool, hint_ms)

    async def create(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        envelope: Envelope,
        principal: Principal,
        *,
        answers: Mapping[str, Any] | None = None,
        state: Any = None,
    ) -> CreateTaskResult:
        """Create the task durably (its first run queued in the same step) and answer ``CreateTaskResult``.

        With an idempotency key (``envelope.idempotency_key``) a resend of the same call by the same
        principal within the window answers the task the first send created, and starts nothing; the
        same key with another tool or other arguments is refused with -32602.
        """
        options = self.options
        check_size("argument", arguments, options.max_task_argument_bytes, "EXT_TASKS_MAX_TASK_ARGUMENT_BYTES")
        capabilities = kept_capabilities(envelope.client_capabilities)
        check_size("capability", capabilities, MAX_CAPABILITY_BYTES, "")
        check_size("answer", answers or {}, options.max_answer_bytes, "EXT_TASKS_MAX_ANSWER_BYTES")
        now = self._clock_ms()
        traced = tracing.tracer is not None
        ttl_ms = self.ttl_for(tool, envelope.ttl_hint_ms)
        claim = None
        if envelope.idempotency_key is not None:
            claim = IdempotencyClaim(
                key=_scoped(principal.id, envelope.idempotency_key),
                fingerprint=_scoped(tool.name, digest_arguments(arguments)),
                # The key never outlives the task it names.
                window_ms=min(self.options.idempotency_window_ms, ttl_ms),
            )
        record = TaskRecord(
            # Under an idempotency key the task takes the key's partition: every resend meets the key.
            task_id=new_task_id(claim.partition if claim is not None else None),
            owner=principal.id,
            tool=tool.name,
            arguments=dict(arguments),
            status=TaskStatus.WORKING,
            version=1,
            created_at_ms=now,
            updated_at_ms=now,
            # Kept until the longest it may stay unfinished; readers are told its grant from now on.
            ttl_ms=self.lifetimes.kept_while_unfinished(ttl_ms),
            grant_ms=ttl_ms,
            poll_interval_ms=self.options.poll_interval_ms,
            poll_max_ms=tool.poll_max_ms or self.options.poll_interval_max_ms,
            sensitive=tool.sensitive,
            client_capabilities=capabilities,
            answers=dict(answers or {}),
            state=state,
            grant=grant_of(principal),
            # The creating request's span, which the task's runs continue (tracing on only).
            trace_context=tracing.current_traceparent() if traced else None,
        )
        waiting = None
        if self.flow is not None:
            await self.flow.take_creation(principal.id)
            # A gate full: created waiting in its line, never in the shared queue (``ext_tasks.flow``).
            if waiting := await self.flow.enter(record):
                record = replace(
                    record, status_message=bounded_status(waiting.message), retry_at_ms=waiting.retry_at_ms
                )
        limit = self._limit(now)
        start_at = waiting.retry_at_ms if waiting is not None else None
        try:
            existing = await self.store.create(record, claim, limit if limit.counts else None, start_at_ms=start_at)
        except OverCap as over:
            await self._leave_gates(record)
            raise refusal(over, options) from None
        if existing is not None:
            assert claim is not None
            await self._leave_gates(record)
            return await self._resent(existing, claim, principal)
        if traced:
            tracing_tasks.name_task(record.task_id)
        task_event(None, TaskEvent.CREATED, record, ttl_ms=ttl_ms)
        return create_task_result(record, now)

    async def _leave_gates(self, record: TaskRecord) -> None:
        """Give back the places of a task that was not created after all."""
        if self.flow is not None:
            await self.flow.leave(record)

    def _limit(self, now_ms: int) -> ActiveLimit:
        options = self.options
        return ActiveLimit(options.max_active_tasks, now_ms, options.max_stored_tasks, options.max_stored_bytes)

    async def _resent(self, existing: ExistingTask, claim: IdempotencyClaim, principal: Principal) -> CreateTaskResult:
        if existing.fingerprint != claim.fingerprint:
            raise InvalidParams(
                "Invalid params: this idempotency key was already used for a different tool or different "
                "arguments; use a new key for a different call"
            )
        found = await self.store.lookup(existing.task_id)
        if not isinstance(found, TaskRecord) or found.owner != principal.id:
            raise InvalidParams("Failed to retrieve task: Task has expired")
        return create_task_result(found, self._clock_ms())

    async def _find(self, task_id: str, principal: Principal, *, again: bool = False) -> TaskRecord:
        """The caller's task (``again``: read again after a lost race, already linked to)."""
        found = await self.store.lookup(task_id)
        if isinstance(found, TaskRecord) and found.owner == principal.id:
            if not again and tracing.tracer is not None:  # tasks/get|update|cancel link to the task's trace
                tracing_tasks.add_task_link(found.trace_context, found.task_id)
            return await self._ended_if_overdue(found)
        if isinstance(found, Expired) and found.owner == principal.id:
            tag = principal_tag(principal.id)
            logger.info("task.expired", extra={"event": "task.expired", "task_id": task_id, "principal": tag})
            raise InvalidParams("Failed to retrieve task: Task has expired")
        # Another principal's task answers exactly like one that never existed.
        raise InvalidParams("Failed to retrieve task: Task not found")

    async def _ended_if_overdue(self, record: TaskRecord) -> TaskRecord:
        """The check on read: a wait for input past its deadline (or a task past its life's bound) ends
        ``failed`` before anyone is told about it, so a reader never sees a task live past its limit (the
        workers' sweep ends those nobody reads). A lost race means someone else changed it: read again."""
        for _ in range(3):
            ended = self.lifetimes.overdue(record, self._clock_ms())
            if ended is None:
                return record
            if await self.store.commit(record, ended):
                task_event(record.status, TaskEvent.FAILED, ended, reason="timeout")
                return ended
            found = await self.store.lookup(record.task_id)
            if not isinstance(found, TaskRecord):
                return record
            record = found
        return record

    async def record_of(self, task_id: str) -> TaskRecord | None:
        """The task's record now (``None`` if it is gone), for listeners that catch up after missing
        changes."""
        found = await self.store.lookup(task_id)
        return found if isinstance(found, TaskRecord) else None

    async def owned(self, task_ids: Sequence[str], principal: Principal) -> list[str]:
        """Those of ``task_ids`` that are live tasks of ``principal`` (one store round trip)."""
        owners = await self.store.owners(task_ids)
        return [task_id for task_id in task_ids if owners.get(task_id) == principal.id]

    async def get(self, call: Call[TaskRef], principal: Principal, emit: Emit) -> GetTaskResult:
        record = await self._find(call.params.task_id, principal)
        now = self._clock_ms()
        if self.options.poll_rate_limit:
            interval = poll_interval(record, now)
            if not await self.store.claim(f"poll:{record.task_id}:{_scoped(principal.id, '')}", interval // 2):
                raise LimitExceeded(
                    f"Polling faster than the advertised pollIntervalMs ({interval} ms); slow down",
                    limit="poll_rate",
                    retry_after_s=math.ceil(interval / 2000),
                )
        if call.envelope.status_only:
            return get_task_result(record, now, status_only=True)
        shrunk = delivered(record, now, self.options.sensitive_grace_ms)
        if shrunk is not None:
            # The outcome is handed out for the first time: a sensitive one has what is left of its life
            # shortened before replying, so the ttlMs the client sees is already the truth.
            if await self.store.commit(record, shrunk):
                task_event(record.status, TaskEvent.DELIVERED, shrunk, ttl_ms=shrunk.ttl_ms)
                record = shrunk
            else:
                record = await self._find(call.params.task_id, principal, again=True)
        return get_task_result(record, now)

    async def update(self, call: Call[TaskUpdate], principal: Principal, emit: Emit) -> Complete:
        responses = call.params.answers
        first = await self._find(call.params.task_id, principal)
        async for record in self._attempts(first, principal, "update"):
            now = self._clock_ms()
            merged = answers_merged(record, responses, now)
            if merged is None:
                return Complete()  # nothing outstanding was answered: ignored, as the spec asks
            merged = self.lifetimes.fit(record, merged)
            await self._charge_answers(merged, now)
            resumed = merged.status is TaskStatus.WORKING
            event = TaskEvent.INPUT_PROVIDED if resumed else TaskEvent.ANSWERED
            if await self.store.commit(record, merged, enqueue=resumed):
                task_event(record.status, event, merged, keys=len(responses))
                return Complete()
        raise AssertionError("unreachable: _attempts raises when it gives up")

    async def _charge_answers(self, merged: TaskRecord, now_ms: int) -> None:
        """Refuse answers that would make the task, or its owner, keep more than allowed; else charge the
        owner for them before they are merged (a merge that then loses its race leaves the charge,
        which errs toward refusing until the task settles its exact size)."""
        options = self.options
        check_size("answer", merged.answers, options.max_answer_bytes, "EXT_TASKS_MAX_ANSWER_BYTES")
        if options.max_stored_bytes > 0:
            try:
                await self.store.places.grow(place_of(merged), self._limit(now_ms))
            except OverCap as over:
                raise refusal(over, options) from None

    async def cancel(self, call: Call[TaskRef], principal: Principal, emit: Emit) -> Complete:
        first = await self._find(call.params.task_id, principal)
        async for record in self._attempts(first, principal, "cancel"):
            if record.terminal:
                return Complete()  # cancelling a finished task is acknowledged, idempotently
            gone = self.lifetimes.fit(record, cancelled(record, self._clock_ms()))
            if await self.store.commit(record, gone):
                task_event(record.status, TaskEvent.CANCEL_REQUESTED, gone)
                return Complete()
        raise AssertionError("unreachable: _attempts raises when it gives up")

    async def _attempts(self, record: TaskRecord, principal: Principal, verb: str) -> AsyncIterator[TaskRecord]:
        """The record to try a compare-and-set on, then the fresh record after each lost race.

        Losing means someone else committed (a status message, the worker's outcome), so the task is
        alive and the next try sees its newer version; the loop goes on for as long as that lasts, up
        to a time budget that bounds the request. Past it the caller gets a "retry" answer (-32603,
        HTTP 503, ``Retry-After``), never a -32602 that would read as final. Nothing was changed, so
        the resend is safe.
        """
        deadline = time.monotonic() + self._commit_budget_s
        pause_s = 0.0005
        while True:
            yield record
            if time.monotonic() >= deadline:
                raise Busy(f"Failed to {verb} task: it kept changing concurrently; retry")
            await asyncio.sleep(random.uniform(0, pause_s))  # noqa: S311 - jitter, not secrecy
            pause_s = min(pause_s * 2, 0.05)
            record = await self._find(record.task_id, principal, again=True)
