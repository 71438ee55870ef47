"""The tasks the shim keeps itself: a 2025-11-25 client asked for a task (``params.task``) and the
upstream answered inline instead (a preflight tool that finished before it became a task, or a remote
server's choice); such a client can only take a ``CreateTaskResult``, so the answer is kept in the
session store as a task that has already finished.

They are bounded like the engine's own tasks:

* the lifetime is the client's ``ttl`` hint, else ``EXT_TASKS_TASK_TTL_MS``, never more than
  ``EXT_TASKS_TASK_MAX_TTL_MS``;
* a result over ``EXT_TASKS_MAX_RESULT_BYTES`` is not kept: the task ends ``failed``, saying so, as a
  worker's does;
* each takes a finished place among its principal's places, charged its size, under the stored-task
  and byte caps. In ``ext-tasks serve`` those are the task store's own places (the shim is given them),
  so these tasks count with the principal's engine tasks, exactly, on one Valkey or a cluster. Behind
  ``ext-tasks proxy`` there is no task store: the session store's places count them, under the same
  settings. The place lapses with the task, and gives its bytes back.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ext_tasks.clock import now_ms
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.result_types import DetailedTask, TypedResult
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.task_views import iso8601
from ext_tasks.protocol.tasks import encoded_size, failure_status, result_too_large
from ext_tasks.store.base import ActiveLimit, OverCap, OwnerPlaces, Place
from ext_tasks.task_methods import refusal

from .sessions import LegacySession, SessionStore

Message = dict[str, Any]
#: Ids of the shim's own tasks start with this. (A random engine id starting with these 12 characters
#: has a chance of 64**-12.)
SHIM_TASK_PREFIX: Final = "shim-inline-"


class OwnTasks:
    def __init__(self, sessions: SessionStore, places: OwnerPlaces, tasks: TaskOptions, max_result_bytes: int) -> None:
        self.sessions = sessions
        self.places = places
        self.options = tasks
        self.max_result_bytes = max_result_bytes

    def ttl_for(self, params: Mapping[str, Any]) -> int:
        """The lifetime granted: the client's ``params.task.ttl`` if it is one, else the default; never
        more than the maximum."""
        hint = (params.get("task") or {}).get("ttl")
        wanted = hint if isinstance(hint, int) and not isinstance(hint, bool) and hint > 0 else self.options.task_ttl_ms
        return min(wanted, self.options.task_max_ttl_ms)

    async def keep(self, session: LegacySession, params: Mapping[str, Any], result: TypedResult) -> DetailedTask:
        """Keep ``result`` (an inline ``CallToolResult``) as a finished task of ``session``; the task, as
        the modern ``DetailedTask`` it reads as. Past a cap: -31429 (HTTP 429)."""
        now = now_ms()
        ttl = self.ttl_for(params)
        task: Message = {
            "taskId": f"{SHIM_TASK_PREFIX}{secrets.token_urlsafe(18)}",
            "status": TaskStatus.COMPLETED.value,
            "createdAt": iso8601(now),
            "lastUpdatedAt": iso8601(now),
            "ttlMs": ttl,
            "scope": session.task_scope,
        }
        wire: Message = msgspec.to_builtins(result)
        size = encoded_size(wire)  # measured as a worker measures a task's result
        if size > self.max_result_bytes:
            error = result_too_large(size, self.max_result_bytes)
            task.update(status=TaskStatus.FAILED.value, error=error, statusMessage=failure_status(error))
        else:
            task["result"] = {key: value for key, value in wire.items() if key != "resultType"}
        options = self.options
        limit = ActiveLimit(0, now, options.max_stored_tasks, options.max_stored_bytes)
        if limit.counts:
            place = Place(session.principal, task["taskId"], now + ttl, encoded_size(task), finished=True)
            try:
                await self.places.take(place, limit)
            except OverCap as over:
                raise refusal(over, options) from None
        await self.sessions.save_task(task, ttl)
        return stored_task(task)


def stored_task(stored: Message) -> DetailedTask:
    """A task the shim kept (as the session store holds it: the wire object plus its ``scope``)."""
    return msgspec.convert({key: value for key, value in stored.items() if key != "scope"}, DetailedTask)
