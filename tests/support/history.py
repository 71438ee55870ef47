"""A history of what clients of a fleet saw, and the rules it must obey (checked after the test).

Every acknowledged ``tools/call`` that created a task, and every ``tasks/get`` answer about one, is
recorded with the moment its request was sent and the moment its answer arrived. Then:

* **nothing acknowledged is lost**: no created task is ever answered "Task not found";
* **terminal is final**: once an answer carrying a terminal status has *arrived*, every request *sent*
  after that moment sees the same status (so no ``cancelled`` becomes ``completed``, and no finished
  task runs again); concurrent requests may overlap, which is why it is arrival-then-send;
* **attempts are bounded**: no task reports more runs than the attempt limit.

Thread-safe: the multi-instance tests poll from thread pools.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"completed", "failed", "cancelled"})
RUN_ATTEMPTS = "dev.ext-tasks/runAttempts"
#: The server's default ``EXT_TASKS_MAX_ATTEMPTS``.
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Seen:
    sent: float
    arrived: float
    status: str | None  # None: the task was unknown
    attempts: int | None


@dataclass
class History:
    max_attempts: int = MAX_ATTEMPTS
    created: set[str] = field(default_factory=set)
    seen: dict[str, list[Seen]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def acknowledged(self, task_id: str) -> None:
        with self._lock:
            self.created.add(task_id)

    def answered(self, task_id: str, sent: float, message: Mapping[str, Any]) -> None:
        """Record the JSON-RPC answer to a ``tasks/get`` of ``task_id`` sent at ``sent``."""
        arrived = self.now()
        result = message.get("result")
        if isinstance(result, Mapping) and isinstance(result.get("status"), str):
            meta = result.get("_meta") or {}
            attempts = meta.get(RUN_ATTEMPTS) if isinstance(meta, Mapping) else None
            seen = Seen(sent, arrived, result["status"], attempts if isinstance(attempts, int) else None)
        elif "error" in message and "task not found" in str(message["error"].get("message", "")).lower():
            seen = Seen(sent, arrived, None, None)
        else:
            return  # another error (a refused request): no statement about the task
        with self._lock:
            self.seen.setdefault(task_id, []).append(seen)

    def violations(self) -> list[str]:
        found: list[str] = []
        with self._lock:
            seen = {task_id: list(entries) for task_id, entries in self.seen.items()}
            created = set(self.created)
        for task_id, entries in seen.items():
            if task_id in created and any(entry.status is None for entry in entries):
                found.append(f"{task_id}: acknowledged, later answered as unknown (lost)")
            for final in (entry for entry in entries if entry.status in TERMINAL):
                later = {entry.status for entry in entries if entry.sent > final.arrived} - {final.status}
                if later:
                    found.append(f"{task_id}: {final.status} at {final.arrived:.3f}, then {sorted(map(str, later))}")
                    break
            most = max((entry.attempts or 0 for entry in entries), default=0)
            if most > self.max_attempts:
                found.append(f"{task_id}: ran {most} times (limit {self.max_attempts})")
        return found

    def summary(self) -> str:
        with self._lock:
            observations = sum(len(entries) for entries in self.seen.values())
            return f"{len(self.created)} tasks acknowledged, {observations} statuses observed"
