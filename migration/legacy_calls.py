"""The legacy calls that may ask for input: ``tools/call`` (plain or task-augmented), ``prompts/get``
and ``resources/read``, run as 2026-07-28 calls whose ``input_required`` rounds are relayed to the
client as real server→client requests (elicitation, sampling, roots); the client's answers, which may
be POSTed to any instance, come back through the session bus. A task the upstream creates is answered
as the nested legacy ``CreateTaskResult``; an inline answer to a task-augmented call becomes a task of
the shim's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import Any

from ext_tasks.auth import Caller
from ext_tasks.protocol.errors import Busy, InternalError, InvalidRequest, LimitExceeded, MethodNotFound
from ext_tasks.protocol.jsonrpc import Request, error_message, result_message
from ext_tasks.protocol.result_types import CreateTaskResult, InputRequiredResult

from .legacy_tasks import LegacyTasks
from .questions import Relay
from .sessions import LegacySession, SessionStore
from .translate import (
    legacy_create_task_result,
    legacy_error,
    legacy_notification,
    legacy_result,
    required_string,
    result_of,
)
from .upstream import ModernCall, ModernUpstream

Message = dict[str, Any]
ModernFor = Callable[..., ModernCall]


class LegacyCalls:
    """``modern(session, method, params, tasks=...)`` builds a 2026-07-28 call for a session (the shim's)."""

    def __init__(
        self,
        upstream: ModernUpstream,
        sessions: SessionStore,
        tasks: LegacyTasks,
        modern: ModernFor,
        input_timeout_s: float,
    ) -> None:
        self.upstream = upstream
        self.sessions = sessions
        self.tasks = tasks
        self._modern = modern
        #: How long a relayed server→client request may wait for the client's answer.
        self.input_timeout_s = input_timeout_s

    async def call_tool(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        name = required_string(request.params, "name")
        augmented = isinstance(request.params.get("task"), dict)
        policy = (await self.upstream.task_support(caller)).get(name)
        if augmented and policy == "forbidden":
            # 2025-11-25, tools section: a tool that forbids tasks SHOULD answer -32601 to augmentation.
            raise MethodNotFound(f"Tool {name!r} does not support task-augmented calls")
        call = self._modern(session, "tools/call", request.params, tasks=augmented)
        async for message in self._relay_input(request, session, caller, call):
            yield message

    async def with_input(self, request: Request, session: LegacySession, caller: Caller) -> AsyncIterator[Message]:
        call = self._modern(session, request.method, request.params, tasks=False)
        async for message in self._relay_input(request, session, caller, call):
            yield message

    async def _relay_input(
        self, request: Request, session: LegacySession, caller: Caller, call: ModernCall
    ) -> AsyncIterator[Message]:
        """Run a modern call; answer each ``input_required`` with real server→client requests."""
        while True:
            final: Message | None = None
            async for message in self.upstream.send(call, caller):
                if "result" in message or "error" in message:
                    final = message
                else:
                    yield legacy_notification(message)
            if final is None:
                raise InternalError("Internal error: the upstream server sent no response")
            if "error" in final:
                error = legacy_error(final["error"])
                if isinstance(error, LimitExceeded | Busy):
                    raise error  # "retry later": HTTP 429 or 503 with Retry-After, as the engine answers it
                yield error_message(request.id, error)
                return
            result = result_of(final)
            if isinstance(result, InputRequiredResult):
                answers: dict[str, Any] = {}
                async for outgoing in self._ask_client(session, result.input_requests or {}, answers):
                    yield outgoing
                params = {**call.params, "inputResponses": answers}
                if isinstance(result.request_state, str):
                    params["requestState"] = result.request_state
                call = replace(call, params=params)
                continue
            if isinstance(result, CreateTaskResult):
                await self.tasks.register(session, result.task_id)
                yield result_message(request.id, legacy_create_task_result(result))
                return
            if request.method == "tools/call" and isinstance(request.params.get("task"), dict):
                # The client asked for a task, but the upstream answered inline (it may: task creation is
                # server-directed). A 2025-11-25 client can only take a CreateTaskResult here, so the
                # answer becomes a task of the shim's own, already completed.
                created = await self.tasks.inline_as_task(session, request.params, result)
                yield result_message(request.id, legacy_create_task_result(created))
                return
            yield result_message(request.id, legacy_result(result))
            return

    async def _ask_client(
        self, session: LegacySession, requests: Mapping[str, Any], answers: dict[str, Any]
    ) -> AsyncIterator[Message]:
        """Send each MRTR request to the client and collect every answer into ``answers``."""
        async with self.sessions.subscribe(session.session_id) as inbox:
            relay = Relay()
            for key, entry in requests.items():
                yield relay.request(key, entry, None)
            try:
                async with asyncio.timeout(self.input_timeout_s):
                    while relay.pending:
                        answered = relay.answer(await inbox.get())
                        if answered is None:
                            continue
                        if answered.value is None:
                            raise InvalidRequest(f"The client refused the {answered.method} request")
                        answers[answered.key] = answered.value
            except TimeoutError:
                raise InternalError("Timed out waiting for the client's answer") from None
