"""Waiting for a task to reach a condition by watching its commits (on any store), not by polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio

from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.store.base import Broadcast, Records


class Watchable(Records, Broadcast, Protocol):
    """What watching needs of a store: its records and their broadcast."""


async def until(
    store: Watchable, task_id: str, reached: Callable[[TaskRecord], bool], wait_s: float = 10.0
) -> TaskRecord:
    """The task's record once ``reached`` holds, within ``wait_s``."""
    with anyio.fail_after(wait_s):
        async with store.watch(task_id) as changes:
            while True:
                item = await changes.get()
                seen = item if item is not None else await store.lookup(task_id)
                if isinstance(seen, TaskRecord) and reached(seen):
                    return seen
