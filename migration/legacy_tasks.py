"""The 2025-11-25 task methods of the shim: ``tasks/get``, ``tasks/result``, ``tasks/list``,
``tasks/cancel``, and the tasks the shim makes itself when an upstream answers a task-augmented call
inline. Each translates into the 2026-07-28 extension (``tasks/get``, ``tasks/update``, ``tasks/cancel``)
through the same upstream as the rest of the shim. The tasks the shim keeps itself are
:mod:`.own_tasks`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Final

import msgspec

from ext_tasks.auth import Caller
from ext_tasks.clock import now_ms
from ext_tasks.protocol.errors import InvalidParams, ProtocolError
from ext_tasks.protocol.jsonrpc import Request, notification_message, result_message
from ext_tasks.protocol.result_types import DetailedTask, ErrorObject, TypedResult
from ext_tasks.protocol.resume import Binding, ResumeCodec
from ext_tasks.waits import WaitLimit

from .own_tasks import SHIM_TASK_PREFIX, OwnTasks, stored_task
from .questions import Answer, Relay, StreamQuestions
from .remote import UpstreamFailed
from .sessions import LegacySession, SessionStore
from .task_follow import Listen, TaskFollow, follow_task
from .translate import (
    TERMINAL,
    legacy_error,
    legacy_task,
    required_string,
    result_of,
    task_outcome,
)
from .upstream import ModernCall

logger = logging.getLogger("ext_tasks.migration")
Message = dict[str, Any]
ModernFor = Callable[..., ModernCall]
SendForResponse = Callable[[ModernCall, Caller], Awaitable[Message]]

_LIST_PAGE: Final = 50
#: A client's answer refused with "retry later" (the store busy, the principal's byte budget) is sent
#: this many times in all, at most this long apart, before the task is cancelled as for a final refusal.
_UPDATE_TRIES: Final = 3
_UPDATE_PAUSE_S: Final = 2.0


class LegacyTasks:
    """``modern(session, method, params, tasks=...)`` builds a 2026-07-28 call for a session and
    ``final(call, caller)`` sends it and returns its response (both the shim's)."""

    def __init__(
        self,
        sessions: SessionStore,
        codec: ResumeCodec,
        modern: ModernFor,
        final: SendForResponse,
        waits: WaitLimit,
        own: OwnTasks,
        listen: Listen | None = None,
    ) -> None:
        """``listen`` sends a streamed call upstream (a ``subscriptions/listen``): with it, a waiting
        ``tasks/result`` reads its task only when it changes; without it, every poll interval."""
        self.sessions = sessions
        self.codec = codec
        self._modern = modern
        self._final = final
        self._waits = waits
        self.own = own
        self._listen = listen

    async def inline_as_task(
        self, session: LegacySession, params: Mapping[str, Any], result: TypedResult
    ) -> DetailedTask:
        """Keep an inline answer to a task-augmented call as a finished task of the shim's own."""
        created = await self.own.keep(session, params, result)
        await self.register(session, created.task_id)
        return created

    async def register(self, session: LegacySession, task_id: str) -> None:
        """List a task the session created for ``tasks/list``, and have its GET stream follow it."""
        await self.sessions.index_task(session.task_scope, task_id, now_ms())
        await self.follow(session, task_id)

    async def follow(self, session: LegacySession, task_id: str) -> None:
        """Have the session's GET stream follow the task (its changes, its questions) from now on."""
        if await self.sessions.index_task(session.watch_scope, task_id, now_ms()):
            await self.sessions.publish(session.session_id, {"kind": "watch", "taskId": task_id})

    async def task(
        self, session: LegacySession, task_id: str, caller: Caller, *, outcome: bool = False
    ) -> DetailedTask:
        """The modern ``DetailedTask``, typed (the engine's own, or a remote's decoded). Only
        ``outcome=True`` (``tasks/result``, which hands the outcome out) counts as delivering it; a status
        read leaves a sensitive task's lifetime alone."""
        if task_id.startswith(SHIM_TASK_PREFIX):
            own = await self.sessions.load_task(task_id)
            if own is None or own.get("scope") != session.task_scope:
                raise InvalidParams("Failed to retrieve task: Task not found")
            return stored_task(own)
        call = self._modern(session, "tasks/get", {"taskId": task_id}, tasks=True)
        if not outcome:
            call = replace(call, status_only=True)
        final = await self._final(call, caller)
        found = result_of(final)
        if not isinstance(found, DetailedTask):
            raise UpstreamFailed("Upstream answered tasks/get without a task")
        return found

    async def get(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        task_id = required_string(request.params, "taskId")
        task = await self.task(session, task_id, caller)
        if task.status not in TERMINAL:
            # A task handed over from another session: its questions now reach this session too.
            await self.follow(session, task_id)
        cancelled = await self.sessions.was_cancelled(task_id)
        yield result_message(request.id, legacy_task(task, cancelled_by_legacy=cancelled))

    async def result(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        """Block until the task is terminal, relaying its questions as server→client requests (those
        no other stream of the session relays already). The task is read again when it changes (or a
        client's message arrives), not on a timer: see :mod:`.task_follow`."""
        task_id = required_string(request.params, "taskId")
        last_status: str | None = None
        questions = StreamQuestions(self.sessions, session.session_id)
        with self._waits.hold(caller.principal.id):
            async with (
                self.sessions.subscribe(session.session_id) as inbox,
                self._follow(session, caller, task_id) as follow,
            ):
                try:
                    while True:
                        task = await self.task(session, task_id, caller, outcome=True)
                        cancelled = await self.sessions.was_cancelled(task_id)
                        legacy = legacy_task(task, cancelled_by_legacy=cancelled)
                        if legacy.status != last_status and last_status is not None:
                            yield notification_message("notifications/tasks/status", legacy)
                        last_status = legacy.status
                        if cancelled or task.status in TERMINAL:
                            ended = msgspec.structs.replace(task, status="cancelled") if cancelled else task
                            kind, payload = task_outcome(ended)
                            if kind == "result":
                                yield result_message(request.id, payload)
                            else:
                                yield {"jsonrpc": "2.0", "id": request.id, "error": payload}
                            return
                        for outgoing in await questions.ask(task):
                            yield outgoing
                        await questions.keep()
                        # Held questions are renewed, deferred ones tried again (their holder may be gone), on a timer.
                        renew = questions.relay.held() or questions.deferred
                        wait_s = questions.keep_interval_s() if renew else None
                        if follow is None or not follow.live:
                            wait_s = _poll_interval_s(task.poll_interval_ms)
                        await self._answer_or_wait(session, caller, inbox, follow, questions.relay, wait_s)
                finally:
                    await questions.close()

    def _follow(
        self, session: LegacySession, caller: Caller, task_id: str
    ) -> contextlib.AbstractAsyncContextManager[TaskFollow | None]:
        if self._listen is None or task_id.startswith(SHIM_TASK_PREFIX):
            return contextlib.nullcontext()  # no upstream listen, or a task of the shim's own (finished)
        wanted = {"notifications": {"taskIds": [task_id]}}
        return follow_task(
            self._listen, self._modern(session, "subscriptions/listen", wanted, tasks=True), caller, task_id
        )

    async def _answer_or_wait(
        self,
        session: LegacySession,
        caller: Caller,
        inbox: asyncio.Queue[Message],
        follow: TaskFollow | None,
        relay: Relay,
        wait_s: float | None,
    ) -> None:
        """Forward the client's answers as ``tasks/update``, or wait for the task to change (at most
        ``wait_s``: the poll interval without a live follow, the questions' hold renewal with one)."""
        inbox_get = asyncio.ensure_future(inbox.get())
        changed = asyncio.ensure_future(follow.wait(None) if follow is not None else asyncio.Event().wait())
        try:
            done, _ = await asyncio.wait({inbox_get, changed}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not inbox_get.done():
                inbox_get.cancel()
        if inbox_get in done:
            answered = relay.answer(inbox_get.result())
            if answered is not None:
                await self.forward(session, caller, answered)

    async def forward(self, session: LegacySession, caller: Caller, answer: Answer) -> None:
        """Hand a client's answer to a task question to the task (``tasks/update``).

        A refusal of a request that has no "cancel" answer (sampling, roots) cancels the task, but only
        while the question is still outstanding: an answer that already arrived on another stream wins.
        So does an answer the task refuses (larger than it keeps, say): a 2025-11-25 client cannot be told
        that its response was refused, and the question was asked once per session, so the task would
        wait for an answer that never comes. A "retry later" refusal is tried again a few times first.
        """
        assert answer.task_id is not None
        if answer.value is not None:
            update = {"taskId": answer.task_id, "inputResponses": {answer.key: answer.value}}
            refused = await self._update(session, caller, update)
            if refused is None:
                return
            logger.warning(
                "a legacy client's answer to task %s was refused (%s %s); cancelling the task",
                answer.task_id,
                refused.code,
                refused.message,
            )
        task = await self.task(session, answer.task_id, caller)
        if answer.key in (task.input_requests or {}):
            cancel = self._modern(session, "tasks/cancel", {"taskId": answer.task_id}, tasks=True)
            await self._final(cancel, caller)

    async def _update(
        self, session: LegacySession, caller: Caller, update: Mapping[str, Any]
    ) -> ErrorObject | None:
        """``tasks/update``; the error it still answers after ``_UPDATE_TRIES`` (a "retry later" is tried
        again after its ``retryAfterSeconds``, at most ``_UPDATE_PAUSE_S``), ``None`` once it is taken."""
        for attempt in range(_UPDATE_TRIES):
            final = await self._final(self._modern(session, "tasks/update", dict(update), tasks=True), caller)
            error = final.get("error")
            if not isinstance(error, ErrorObject):
                return None
            retry_after = error.data.get("retryAfterSeconds") if isinstance(error.data, dict) else None
            if not isinstance(retry_after, int) or attempt == _UPDATE_TRIES - 1:
                return error
            await asyncio.sleep(min(max(retry_after, 0), _UPDATE_PAUSE_S))
        raise AssertionError("unreachable: the last try returns")

    async def list(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        binding = Binding("tasks/list", session.task_scope, "", caller.principal.id)
        cursor = request.params.get("cursor")
        offset = 0
        if cursor is not None:
            try:
                offset = int(self.codec.unseal(cursor, binding).state)
            except (ProtocolError, TypeError, ValueError):
                raise InvalidParams("Invalid params: invalid cursor") from None
        ids = await self.sessions.list_tasks(session.task_scope, offset, _LIST_PAGE + 1)
        tasks = []
        for task_id in ids[:_LIST_PAGE]:
            try:
                task = await self.task(session, task_id, caller)
            except ProtocolError:
                continue  # expired since it was listed
            tasks.append(legacy_task(task, cancelled_by_legacy=await self.sessions.was_cancelled(task_id)))
        result: Message = {"tasks": tasks}
        if len(ids) > _LIST_PAGE:
            result["nextCursor"] = self.codec.seal(binding, state=offset + _LIST_PAGE)
        yield result_message(request.id, result)

    async def cancel(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        task_id = required_string(request.params, "taskId")
        task = await self.task(session, task_id, caller)
        status = legacy_task(task, cancelled_by_legacy=await self.sessions.was_cancelled(task_id)).status
        if status in TERMINAL:
            # 2025-11-25: cancelling a terminal task MUST be rejected (the extension acks instead).
            raise InvalidParams(f"Cannot cancel task: already in terminal status '{status}'")
        final = await self._final(self._modern(session, "tasks/cancel", {"taskId": task_id}, tasks=True), caller)
        if "error" in final:
            raise legacy_error(final["error"])
        ttl = task.ttl_ms
        await self.sessions.mark_cancelled(task_id, ttl if ttl is not None else 86_400_000)
        cancelled = legacy_task(await self.task(session, task_id, caller), cancelled_by_legacy=True)
        yield result_message(request.id, cancelled)


def _poll_interval_s(poll_ms: object) -> float:
    """The task's ``pollIntervalMs`` in seconds, kept between 50 ms and 2 s."""
    return min(max((poll_ms if isinstance(poll_ms, int) else 500) / 1000, 0.05), 2.0)
