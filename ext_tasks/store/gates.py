"""Flow control's part of the store: gates and token buckets (:class:`~.base.FlowGates`), and the
in-memory ledger of both.

A **gate** bounds how many runs hold a place at once (``Gate.limit``): the runs of one tool, of one
tool for one key (one deploy per service), or of one principal. A run that finds the gate full waits
in the gate's **line**, in the order it first came; when a place is given back, the runs first in line
are named so that their scheduled runs can be woken. Nothing here is held by a process:

* a place is held until an instant (``hold``), renewed while its run runs (the worker's heartbeat), so
  a place held by a worker that died comes back with its lease;
* a wait in line lapses too (``wait``), unless the run tries again before, so a task that is gone
  (cancelled, expired) never blocks the line for good.

Entering, renewing and leaving one gate are each one atomic step (here: a method that never awaits; on
Valkey: one script in the gate's own slot, :mod:`.valkey.gates`), so concurrent runs on any instances
never hold more places than the limit. Which gates a run passes, and in what order, is decided above
(:mod:`ext_tasks.flow`).

A **token bucket** bounds a rate (a principal's task creations): ``burst`` tokens, refilled at
``rate_per_s``; taking one when none is there answers how long until one is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..clock import now_ms
from .base import ENTERED as ENTERED  # where callers found them first
from .base import FlowGates as FlowGates
from .base import Gate as Gate
from .ceilings import CEILING


@dataclass(slots=True)
class _GateState:
    #: Task -> until when it holds its place.
    holders: dict[str, int] = field(default_factory=dict)
    #: Task -> (its turn, until when it waits). A task keeps its turn and a new one comes last, so the
    #: dict's own order is the line's: nothing is sorted, however long the line (a flood's thousands).
    line: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: No hold nor wait lapses before this instant (a lower bound, kept by :meth:`hold` and :meth:`wait`):
    #: until then dropping the lapsed reads nothing, so a gate's every call does not scan its whole line.
    next_lapse_ms: float = math.inf

    def hold(self, task_id: str, until_ms: int) -> None:
        self.holders[task_id] = until_ms
        self.next_lapse_ms = min(self.next_lapse_ms, until_ms)

    def wait(self, task_id: str, turn: int, until_ms: int) -> None:
        self.line[task_id] = (turn, until_ms)
        self.next_lapse_ms = min(self.next_lapse_ms, until_ms)

    def drop_lapsed(self, now_ms: int) -> None:
        if now_ms < self.next_lapse_ms:
            return
        self.holders = {task: until for task, until in self.holders.items() if until > now_ms}
        self.line = {task: wait for task, wait in self.line.items() if wait[1] > now_ms}
        waits = (until for _, until in self.line.values())
        self.next_lapse_ms = min(itertools.chain(self.holders.values(), waits), default=math.inf)

    def first_in_line(self, count: int) -> list[str]:
        return list(itertools.islice(self.line, max(0, count)))

    def ahead_of(self, task_id: str) -> int:
        """How many wait ahead of ``task_id`` (all of them, for a task not in line)."""
        return list(self.line).index(task_id) if task_id in self.line else len(self.line)


class MemoryGates:
    """Gates and buckets of the embedded store (one process: every method is atomic)."""

    def __init__(self, clock_ms: Callable[[], int] = now_ms) -> None:
        self._clock_ms = clock_ms
        self._gates: dict[str, _GateState] = {}
        self._turns = 0
        #: Bucket -> (tokens, when they were counted).
        self._buckets: dict[str, tuple[float, int]] = {}

    async def enter(self, gate: Gate, task_id: str, *, now_ms: int, hold_ms: int, wait_ms: int) -> int:
        if gate.name not in self._gates and len(self._gates) >= CEILING:
            self._forget_lapsed_gates(now_ms)
        state = self._gates.setdefault(gate.name, _GateState())
        state.drop_lapsed(now_ms)
        if task_id in state.holders:
            state.hold(task_id, now_ms + hold_ms)
            return ENTERED
        free = gate.limit - len(state.holders)
        ahead = state.ahead_of(task_id)
        if ahead < free:
            state.line.pop(task_id, None)
            state.hold(task_id, now_ms + hold_ms)
            return ENTERED
        turn = state.line[task_id][0] if task_id in state.line else self._next_turn()
        state.wait(task_id, turn, now_ms + wait_ms)
        return ahead

    def _forget_lapsed_gates(self, now_ms: int) -> None:
        """Gates whose every place and wait lapsed, nobody left (a key's, a worker that died): past the
        ceiling, forgotten as a key of Valkey would lapse, so per-key gates never grow without bound."""
        for name, state in list(self._gates.items()):
            state.drop_lapsed(now_ms)
            if not state.holders and not state.line:
                del self._gates[name]

    def _next_turn(self) -> int:
        self._turns += 1
        return self._turns

    async def renew(self, gate: Gate, task_id: str, *, until_ms: int) -> bool:
        state = self._gates.get(gate.name)
        if state is None or state.holders.get(task_id, 0) <= self._clock_ms():
            return False
        state.hold(task_id, until_ms)
        return True

    async def leave(self, gate: Gate, task_id: str, *, now_ms: int) -> list[str]:
        state = self._gates.get(gate.name)
        if state is None:
            return []
        state.holders.pop(task_id, None)
        state.line.pop(task_id, None)
        state.drop_lapsed(now_ms)
        if not state.holders and not state.line:
            del self._gates[gate.name]
            return []
        return state.first_in_line(gate.limit - len(state.holders))

    async def take_token(self, bucket: str, *, rate_per_s: float, burst: int, now_ms: int) -> int:
        tokens, counted_at = self._buckets.get(bucket, (float(burst), now_ms))
        tokens = min(float(burst), tokens + max(0, now_ms - counted_at) * rate_per_s / 1000)
        if tokens >= 1:
            self._buckets[bucket] = (tokens - 1, now_ms)
            self._forget_full_buckets(rate_per_s, burst, now_ms)
            return 0
        self._buckets[bucket] = (tokens, now_ms)
        return math.ceil((1 - tokens) * 1000 / rate_per_s)

    def _forget_full_buckets(self, rate_per_s: float, burst: int, now_ms: int) -> None:
        """A bucket full again is no different from one never used: forget those, past the ceiling."""
        if len(self._buckets) <= CEILING:
            return
        refill_ms = burst * 1000 / rate_per_s
        self._buckets = {name: kept for name, kept in self._buckets.items() if now_ms - kept[1] < refill_ms}
