"""The CLI's local record of the tasks it started: which server, which tool, which task, when, and the
last status seen. The protocol has no way to list one's tasks, so the requestor keeps this association
itself; ``ext-tasks task list`` shows it and ``ext-tasks task wait ID`` finds the server in it.

The record is ``tasks.json`` in the state directory (:mod:`.state_dir`)::

    {"version": 1, "tasks": [{"server": ..., "tool": ..., "taskId": ..., "createdAt": ...,
                              "expiresAt": ... | null, "lastStatus": ..., "statusMessage": ... | null,
                              "updatedAt": ...}, ...]}

It holds no token and no argument: only what is needed to find a task again. It is bounded: read only
up to :data:`MAX_BYTES` (a larger file is ignored, with a warning, and replaced), at most
:data:`MAX_ENTRIES` entries (the oldest started dropped first), and pruned on every write: a task
past its ``expiresAt`` (the server has forgotten it), and one not heard of for :data:`KEEP` that has
ended or has no expiry.

The file is on disk, so it is not trusted: each entry read is checked (types, lengths, dates) and a bad
one dropped; a corrupt or wrong-shaped file is ignored with a warning and replaced on the next write; a
symbolic link in its place is neither followed nor replaced. Writers take an ``flock`` on a lock file
beside it for the read-modify-write, waiting at most :data:`LOCK_WAIT_S`. Nothing here raises: the
record is a convenience, and a command must never fail because of it (a failure is a warning, and the
change is skipped).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from .state_dir import read_private, state_dir, write_private

RECORD_FILE: Final = "tasks.json"
LOCK_FILE: Final = "tasks.json.lock"
VERSION: Final = 1
MAX_BYTES: Final = 1024 * 1024
MAX_ENTRIES: Final = 500
#: How long an ended task, or one without an expiry, stays after it was last heard of.
KEEP: Final = timedelta(days=7)
#: How long a writer waits for another one: then its change is skipped (with a warning).
LOCK_WAIT_S: Final = 2.0
MESSAGE_CHARS: Final = 200
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
#: Bounds on what is accepted from the file (or a server): generous for real values, small enough that
#: 500 entries stay far below MAX_BYTES.
_MAX_URL: Final = 1024
_MAX_NAME: Final = 256
_MAX_STATUS: Final = 32
_MAX_DATE: Final = 40
#: A server's createdAt further than this from the local clock is not believed (a wrong or hostile
#: clock would otherwise keep an entry past every pruning rule).
_SKEW: Final = timedelta(days=1)
#: A TTL above this is taken as no expiry (and avoids overflowing a datetime).
_MAX_TTL_MS: Final = 10 * 365 * 86_400_000
_LOCK_POLL_S: Final = 0.01

Warn = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"ext-tasks: {message}", file=sys.stderr)  # noqa: T201 - the default warning channel


@dataclass(frozen=True)
class Entry:
    server: str
    tool: str
    task_id: str
    created_at: datetime
    expires_at: datetime | None
    last_status: str
    status_message: str | None
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "tool": self.tool,
            "taskId": self.task_id,
            "createdAt": iso(self.created_at),
            "expiresAt": None if self.expires_at is None else iso(self.expires_at),
            "lastStatus": self.last_status,
            "statusMessage": self.status_message,
            "updatedAt": iso(self.updated_at),
        }

    @classmethod
    def from_json(cls, raw: object) -> Entry | None:
        """The entry, or None when anything in it is missing, of the wrong type or out of bounds."""
        if not isinstance(raw, dict):
            return None
        server, tool, task_id = _server(raw.get("server")), _text(raw.get("tool")), _text(raw.get("taskId"))
        status, message = _text(raw.get("lastStatus"), _MAX_STATUS), raw.get("statusMessage")
        created, updated = _date(raw.get("createdAt")), _date(raw.get("updatedAt"))
        expires = raw.get("expiresAt")
        expires_at = None if expires is None else _date(expires)
        if (
            server is None
            or tool is None
            or task_id is None
            or status is None
            or not (message is None or (isinstance(message, str) and len(message) <= MESSAGE_CHARS))
            or created is None
            or updated is None
            or (expires is not None and expires_at is None)
        ):
            return None
        return cls(server, tool, task_id, created, expires_at, status, message, updated)

    @property
    def key(self) -> tuple[str, str]:
        return (self.server, self.task_id)

    def learned(self, state: Mapping[str, Any], now: datetime) -> Entry:
        """This entry after a state of its task was seen (a TTL the server shortened is followed)."""
        status = _text(state.get("status"), _MAX_STATUS)
        if status is None:
            return self
        expires_at = self.expires_at
        if "ttlMs" in state:
            expires_at = _expiry(self.created_at, state.get("ttlMs"))
        return replace(self, last_status=status, status_message=_message(state), expires_at=expires_at, updated_at=now)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_entry(server: str, tool: str, task_id: str, state: Mapping[str, Any], now: datetime) -> Entry | None:
    """The entry for a task just started, from its ``CreateTaskResult`` (None if it cannot be kept: a
    URL carrying credentials, or values out of bounds)."""
    if _server(server) is None or _text(tool) is None or _text(task_id) is None:
        return None
    created = _date(state.get("createdAt"))
    if created is None or abs(created - now) > _SKEW:
        created = now
    return Entry(server, tool, task_id, created, None, "working", None, now).learned(state, now)


def prune(entries: list[Entry], now: datetime) -> list[Entry]:
    """The entries still worth keeping, newest started first, at most :data:`MAX_ENTRIES`. One dated in
    the future (a file written by hand, or under a wrong clock) would escape every rule: it goes too."""
    kept = [
        entry
        for entry in entries
        if not (entry.expires_at is not None and entry.expires_at <= now)
        and not ((entry.last_status in TERMINAL or entry.expires_at is None) and now - entry.updated_at > KEEP)
        and max(entry.created_at, entry.updated_at) <= now + _SKEW
    ]
    kept.sort(key=lambda entry: entry.created_at, reverse=True)
    return kept[:MAX_ENTRIES]


class Records:
    """The record in ``directory`` (default: the state directory, found when first used)."""

    def __init__(self, directory: Path | None = None, *, warn: Warn = _stderr, lock_wait_s: float = LOCK_WAIT_S):
        self._directory = directory
        self._warn = warn
        self._lock_wait_s = lock_wait_s

    def path(self) -> Path:
        """Where the record is (creating the state directory; raises OSError if it cannot be used)."""
        if self._directory is None:
            self._directory = state_dir()
        return self._directory / RECORD_FILE

    def entries(self) -> list[Entry]:
        """The entries, pruned, newest started first (none if the record cannot be read). No lock is
        taken: the file is replaced atomically, so a read sees a whole version of it."""
        try:
            path = self.path()
        except OSError as exc:
            self._warn(f"the task record cannot be used: {exc}")
            return []
        return prune(self._read(path), _now())

    def find(self, task_id: str) -> Entry | None:
        """The most recently started entry of that task id (ids are the servers', so two servers may
        share one)."""
        return next((entry for entry in self.entries() if entry.task_id == task_id), None)

    def add(self, entry: Entry) -> bool:
        """Record a task (replacing an entry of the same server and id); whether it was written."""
        return self._change(lambda entries: [*(old for old in entries if old.key != entry.key), entry])

    def learned(self, server: str, task_id: str, state: Mapping[str, Any]) -> bool:
        """Update the entry of that task, if there is one, with a state of it seen from its server."""
        now = _now()

        def change(entries: list[Entry]) -> list[Entry] | None:
            if not any(entry.key == (server, task_id) for entry in entries):
                return None  # a task started elsewhere: its tool is unknown, it is not ours to add
            return [entry.learned(state, now) if entry.key == (server, task_id) else entry for entry in entries]

        return self._change(change)

    def _change(self, change: Callable[[list[Entry]], list[Entry] | None]) -> bool:
        try:
            path = self.path()
            with self._locked(path.with_name(LOCK_FILE)) as held:
                if not held:
                    self._warn(f"the task record is busy (locked for over {self._lock_wait_s:g} s); not updated")
                    return False
                if path.is_symlink():
                    self._warn(f"{path} is a symbolic link: the task record is not used (make it a plain file)")
                    return False
                changed = change(self._read(path))
                if changed is None:
                    return False
                document = {"version": VERSION, "tasks": [entry.to_json() for entry in prune(changed, _now())]}
                write_private(path, json.dumps(document, ensure_ascii=False, indent=1).encode())
                return True
        except OSError as exc:
            self._warn(f"the task record was not updated: {exc}")
            return False

    @contextlib.contextmanager
    def _locked(self, lock_path: Path) -> Iterator[bool]:
        """Hold the lock (True), or give up after the bounded wait (False). The lock file stays: removing
        it would let two writers lock two different files."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(lock_path, flags, 0o600)
        try:
            deadline = time.monotonic() + self._lock_wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(_LOCK_POLL_S)  # flock has no timed wait; polling bounds it
            yield True  # closing the file releases the lock
        finally:
            os.close(fd)

    def _read(self, path: Path) -> list[Entry]:
        try:
            data = read_private(path, MAX_BYTES)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._warn(f"{path} is a symbolic link: not followed")
            else:
                self._warn(f"the task record cannot be read: {exc}")
            return []
        if data is None:
            if path.exists():
                self._warn(f"{path} is larger than {MAX_BYTES} bytes: ignored (it will be replaced)")
            return []
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            self._warn(f"{path} is not JSON: ignored (it will be replaced)")
            return []
        tasks = document.get("tasks") if isinstance(document, dict) else None
        if not isinstance(document, dict) or document.get("version") != VERSION or not isinstance(tasks, list):
            self._warn(f"{path} is not a version {VERSION} task record: ignored (it will be replaced)")
            return []
        entries = [entry for entry in map(Entry.from_json, tasks) if entry is not None]
        if len(entries) < len(tasks):
            self._warn(f"{path}: {len(tasks) - len(entries)} malformed entries dropped")
        return entries


def _now() -> datetime:
    return datetime.now(UTC)


def _text(value: object, limit: int = _MAX_NAME) -> str | None:
    """A non-empty string of at most ``limit`` characters, or None."""
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _server(value: object) -> str | None:
    """An http(s) URL without a user or password in it (credentials are never recorded), or None."""
    url = _text(value, _MAX_URL)
    try:
        parts = urlsplit(url) if url is not None else None
        usable = parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return None
    return url if usable and parts is not None and "@" not in parts.netloc else None


def _date(value: object) -> datetime | None:
    """An ISO 8601 date with its offset, in UTC (None for anything else)."""
    text = _text(value, _MAX_DATE)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
        return moment.astimezone(UTC) if moment.tzinfo is not None else None
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved out of range by its offset
        return None


def _expiry(created_at: datetime, ttl_ms: object) -> datetime | None:
    if not isinstance(ttl_ms, int | float) or isinstance(ttl_ms, bool) or not 0 <= ttl_ms <= _MAX_TTL_MS:
        return None  # null (no expiry), or nothing usable
    try:
        return created_at + timedelta(milliseconds=ttl_ms)
    except OverflowError:  # a createdAt read from the file near year 9999
        return None


def _message(state: Mapping[str, Any]) -> str | None:
    message = state.get("statusMessage")
    return message[:MESSAGE_CHARS] if isinstance(message, str) and message else None
