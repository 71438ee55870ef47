"""The task questions the shim relays to a 2025-11-25 client as server→client requests, and the answers
coming back: :class:`Relay` on one stream (each question of a task once, in order, never an older state's),
:class:`StreamQuestions` across a session's streams (each question asked once per session, handed over
when the stream that asked it ends).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ext_tasks.protocol.result_types import DetailedTask

from .sessions import SessionStore
from .translate import TERMINAL, answer_from_legacy_response, legacy_input_request

Message = dict[str, Any]

#: How long a stream holds a question it relayed without renewing it (it renews while it lives).
_HOLD_MS: Final = 30_000


@dataclass(frozen=True, slots=True)
class Answer:
    """A client's response to one relayed request: the input key and task it answers, and the
    ``inputResponses`` value (``None`` when the client refused a request that has no "cancel" answer)."""

    key: str
    method: str
    task_id: str | None
    value: dict[str, Any] | None


class Relay:
    """Input requests relayed to the client as server→client requests on one stream, and the answers
    coming back over the session bus (the client may POST them to any instance)."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, str, str | None]] = {}
        #: Per task: the keys relayed here, and the newest ``lastUpdatedAt`` seen.
        self._seen: dict[str, tuple[set[str], str]] = {}

    def request(self, key: str, entry: Mapping[str, Any], task_id: str | None) -> Message:
        method, params = legacy_input_request(entry, key, task_id)
        request_id = f"srv-{secrets.token_urlsafe(9)}"
        self.pending[request_id] = (key, method, task_id)
        if task_id is not None:
            self._seen.setdefault(task_id, (set(), ""))[0].add(key)
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}

    def questions(self, task: DetailedTask) -> dict[str, Any]:
        """The questions of ``task`` not yet relayed on this stream.

        A state older than one already seen is ignored (a task's notifications and a fresh read of it
        can arrive out of order). Keys are never reused within a task's life, so a question relayed once
        is never relayed again here; a finished task is forgotten, with its unanswered requests.
        """
        task_id = task.task_id
        if task.status in TERMINAL:
            self._seen.pop(task_id, None)
            for request_id, (_, _, pending_task) in list(self.pending.items()):
                if pending_task == task_id:
                    del self.pending[request_id]
            return {}
        asked, newest = self._seen.get(task_id, (set(), ""))
        if task.last_updated_at < newest:
            return {}
        self._seen[task_id] = (asked, task.last_updated_at)
        requests: Mapping[str, Any] = task.input_requests or {}
        if task.status != "input_required":
            return {}
        return {key: entry for key, entry in requests.items() if key not in asked}

    def held(self) -> list[tuple[str, str]]:
        """``(task id, key)`` of every task question relayed here and not answered yet."""
        return [(task_id, key) for key, _, task_id in self.pending.values() if task_id is not None]

    def answer(self, published: Mapping[str, Any]) -> Answer | None:
        """The :class:`Answer` in a message of the session bus, if it responds to one of our requests."""
        if published.get("kind") != "response":
            return None
        response = published.get("message") or {}
        target = self.pending.pop(str(response.get("id")), None)
        if target is None:
            return None
        key, method, task_id = target
        return Answer(key, method, task_id, answer_from_legacy_response(method, response))


class StreamQuestions:
    """The task questions one stream of a session relays: each question is asked once per session.

    A session may have several streams that could carry a task's question (the GET stream, a waiting
    ``tasks/result``, on any instances). Before relaying a question a stream takes it in the session
    store; a question another live stream holds is left to that stream, and tried again later
    (:meth:`retry`), since that stream may end before the client answers. A stream keeps its questions
    while it lives (:meth:`keep`) and gives them up when it ends (:meth:`close`).
    """

    def __init__(self, sessions: SessionStore, session_id: str, hold_ms: int = _HOLD_MS) -> None:
        self.relay = Relay()
        self.deferred: set[str] = set()
        self._sessions = sessions
        self._session_id = session_id
        self._holder = secrets.token_urlsafe(9)
        self._hold_ms = hold_ms
        self._kept_at = time.monotonic()

    def _key(self, task_id: str, key: str) -> str:
        return f"{self._session_id}:{task_id}:{key}"

    async def ask(self, task: DetailedTask) -> list[Message]:
        """Requests for the questions of ``task`` this stream should relay now."""
        task_id = task.task_id
        self.deferred.discard(task_id)
        outgoing = []
        for key, entry in self.relay.questions(task).items():
            if await self._sessions.hold(self._key(task_id, key), self._holder, self._hold_ms):
                outgoing.append(self.relay.request(key, entry, task_id))
            else:
                self.deferred.add(task_id)  # another stream of the session asks it
        return outgoing

    def keep_interval_s(self) -> float:
        """How often :meth:`keep` renews the holds (a third of their lifetime)."""
        return self._hold_ms / 3000

    async def keep(self) -> None:
        """Extend this stream's hold on its unanswered questions (cheap to call often)."""
        if time.monotonic() - self._kept_at < self.keep_interval_s():
            return
        self._kept_at = time.monotonic()
        for task_id, key in self.relay.held():
            await self._sessions.hold(self._key(task_id, key), self._holder, self._hold_ms)

    async def close(self) -> None:
        """Give up this stream's questions, and tell the session's other streams to take them over."""
        held = self.relay.held()
        with contextlib.suppress(Exception):  # the store being down: the holds lapse by themselves
            for task_id, key in held:
                await self._sessions.let_go(self._key(task_id, key), self._holder)
            if held:
                await self._sessions.publish(self._session_id, {"kind": "released"})
