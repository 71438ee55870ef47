"""Every Valkey key of the task store, in one place (no other module of the task store formats a key).

All keys of one task carry the task id as a hash tag (``{id}``), so each task's script touches one
slot; the queue, the idempotency keys and the cancellation channel are shared by the fleet (on a
Valkey Cluster the creation script would need the idempotency key in the task's slot, which is a
change of key scheme, not of logic).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KeySchema:
    prefix: str = "ext-tasks"

    def task(self, task_id: str) -> str:
        return f"{self.prefix}:task:{{{task_id}}}"

    def tombstone(self, task_id: str) -> str:
        return f"{self.prefix}:tomb:{{{task_id}}}"

    def active(self, owner: str) -> str:
        return f"{self.prefix}:active:{owner}"

    def stored(self, owner: str) -> str:
        return f"{self.prefix}:stored:{owner}"

    def claim(self, key: str) -> str:
        return f"{self.prefix}:claim:{key}"

    def idempotency(self, scoped_key: str) -> str:
        return f"{self.prefix}:idem:{scoped_key}"

    @property
    def runs(self) -> str:
        return f"{self.prefix}:runs"

    @property
    def run_group(self) -> str:
        return "workers"

    @property
    def events_channel(self) -> str:
        return f"{self.prefix}:task-events"

    @property
    def cancel_channel(self) -> str:
        return f"{self.prefix}:cancel"
