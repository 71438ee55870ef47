"""The 2025-11-25 task methods of the shim: ``tasks/get``, ``tasks/result``, ``tasks/list``,
``tasks/cancel``, and the tasks the shim makes itself when an upstream answers a task-augmented call
inline. Each translates into the 2026-07-28 extension (``tasks/get``, ``tasks/update``, ``tasks/cancel``)
through the same upstream as the rest of the shim.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from ext_tasks.protocol.errors import InvalidParams, ProtocolError
from ext_tasks.protocol.jsonrpc import Request, notification_message, result_message
from ext_tasks.protocol.resume import Binding, ResumeCodec

from .sessions import LegacySession, SessionStore
from .translate import (
    TERMINAL,
    RelayedError,
    answer_from_legacy_response,
    legacy_input_request,
    legacy_task,
    required_string,
    result_of,
    task_outcome,
)
from .upstream import Caller, ModernCall

Message = dict[str, Any]
ModernFor = Callable[..., ModernCall]
SendForResponse = Callable[[ModernCall, Caller], Awaitable[Message]]

_LIST_PAGE: Final = 50
#: Ids of tasks the shim made itself from inline answers; they live in the session store. (A random
#: engine id starting with these 12 characters has a chance of 64**-12.)
_SHIM_TASK_PREFIX: Final = "shim-inline-"
_SHIM_TASK_TTL_MS: Final = 3_600_000


class Relay:
    """Input requests relayed to the client as server→client requests, and the answers coming back
    over the session bus (the client may POST them to any instance)."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, str]] = {}

    def request(self, key: str, entry: Mapping[str, Any], task_id: str | None) -> Message:
        method, params = legacy_input_request(entry, key, task_id)
        request_id = f"srv-{secrets.token_urlsafe(9)}"
        self.pending[request_id] = (key, method)
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}

    def answer(self, published: Mapping[str, Any]) -> tuple[str, str, dict[str, Any] | None] | None:
        """``(key, method, input response or None if refused)`` for a response to one of our requests."""
        if published.get("kind") != "response":
            return None
        response = published.get("message") or {}
        target = self.pending.pop(str(response.get("id")), None)
        if target is None:
            return None
        return target[0], target[1], answer_from_legacy_response(target[1], response)


class LegacyTasks:
    """``modern(session, method, params, tasks=...)`` builds a 2026-07-28 call for a session and
    ``final(call, caller)`` sends it and returns its response (both the shim's)."""

    def __init__(self, sessions: SessionStore, codec: ResumeCodec, modern: ModernFor, final: SendForResponse) -> None:
        self.sessions = sessions
        self.codec = codec
        self._modern = modern
        self._final = final

    async def inline_as_task(self, session: LegacySession, params: Mapping[str, Any], result: Message) -> Message:
        now = _iso_now()
        hint = (params.get("task") or {}).get("ttl")
        ttl: int = hint if isinstance(hint, int) and not isinstance(hint, bool) and hint > 0 else _SHIM_TASK_TTL_MS
        created: Message = {
            "taskId": f"{_SHIM_TASK_PREFIX}{secrets.token_urlsafe(18)}",
            "status": "completed",
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttlMs": ttl,
            "result": {key: value for key, value in result.items() if key != "resultType"},
            "scope": session.task_scope,
        }
        await self.sessions.save_task(created, ttl)
        await self.register(session, created["taskId"])
        return created

    async def register(self, session: LegacySession, task_id: str) -> None:
        """List the task for ``tasks/list`` and tell the session's GET stream to follow it."""
        await self.sessions.index_task(session.task_scope, task_id, _now_ms())
        await self.sessions.publish(session.session_id, {"kind": "watch", "taskId": task_id})

    async def task(self, session: LegacySession, task_id: str, caller: Caller) -> Message:
        if task_id.startswith(_SHIM_TASK_PREFIX):
            own = await self.sessions.load_task(task_id)
            if own is None or own.get("scope") != session.task_scope:
                raise InvalidParams("Failed to retrieve task: Task not found")
            return {key: value for key, value in own.items() if key != "scope"}
        final = await self._final(self._modern(session, "tasks/get", {"taskId": task_id}, tasks=True), caller)
        if "error" in final:
            raise RelayedError(final["error"])
        return result_of(final)

    async def get(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        task_id = required_string(request.params, "taskId")
        task = await self.task(session, task_id, caller)
        cancelled = await self.sessions.was_cancelled(task_id)
        yield result_message(request.id, legacy_task(task, cancelled_by_legacy=cancelled))

    async def result(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        """Block until the task is terminal, relaying its questions as server→client requests."""
        task_id = required_string(request.params, "taskId")
        relayed: set[str] = set()
        last_status: str | None = None
        async with self.sessions.subscribe(session.session_id) as inbox:
            relay = Relay()
            while True:
                task = await self.task(session, task_id, caller)
                cancelled = await self.sessions.was_cancelled(task_id)
                legacy = legacy_task(task, cancelled_by_legacy=cancelled)
                if legacy["status"] != last_status and last_status is not None:
                    yield notification_message("notifications/tasks/status", legacy)
                last_status = legacy["status"]
                if cancelled or task["status"] in TERMINAL:
                    kind, payload = task_outcome({**task, "status": "cancelled"} if cancelled else task)
                    yield (
                        result_message(request.id, payload)
                        if kind == "result"
                        else {
                            "jsonrpc": "2.0",
                            "id": request.id,
                            "error": payload,
                        }
                    )
                    return
                for key, entry in (task.get("inputRequests") or {}).items():
                    if key not in relayed:
                        relayed.add(key)
                        yield relay.request(key, entry, task_id)
                await self._answer_or_wait(session, task_id, caller, inbox, relay, task.get("pollIntervalMs"))

    async def _answer_or_wait(
        self,
        session: LegacySession,
        task_id: str,
        caller: Caller,
        inbox: asyncio.Queue[Message],
        relay: Relay,
        poll_ms: object,
    ) -> None:
        """Forward the client's answers as ``tasks/update``, or wait one poll interval."""
        wait_s = min(max((poll_ms if isinstance(poll_ms, int) else 500) / 1000, 0.05), 2.0)
        try:
            answered = relay.answer(await asyncio.wait_for(inbox.get(), timeout=wait_s))
        except TimeoutError:
            return
        if answered is None:
            return
        key, _, answer = answered
        if answer is None:
            await self._final(self._modern(session, "tasks/cancel", {"taskId": task_id}, tasks=True), caller)
            return
        update = {"taskId": task_id, "inputResponses": {key: answer}}
        await self._final(self._modern(session, "tasks/update", update, tasks=True), caller)

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
        status = legacy_task(task, cancelled_by_legacy=await self.sessions.was_cancelled(task_id))["status"]
        if status in TERMINAL:
            # 2025-11-25: cancelling a terminal task MUST be rejected (the extension acks instead).
            raise InvalidParams(f"Cannot cancel task: already in terminal status '{status}'")
        final = await self._final(self._modern(session, "tasks/cancel", {"taskId": task_id}, tasks=True), caller)
        if "error" in final:
            raise RelayedError(final["error"])
        ttl = task.get("ttlMs")
        await self.sessions.mark_cancelled(task_id, ttl if isinstance(ttl, int) else 86_400_000)
        cancelled = legacy_task(await self.task(session, task_id, caller), cancelled_by_legacy=True)
        yield result_message(request.id, cancelled)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
