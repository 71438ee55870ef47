"""The client commands' side of the task record (:mod:`.records`): ``ext-tasks call`` records the task
it started, ``call`` and ``task get|wait`` note the states they see, ``task get|wait|cancel ID`` without
``--url`` find the task's server in it, and ``task list`` shows it.

The record never makes a command fail or wait long: its file work runs in a thread (a lock held by
another process must not freeze the status line or Ctrl-C), one change after the other in the order
asked, and the first failure (warned once) turns recording off for the rest of the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from .console import Console
from .records import LOCK_WAIT_S, Entry, Records, new_entry
from .safe_text import safe_json, safe_text
from .tasks import TaskHandle

#: States seen while a task runs are written at most this often (its end always is).
UPDATE_EVERY_S: Final = 5.0
#: How long a command waits, at its end, for its last change to the record.
_SETTLE_S: Final = LOCK_WAIT_S + 5.0


class NotRecorded(LookupError):
    """A task id the record does not know."""


class Recorder:
    """One command's changes to the record, for the task of ``tool`` (``None``: a task started elsewhere,
    whose entry is updated if there is one, never added) on ``server``."""

    def __init__(self, console: Console, server: str, tool: str | None, records: Records | None = None) -> None:
        self._console = console
        self._server = server
        self._tool = tool
        self._warnings: list[str] = []
        self._records = records or Records(warn=self._warnings.append)
        self._failed = False
        self._job: asyncio.Future[None] | None = None
        self._task_id: str | None = None
        #: The handle's state when it was taken up: already recorded, or (``task``) a placeholder.
        self._initial: Mapping[str, Any] | None = None
        self._written: tuple[object, object] | None = None
        self._written_at = float("-inf")

    async def begin(self, handle: TaskHandle) -> None:
        """A task taken up: ``call`` records it at once (before waiting: a killed terminal keeps it)."""
        self._task_id, self._initial = handle.task_id, handle.last
        if handle.task_id is None or self._tool is None:
            return
        entry = new_entry(self._server, self._tool, handle.task_id, handle.last, datetime.now(UTC))
        if entry is None:
            self._console.say("this task is not recorded locally (a URL with credentials, or values too long)")
            return
        self._mark(handle.last)
        # Shielded: a Ctrl-C or --timeout here must not cancel the job while its thread still writes (the
        # next job would then start before it ended).
        await asyncio.shield(self._submit(lambda: self._records.add(entry)))

    def seen(self, state: Mapping[str, Any], *, final: bool = False) -> asyncio.Future[None] | None:
        """A state of the task: written when it says something new, and (unless ``final``) not sooner
        than :data:`UPDATE_EVERY_S` after the last write. The returned job may be awaited, or not."""
        if self._task_id is None or state is self._initial:
            return None
        mark = (state.get("status"), state.get("statusMessage"))
        if mark == self._written or (not final and time.monotonic() - self._written_at < UPDATE_EVERY_S):
            return None
        self._mark(state)
        task_id, snapshot = self._task_id, dict(state)
        return self._submit(lambda: self._records.learned(self._server, task_id, snapshot))

    def picked_up(self, task_id: str) -> None:
        """``task get|wait|cancel``: the task is known by its id alone, before any state of it."""
        self._task_id = task_id

    async def close(self) -> None:
        """Wait (bounded) for the last change, so that the command's exit does not cut it off."""
        if self._job is not None:
            await asyncio.wait([self._job], timeout=_SETTLE_S)

    def _mark(self, state: Mapping[str, Any]) -> None:
        self._written = (state.get("status"), state.get("statusMessage"))
        self._written_at = time.monotonic()

    def _submit(self, change: Callable[[], bool]) -> asyncio.Future[None]:
        previous = self._job

        async def run() -> None:
            if previous is not None:
                await asyncio.wait([previous])  # in the order asked: an end is never overwritten by a middle
            if self._failed:
                return
            try:
                await asyncio.to_thread(change)
            except Exception as exc:  # noqa: BLE001 - the record is a convenience: never the command's failure
                self._warnings.append(f"the task record was not updated: {exc!r}")
            if self._warnings:
                self._failed = True
                self._console.say(f"warning: {self._warnings[0]}")
                self._warnings.clear()

        self._job = asyncio.ensure_future(run())
        return self._job


def server_of(task_id: str, console: Console, records: Records | None = None) -> str:
    """The server of a recorded task (said on stderr, so that the URL used is never a surprise);
    :class:`NotRecorded` when the record does not have it."""
    records = records or Records(warn=lambda message: console.say(f"warning: {message}"))
    entry = records.find(task_id)
    if entry is None:
        raise NotRecorded(
            f"task {safe_text(task_id)} is not in the local task record: pass --url to say which server has it"
        )
    console.say(f"task {entry.task_id}: {entry.server} (from the task record)")
    return entry.server


def print_list(console: Console, out: TextIO, *, server: str | None, as_json: bool) -> int:
    """``task list``: the recorded tasks, newest started first (of one server with ``--url``)."""
    records = Records(warn=lambda message: console.say(f"warning: {message}"))
    entries = [entry for entry in records.entries() if server is None or entry.server == server]
    if as_json:
        print(safe_json([entry.to_json() for entry in entries]), file=out)
        return 0
    if not entries:
        where = f" for {server}" if server else ""
        with contextlib.suppress(OSError):  # said already, by entries()
            where += f" (the record: {records.path()})"
        console.say(f"no tasks recorded{where}")
        return 0
    rows = [("SERVER", "TOOL", "TASK ID", "STARTED", "STATUS", "EXPIRES"), *map(_row, entries)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out)
    return 0


def _row(entry: Entry) -> tuple[str, str, str, str, str, str]:
    expires = "-" if entry.expires_at is None else _when(entry.expires_at)
    return (safe_text(entry.server), safe_text(entry.tool), safe_text(entry.task_id), _when(entry.created_at),
            safe_text(entry.last_status), expires)  # fmt: skip


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
