"""A task being followed: its status, its end, its questions, and a way to stop it.

A :class:`TaskHandle` comes from :meth:`Client.start_tool` (a task the server created, or an answer
given inline, already done) or from :meth:`Client.task` (a task started elsewhere). Its states come
from ``subscriptions/listen`` when the server offers it, and from ``tasks/get`` at the server's
``pollIntervalMs`` otherwise (or when a listen stream goes quiet or breaks: then one read catches
up and listening starts again). Polls are never closer than :data:`MIN_POLL_S`, whatever the server
suggests. ``wait(deadline_s=...)`` bounds the whole wait (:class:`DeadlineExceeded`, naming the task).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import httpx

from .errors import (
    DeadlineExceeded,
    HttpError,
    InvalidResponse,
    MethodNotFound,
    MissingCapability,
    RpcError,
    TaskCancelled,
    TaskFailed,
    TransportError,
)

if TYPE_CHECKING:
    from .client import Client

TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
#: The pause between polls when the server suggests none (or something that is not a number).
DEFAULT_POLL_S: Final = 1.0
#: The pause between polls is kept between these, whatever the server suggests: a server saying 0 (or a
#: negative number) would have the client poll as fast as the network answers; one saying an hour would
#: leave it blind that long when listening is not offered.
MIN_POLL_S: Final = 0.1
MAX_POLL_S: Final = 60.0
#: A listen stream silent this long (keep-alives included) is taken as broken: read, then listen again.
LISTEN_QUIET_S: Final = 60.0
#: How long one listen stream is followed before the task is read once and a new one opened: a bound on
#: how stale a missed notification can leave the caller (keep-alives keep a stream open that no longer
#: delivers, behind some balancers).
LISTEN_REFRESH_S: Final = 30.0


def poll_seconds(state: Mapping[str, Any] | None) -> float:
    """The server's suggested poll interval, in seconds, kept between :data:`MIN_POLL_S` and :data:`MAX_POLL_S`."""
    interval = state.get("pollIntervalMs") if state is not None else None
    if not isinstance(interval, int | float) or isinstance(interval, bool):
        return DEFAULT_POLL_S
    return min(MAX_POLL_S, max(MIN_POLL_S, interval / 1000.0))


class TaskHandle:
    def __init__(self, client: Client, task_id: str | None, state: Mapping[str, Any]) -> None:
        self._client = client
        #: ``None`` when the server answered inline (no task was created).
        self.task_id = task_id
        #: The latest state seen (the ``CreateTaskResult`` at first; for an inline answer, ``completed``
        #: with the result).
        self.last: dict[str, Any] = dict(state)
        self._answered: set[str] = set()
        self._listen_refused = False

    @classmethod
    def finished(cls, client: Client, result: Mapping[str, Any]) -> TaskHandle:
        return cls(client, None, {"status": "completed", "result": dict(result)})

    @property
    def done(self) -> bool:
        return self.last.get("status") in TERMINAL

    async def status(self) -> dict[str, Any]:
        """The task now (``tasks/get``): ``status``, ``statusMessage``, and per status ``inputRequests``,
        ``result`` or ``error``."""
        if self.task_id is None:
            return dict(self.last)
        state = await self._client.request("tasks/get", {"taskId": self.task_id})
        if not isinstance(state.get("status"), str):
            raise InvalidResponse(f"tasks/get of {self.task_id} has no status")
        self.last = state
        return state

    async def cancel(self) -> None:
        """Ask the server to cancel the task (cooperative: it may still end otherwise)."""
        if self.task_id is not None:
            await self._client.request("tasks/cancel", {"taskId": self.task_id})

    async def respond(self, responses: Mapping[str, Any]) -> None:
        """Answer input requests of the task (``tasks/update``); keys already answered are not resent."""
        fresh = {key: value for key, value in responses.items() if key not in self._answered}
        if self.task_id is None or not fresh:
            return
        await self._client.request("tasks/update", {"taskId": self.task_id, "inputResponses": fresh})
        self._answered.update(fresh)

    async def wait(self, *, deadline_s: float | None = None) -> dict[str, Any]:
        """The final ``CallToolResult``, answering the task's questions with the client's callbacks.

        Raises :class:`TaskFailed` or :class:`TaskCancelled` for those ends (never retried), and
        :class:`DeadlineExceeded` when ``deadline_s`` seconds pass first (the task goes on)."""
        state = self.last
        async with within(deadline_s, self.task_id), contextlib.aclosing(self.updates()) as updates:
            async for state in updates:
                if state.get("status") == "input_required":
                    requests = state.get("inputRequests")
                    outstanding = {k: v for k, v in (requests or {}).items() if k not in self._answered}
                    if outstanding:  # none: the server has not caught up with our answers yet
                        await self.respond(await self._client.inputs.answer(outstanding))
        return self._outcome(state)

    def _outcome(self, state: Mapping[str, Any]) -> dict[str, Any]:
        status = state.get("status")
        task_id = self.task_id or ""
        if status == "completed":
            result = state.get("result")
            if not isinstance(result, dict):
                raise InvalidResponse(f"task {task_id} completed without a result")
            return result
        if status == "failed":
            error = state.get("error")
            raise TaskFailed(task_id, error if isinstance(error, Mapping) else {})
        if status == "cancelled":
            raise TaskCancelled(task_id)
        raise InvalidResponse(f"task {task_id} ended without a terminal status")

    async def updates(self) -> AsyncGenerator[dict[str, Any], None]:
        """Each new state of the task, up to and including the terminal one."""
        seen: tuple[Any, ...] | None = None
        async with contextlib.aclosing(self._states()) as states:
            async for state in states:
                mark = (state.get("status"), state.get("lastUpdatedAt"), state.get("statusMessage"),
                        tuple(state.get("inputRequests") or ()))  # fmt: skip
                if mark != seen:
                    seen = mark
                    self.last = dict(state)
                    yield dict(state)
                if state.get("status") in TERMINAL:
                    return

    async def _states(self) -> AsyncGenerator[dict[str, Any], None]:
        if self.done or self.task_id is None:
            yield dict(self.last)
            return
        while True:
            if self._client.listen and not self._listen_refused:
                try:
                    async with contextlib.aclosing(self._listened()) as listened:
                        async for state in listened:
                            yield state
                            if state.get("status") in TERMINAL:
                                return
                except (MethodNotFound, MissingCapability, HttpError, InvalidResponse, _NotHonoured):
                    self._listen_refused = True  # this server does not push task states: poll
                except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError, TransportError):
                    pass  # the stream broke or went quiet: read once, then listen again
                except RpcError as exc:
                    if exc.http_status is not None and exc.http_status >= 500:
                        pass
                    else:
                        self._listen_refused = True
            state = await self.status()
            yield state
            if state.get("status") in TERMINAL:
                return
            await asyncio.sleep(poll_seconds(state))

    async def _listened(self) -> AsyncGenerator[dict[str, Any], None]:
        """States from one listen stream: the task as read once the subscription is acknowledged (so no
        change between the read and the subscription is missed), then each one pushed."""
        assert self.task_id is not None
        loop = asyncio.get_running_loop()
        refresh_at = loop.time() + LISTEN_REFRESH_S
        async with self._client.listen_tasks([self.task_id]) as notifications:
            while True:
                try:
                    # Bounded while waiting here only, never across a yield (that is the caller's time).
                    async with asyncio.timeout_at(refresh_at):
                        note = await anext(notifications)
                except (StopAsyncIteration, TimeoutError):
                    return  # the server ended the stream, or time to read once and listen again
                params = note.get("params")
                params = params if isinstance(params, dict) else {}
                if note.get("method") == "notifications/subscriptions/acknowledged":
                    honoured = (params.get("notifications") or {}).get("taskIds") or []
                    if self.task_id not in honoured:
                        raise _NotHonoured
                    state = await self.status()
                elif note.get("method") == "notifications/tasks" and params.get("taskId") == self.task_id:
                    state = {key: value for key, value in params.items() if key != "_meta"}
                else:
                    continue
                yield state
                if state.get("status") in TERMINAL:
                    return


class Deadline:
    """What :func:`within` knows of the call it bounds: the task it started, once there is one."""

    def __init__(self, task_id: str | None) -> None:
        self.task_id = task_id


@contextlib.asynccontextmanager
async def within(seconds: float | None, task_id: str | None = None) -> AsyncIterator[Deadline]:
    """Bound the block by ``seconds`` (``None``: no bound): :class:`DeadlineExceeded` when they pass,
    naming the deadline's ``task_id`` (set it once the block has started a task)."""
    deadline = Deadline(task_id)
    if seconds is None:
        yield deadline
        return
    scope = asyncio.timeout(seconds)
    try:
        async with scope:
            yield deadline
    except TimeoutError:
        if scope.expired():
            raise DeadlineExceeded(seconds, deadline.task_id) from None
        raise


class _NotHonoured(Exception):
    """The server acknowledged the subscription without this task."""
