"""Every Valkey key and channel of the task store, in one place (no other module formats one).

On a Valkey Cluster a script may only touch keys of one hash slot, and a key's slot is decided by its
``{hash tag}``. So every key is built around a tag, chosen so that each atomic step stays in one slot:

* **Partitions.** The run queue is split into :data:`PARTITIONS` streams, one per partition tag
  (:data:`PARTITION_TAGS`). A task belongs to one partition and its id *begins with* the partition's
  tag (``bd.Q2x...``), so every key of the task (record, tombstone, its partition's stream, its event
  channel) is found from the id alone and lives in the partition's slot. The tags were picked so that
  their slots fall into sixteen equal ranges of the slot space: a cluster whose primaries share the
  slots evenly shares the partitions evenly too.
* **Idempotency.** A task created with an idempotency key takes the partition named by that
  (principal-scoped) key, so every resend, on any instance, lands on the slot that holds the key and
  the check-and-create stays one script.
* **Owners.** A principal's places (the active and stored caps) are one sorted set in the principal's
  own slot, and the bytes they are charged (the byte budget) a hash in the same slot; creating a task
  takes a place there first (see :mod:`.valkey_places`).
* **Task ids of earlier versions** (no tag) keep the key names they were created with, and their runs
  the single stream of earlier versions, which workers on one Valkey still read until it is empty.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Final

from ..options import VALKEY_PREFIX

#: Partitions of the run queue (and of the task records). Fixed: changing it would re-home every task.
PARTITIONS: Final = 16
#: One hash tag per partition; the CRC16 slot of the n-th lies in the n-th sixteenth of the slot space
#: (checked by tests/unit/test_keys.py).
PARTITION_TAGS: Final = ("bd", "ai", "b9", "a0", "ba", "ah", "b8", "a1", "bb", "ak", "c8", "a2", "bc", "aj", "c9", "a3")
_KNOWN_TAGS: Final = frozenset(PARTITION_TAGS)
#: The pseudo-partition of runs queued by versions before partitions (one Valkey only).
LEGACY_PARTITION: Final = "legacy"
_SEPARATOR: Final = "."


def digest(value: str, size: int = 16) -> str:
    """A short, fixed-length stand-in for ``value`` in key names (principals may be long or odd)."""
    return hashlib.sha256(value.encode()).hexdigest()[:size]


def partition_of_key(key: str) -> str:
    """The partition a (principal-scoped) idempotency key maps to, and with it the task created under it."""
    return PARTITION_TAGS[int(digest(key, 8), 16) % PARTITIONS]


def new_task_id(partition: str | None = None) -> str:
    """``<partition tag>.<144 random bits>``: task ids may act as bearer tokens, so the part after the
    tag must not be guessable; a random partition unless one is asked for."""
    tag = partition if partition is not None else PARTITION_TAGS[secrets.randbelow(PARTITIONS)]
    return f"{tag}{_SEPARATOR}{secrets.token_urlsafe(18)}"


def partition_of(task_id: str) -> str:
    """The partition of a task id; :data:`LEGACY_PARTITION` for ids without a known tag (ids of earlier
    versions, or anything a client made up)."""
    tag, separator, rest = task_id.partition(_SEPARATOR)
    return tag if separator and rest and tag in _KNOWN_TAGS else LEGACY_PARTITION


@dataclass(frozen=True, slots=True)
class KeySchema:
    prefix: str = VALKEY_PREFIX

    # --- one task ---------------------------------------------------------------------------------

    def task(self, task_id: str) -> str:
        tag = partition_of(task_id)
        if tag == LEGACY_PARTITION:
            return f"{self.prefix}:task:{{{task_id}}}"
        return f"{self.prefix}:{{{tag}}}:task:{task_id}"

    def tombstone(self, task_id: str) -> str:
        tag = partition_of(task_id)
        if tag == LEGACY_PARTITION:
            return f"{self.prefix}:tomb:{{{task_id}}}"
        return f"{self.prefix}:{{{tag}}}:tomb:{task_id}"

    def task_channel(self, task_id: str) -> str:
        """The sharded channel of one task's changes (cancellations included), in the task's slot."""
        tag = partition_of(task_id)
        if tag == LEGACY_PARTITION:
            return f"{self.prefix}:events:{{{task_id}}}"
        return f"{self.prefix}:{{{tag}}}:events:{task_id}"

    # --- partitions ----------------------------------------------------------------------------------

    def runs(self, partition: str) -> str:
        if partition == LEGACY_PARTITION:
            return f"{self.prefix}:runs"
        return f"{self.prefix}:{{{partition}}}:runs"

    @property
    def run_group(self) -> str:
        return "workers"

    def idempotency(self, scoped_key: str) -> str:
        return f"{self.prefix}:{{{partition_of_key(scoped_key)}}}:idem:{scoped_key}"

    # --- one principal -------------------------------------------------------------------------------

    def owner_places(self, owner: str) -> str:
        """The principal's places: one member per kept task, scored by expiry (negative while unfinished)."""
        return f"{self.prefix}:{{o{digest(owner)}}}:places"

    def owner_bytes(self, owner: str) -> str:
        """The bytes each of the principal's places is charged, and their sum (in the places' slot)."""
        return f"{self.prefix}:{{o{digest(owner)}}}:bytes"

    # --- everything else (single-key commands: any slot) ---------------------------------------------

    def claim(self, key: str) -> str:
        return f"{self.prefix}:claim:{key}"

    # --- legacy (2025-11-25) sessions: single-key commands, except the two-step session creation ----

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
