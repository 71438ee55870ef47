"""A legacy session's GET stream: what the session is told without asking, from whichever instance.

* messages published to the session (``{"kind": "notification"}`` on the session bus);
* list changes (tools, prompts, resources) and updates of the resources the session subscribed to
  (``resources/subscribe``), as ``initialize`` advertises;
* for the tasks the session created: ``notifications/tasks/status`` on every change, and their
  questions as server→client requests (with the ``related-task`` ``_meta``). 2025-11-25 clients must
  expect task messages on any stream; some (the official TypeScript tasks client) take a task's
  questions only from this one, because they call ``tasks/result`` only once the task is terminal.

Task changes come from a modern ``subscriptions/listen`` on the session's tasks, so they reach this
stream whichever instance runs the task. When the session creates a task, the new id is announced on the
session bus and the subscription is renewed to include it. Each time a subscription is live, the newly
watched tasks are read once, so a question asked before the stream (or the renewal) existed is relayed
too. A question that another stream of the session relays (a waiting ``tasks/result``) is left to it and
tried again when that stream lets it go (:class:`~.questions.StreamQuestions`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from ext_tasks.auth import Caller
from ext_tasks.protocol.errors import ProtocolError
from ext_tasks.protocol.jsonrpc import notification_message
from ext_tasks.protocol.result_types import DetailedTask

from .legacy_tasks import LegacyTasks
from .modern_results import detailed_task
from .questions import StreamQuestions
from .remote import UpstreamFailed
from .sessions import LegacySession, SessionStore
from .translate import legacy_notification, legacy_task
from .upstream import ModernCall, ModernUpstream

Message = dict[str, Any]
ModernFor = Callable[..., ModernCall]

#: How many of its newest tasks a session's GET stream follows, and how many it reads when it opens.
WATCHED_TASKS: Final = 1_000
SNAPSHOT_TASKS: Final = 100
_LIST_FLAGS: Final = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")
#: Notifications of the modern subscription that the legacy stream passes on (translated).
_CHANGES: Final = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
_FOLLOWED: Final = _CHANGES | {"notifications/tasks"}
#: Changes of the subscription waiting for the stream. A client that does not read its stream stops the
#: watch from reading the subscription (whose own buffer then drops the oldest): nothing grows here.
_CHANGES_BUFFER: Final = 256
#: The pause before a subscription that broke off (a proxy's upstream went silent or away) is renewed.
_RELISTEN_PAUSE_S: Final = 1.0


class GetStream:
    """One open GET stream of ``session``; :meth:`messages` is what goes on the wire (``None``: a
    keep-alive comment)."""

    def __init__(
        self,
        session: LegacySession,
        caller: Caller,
        *,
        sessions: SessionStore,
        upstream: ModernUpstream,
        tasks: LegacyTasks,
        modern: ModernFor,
        keepalive_s: float,
    ) -> None:
        self.session = session
        self.caller = caller
        self._sessions = sessions
        self._upstream = upstream
        self._tasks = tasks
        self._modern = modern
        self._keepalive_s = keepalive_s
        self._changes: asyncio.Queue[Message] = asyncio.Queue(_CHANGES_BUFFER)
        #: A message that arrived together with the one :meth:`_next` returned, for its next turn.
        self._early: list[Message] = []
        #: Tasks whose status the next read tells as well (they went unwatched while a subscription broke).
        self._recheck: set[str] = set()
        self._questions = StreamQuestions(sessions, session.session_id)
        self._watched: list[str] = []
        self._unread: list[str] = []
        self._generation = 0
        self._watch: asyncio.Task[None] | None = None
        #: Per task: (lastUpdatedAt, status, statusMessage) of the last status notification sent.
        self._told: dict[str, tuple[str, str, Any]] = {}

    async def messages(self) -> AsyncIterator[Message | None]:
        async with self._sessions.subscribe(self.session.session_id) as inbox:
            self._watched = list(await self._sessions.list_tasks(self.session.watch_scope, 0, WATCHED_TASKS))
            self._unread = self._watched[-SNAPSHOT_TASKS:]
            self._follow()
            try:
                yield None  # an SSE comment at once: the stream is open and its bus subscription live
                while True:
                    message = await self._next(inbox)
                    await self._questions.keep()
                    if message is None or message.get("kind") == "released":
                        yield None  # keep-alive; questions left to other streams are tried again
                        self._unread.extend(sorted(self._questions.deferred))
                        message = {"live": self._generation} if self._unread else None
                    if message is not None:
                        for outgoing in await self._handle(message):
                            yield outgoing
            finally:
                if self._watch is not None:
                    self._watch.cancel()
                await self._questions.close()

    async def _handle(self, message: Message) -> list[Message]:
        if message.get("kind") == "watch":
            self._watched = [*self._watched, str(message["taskId"])][-WATCHED_TASKS:]
            self._unread.append(str(message["taskId"]))
            self._follow()
            return []
        if message.get("kind") == "notification":
            return [message["message"]]
        if message.get("kind") == "relisten":
            # The subscription ended: renew it, and read the tasks once it is live, telling their status
            # too (a change while there was no subscription would be lost otherwise).
            self._recheck = set(self._watched[-SNAPSHOT_TASKS:])
            self._unread.extend(self._recheck)
            self._follow()
            return []
        if message.get("kind") in ("resubscribe", "reconnected"):
            # The session's resource subscriptions changed, or the bus was down (an announcement of a
            # new task may be lost): read the session again and renew the subscription.
            session = await self._sessions.load(self.session.session_id)
            if session is not None:
                self.session = session
            watched = await self._sessions.list_tasks(self.session.watch_scope, 0, WATCHED_TASKS)
            self._unread.extend(task_id for task_id in watched if task_id not in set(self._watched))
            self._watched = watched
            self._follow()
            return []
        if message.get("method") in _CHANGES:
            return [legacy_notification(message)]
        if message.get("kind") == "response":
            answered = self._questions.relay.answer(message)
            if answered is not None:
                await self._tasks.forward(self.session, self.caller, answered)
            return []
        if message.get("live") == self._generation:
            return await self._read_unread()
        if message.get("method") == "notifications/tasks":
            task = detailed_task(message.get("params"))
            if task is None:
                return []  # not a task: nothing to tell the client
            status = await self._status(task)
            return [*status, *await self._questions.ask(task)]
        return []

    async def _read_unread(self) -> list[Message]:
        """Once a subscription is live: the questions of the tasks not read since (and the status of those
        to recheck)."""
        unread, self._unread = list(dict.fromkeys(self._unread)), []
        recheck, self._recheck = self._recheck, set()
        outgoing: list[Message] = []
        for task in await self._read(unread):
            questions = await self._questions.ask(task)
            if questions or task.task_id in recheck:
                # As on a change, the status comes first: a task whose question is relayed from a
                # fresh read (the stream became live after the task started waiting) is also told
                # to be waiting, or a client that polls past the wait never learns it did.
                outgoing += await self._status(task)
            outgoing += questions
        return outgoing

    async def _status(self, task: DetailedTask) -> list[Message]:
        """``notifications/tasks/status`` for a change, unless it is older than one already told (the
        subscription and a fresh read can cross) or tells the client nothing new."""
        task_id = task.task_id
        cancelled = await self._sessions.was_cancelled(task_id)
        legacy = legacy_task(task, cancelled_by_legacy=cancelled)
        told = (legacy.last_updated_at, legacy.status, legacy.status_message or None)
        last = self._told.get(task_id)
        if last is not None and (told[0] < last[0] or told[1:] == last[1:]):
            return []
        self._told[task_id] = told
        if len(self._told) > WATCHED_TASKS:  # keep what the stream still follows
            watched = set(self._watched)
            self._told = {key: value for key, value in self._told.items() if key in watched}
        return [notification_message("notifications/tasks/status", legacy)]

    async def _read(self, task_ids: list[str]) -> list[DetailedTask]:
        tasks = []
        for task_id in task_ids:
            with contextlib.suppress(ProtocolError):  # expired, or not a task of the upstream's
                tasks.append(await self._tasks.task(self.session, task_id, self.caller))
        return tasks

    async def _next(self, inbox: asyncio.Queue[Message]) -> Message | None:
        """The next message of the session bus or of the task subscription; ``None`` after a quiet
        keep-alive interval."""
        if self._early:
            return self._early.pop()
        readers = {asyncio.create_task(inbox.get()), asyncio.create_task(self._changes.get())}
        done, pending = await asyncio.wait(readers, timeout=self._keepalive_s, return_when=asyncio.FIRST_COMPLETED)
        for reader in pending:
            reader.cancel()
        if not done:
            return None
        first = done.pop()
        # Both arrived at once: the other is kept here for the next turn (putting it back could wait on a
        # full queue that only this stream empties).
        self._early.extend(extra.result() for extra in done)
        return first.result()

    def _follow(self) -> None:
        """(Re)subscribe to the watched tasks. Once the subscription is live it says
        ``{"live": generation}``, so the stream can tell it from one it replaced."""
        if self._watch is not None:
            self._watch.cancel()
        self._generation += 1
        generation, task_ids = self._generation, sorted(set(self._watched))

        wanted: dict[str, Any] = dict.fromkeys(_LIST_FLAGS, True)
        if self.session.subscriptions:
            wanted["resourceSubscriptions"] = list(self.session.subscriptions)
        if task_ids:
            wanted["taskIds"] = task_ids

        async def watch() -> None:
            listen = self._modern(self.session, "subscriptions/listen", {"notifications": wanted}, tasks=True)
            try:
                async for message in self._upstream.send(listen, self.caller):
                    if message.get("method") == "notifications/subscriptions/acknowledged":
                        await self._changes.put({"live": generation})
                    elif message.get("method") in _FOLLOWED:
                        await self._changes.put(message)
                    elif "error" in message:
                        return  # an upstream that cannot listen: nothing to relay
            except UpstreamFailed:
                pass  # broken off (silence past the proxy's read timeout, a restart): listen again
            except ProtocolError:
                return
            await asyncio.sleep(_RELISTEN_PAUSE_S)
            await self._changes.put({"kind": "relisten"})

        self._watch = asyncio.create_task(watch(), name="ext-tasks-legacy-task-watch")
