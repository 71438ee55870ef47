"""Every Valkey key and channel of the legacy (2025-11-25) sessions, in one place.

Under the task store's prefix, beside its keys, but not part of its schema: the task store never
reads them. Each step on them touches one key (single-key commands: any slot), except the two-step
session creation (:mod:`.valkey_sessions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ext_tasks.options import VALKEY_PREFIX


@dataclass(frozen=True, slots=True)
class SessionKeys:
    prefix: str = VALKEY_PREFIX

    def session(self, session_id: str) -> str:
        return f"{self.prefix}:session:{session_id}"

    def sessions_of(self, principal: str) -> str:
        return f"{self.prefix}:sessions-of:{principal}"

    def session_bus(self, session_id: str) -> str:
        """The sharded channel of one session's messages."""
        return f"{self.prefix}:session-bus:{session_id}"

    def legacy_index(self, scope: str) -> str:
        return f"{self.prefix}:legacy-tasks:{scope}"

    def shim_task(self, task_id: str) -> str:
        return f"{self.prefix}:shim-task:{task_id}"

    def legacy_cancelled(self, task_id: str) -> str:
        return f"{self.prefix}:legacy-cancelled:{task_id}"

    def held(self, key: str) -> str:
        return f"{self.prefix}:held:{key}"
