"""Every Valkey key and channel of the task store, in one place (no other module formats one).

Each key is built around a ``{hash tag}`` so that every atomic step stays in one slot (see
:mod:`..ids` for the partitions and why). The legacy shim's keys are its own
(``migration.session_keys``), under the same prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...options import VALKEY_PREFIX
from ..ids import LEGACY_PARTITION, digest, partition_of, partition_of_key


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

    def deadlines(self, partition: str) -> str:
        """The partition's waits for input, scored by the deadline that ends them (a sorted set)."""
        if partition == LEGACY_PARTITION:
            return f"{self.prefix}:deadlines"
        return f"{self.prefix}:{{{partition}}}:deadlines"
    def due(self, partition: str) -> str:
        """The partition's scheduled runs (retries with backoff): task ids scored by when they are due,
        in the slot of the partition's stream, so a commit schedules one and a promotion queues it in
        one step."""
        if partition == LEGACY_PARTITION:
            return f"{self.prefix}:due"
        return f"{self.prefix}:{{{partition}}}:due"

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

    # --- flow control (one gate's keys in the gate's own slot; a bucket is one key) ----------------------

    def gate_holders(self, gate: str) -> str:
        """The runs holding a place in the gate, scored by when their hold lapses (a sorted set)."""
        return f"{self.prefix}:{{g{digest(gate)}}}:gate:holders"

    def gate_line(self, gate: str) -> str:
        """The runs waiting for a place, scored by their turn (the order they came in)."""
        return f"{self.prefix}:{{g{digest(gate)}}}:gate:line"

    def gate_waits(self, gate: str) -> str:
        """The same runs as the line, scored by when their wait lapses (so lapsed waits are one range)."""
        return f"{self.prefix}:{{g{digest(gate)}}}:gate:waits"

    def bucket(self, bucket: str) -> str:
        """A token bucket: a hash of its ``tokens`` and the instant they were counted ``at``."""
        return f"{self.prefix}:{{b{digest(bucket)}}}:bucket"

    # --- everything else (single-key commands: any slot) ---------------------------------------------

    def claim(self, key: str) -> str:
        return f"{self.prefix}:claim:{key}"
