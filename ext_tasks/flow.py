"""Flow control: the gates a task's run passes before it starts, and a principal's creation rate.

A run passes, in this order, each gate that applies to it (:class:`~ext_tasks.store.base.Gate`, kept
in the store so that it holds over the fleet):

* its principal's: ``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL`` runs at once;
* its tool's: ``@registry.tool(concurrency=N)``, or with ``concurrency_key`` N runs per key (one
  deploy per service).

A task takes its places when it is created, so one that finds a gate full never enters the shared run
queue: it is created ``working``, saying what it waits for ("waiting for another deploy of billing"),
with its run scheduled in the store and its turn in the gate's line. That is what makes the queue
fair: a principal past its cap waits in a line of its own, and another principal's run queues behind
at most the runs the caps admit, never behind a flood. A worker enters the gates again when it takes
the run (a place held is renewed; one that lapsed is taken again if the gate has room); a run that must
wait is deferred the same way (:func:`~ext_tasks.protocol.tasks.run_deferred`), not held.

A run gives its places back when it ends (its outcome committed, input asked, or handed back), which
names the runs first in line: their scheduled runs are queued at once (:meth:`RunQueue.wake`), so they
start in order. A waiting run is also tried again on its own after a while (sooner the nearer it is to
the front), so a wake that was lost, a place whose worker died (it lapses with the worker's lease) or a
gate whose limit changed never leaves it waiting for good. A task waiting for input holds no place.

Nothing of this costs a command unless it is configured: a run with no gate enters none.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from .clock import now_ms
from .options import TaskOptions
from .protocol.errors import InvalidParams, LimitExceeded
from .protocol.tasks import TaskRecord
from .store.base import ENTERED, FlowGates, Gate, TaskStoreUnavailable
from .tools import Tool

logger = logging.getLogger("ext_tasks.flow")

#: How long a waiting run waits at most before it tries its gates again by itself (a wake is sooner).
MAX_RETRY_MS: Final = 60_000
#: The first in line tries again after this much, each one behind a little later.
_FIRST_RETRY_MS: Final = 1_000
_RETRY_PER_AHEAD_MS: Final = 100


class Waker(Protocol):
    """What flow control needs of the run queue: queueing the scheduled runs of tasks now."""

    async def wake(self, task_ids: Sequence[str]) -> int: ...


@dataclass(frozen=True, slots=True)
class Passage:
    """One gate a run passes, and what its task says while it waits there."""

    gate: Gate
    waiting_for: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """A run that must wait: its task's status message, and when it tries again by itself."""

    message: str
    retry_at_ms: int


class FlowControl:
    def __init__(
        self,
        gates: FlowGates,
        queue: Waker,
        options: TaskOptions,
        find_tool: Callable[[str], Tool | None],
        *,
        hold_ms: int,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.gates = gates
        self._queue = queue
        self.options = options
        self._find_tool = find_tool
        #: How long a place is held without a renewal: the worker's lease (a dead worker's places lapse
        #: with its runs).
        self.hold_ms = hold_ms
        self._clock_ms = clock_ms

    # --- the gates of a run -------------------------------------------------------------------------

    def passages(self, record: TaskRecord) -> list[Passage]:
        """The gates ``record``'s runs pass, in order (none: flow control costs nothing here)."""
        passages = []
        cap = self.options.max_running_per_principal
        if cap:
            noun = "task" if cap == 1 else "tasks"
            waiting_for = f"waiting: {cap} {noun} of this caller already running"
            passages.append(Passage(Gate(f"principal:{record.owner}", cap), waiting_for))
        tool = self._find_tool(record.tool)
        if tool is not None and tool.concurrency is not None:
            passages.append(tool_passage(tool, record.arguments))
        return passages

    async def enter(self, record: TaskRecord) -> Waiting | None:
        """Take a place in each of the run's gates (``None``), or in none of them: the run waits in the
        line of the first gate that is full (its places in the gates before it given back)."""
        now = self._clock_ms()
        entered: list[Gate] = []
        wait_ms = 3 * MAX_RETRY_MS + self.hold_ms  # a turn in line outlives a few missed tries
        passages = self.passages(record)
        for index, passage in enumerate(passages):
            ahead = await self.gates.enter(
                passage.gate, record.task_id, now_ms=now, hold_ms=self.hold_ms, wait_ms=wait_ms
            )
            if ahead == ENTERED:
                entered.append(passage.gate)
                continue
            # It holds nothing while it waits, and keeps no turn in a later gate's line (a turn it is
            # not ready to use would hold that line up).
            later = [later.gate for later in passages[index + 1 :]]
            await self._leave([*entered, *later], record.task_id)
            retry_ms = min(MAX_RETRY_MS, _FIRST_RETRY_MS + ahead * _RETRY_PER_AHEAD_MS)
            message = passage.waiting_for if not ahead else f"{passage.waiting_for} ({ahead} ahead)"
            return Waiting(message, now + retry_ms)
        return None

    async def leave(self, record: TaskRecord) -> None:
        """Give back the run's places (or its turns in line), and wake the runs that may now enter."""
        await self._leave([passage.gate for passage in self.passages(record)], record.task_id)

    async def _leave(self, gates: Iterable[Gate], task_id: str) -> None:
        now = self._clock_ms()
        woken: list[str] = []
        for gate in gates:
            woken += await self.gates.leave(gate, task_id, now_ms=now)
        if woken:
            await self._queue.wake(woken)

    async def renew(self, records: Iterable[TaskRecord]) -> None:
        """Keep the places of running runs (the worker's heartbeat); a place that lapsed meanwhile (a
        pause longer than the lease) is taken again where the gate has room, and logged where not."""
        until = self._clock_ms() + self.hold_ms
        for record in records:
            for passage in self.passages(record):
                if not await self.gates.renew(passage.gate, record.task_id, until_ms=until):
                    now = self._clock_ms()
                    ahead = await self.gates.enter(
                        passage.gate, record.task_id, now_ms=now, hold_ms=self.hold_ms, wait_ms=self.hold_ms
                    )
                    if ahead != ENTERED:  # it runs on regardless: it takes no turn in line that others wait behind
                        await self.gates.leave(passage.gate, record.task_id, now_ms=now)
                        logger.warning("the run of %s lost its place in %s", record.task_id, passage.gate.name)

    # --- the creation rate ------------------------------------------------------------------------

    async def take_creation(self, owner: str) -> None:
        """Count one task creation of ``owner`` against its rate; past it, 429 with ``Retry-After``."""
        rate = self.options.create_rate_per_principal
        if not rate:
            return
        burst = self.options.create_burst
        wait_ms = await self.gates.take_token(f"create:{owner}", rate_per_s=rate, burst=burst, now_ms=self._clock_ms())
        if wait_ms:
            raise LimitExceeded(
                f"Too many tasks created by this caller (the limit is {rate:g} a second, {burst} at once); "
                "try again later",
                limit="create_rate",
                retry_after_s=math.ceil(wait_ms / 1000),
            )


class RunPlaces:
    """A worker's runs in progress that hold places: renewed with its heartbeat, given back as each ends."""

    def __init__(self, flow: FlowControl) -> None:
        self.flow = flow
        self._held: dict[tuple[str, str], TaskRecord] = {}

    async def renew(self) -> None:
        if self._held:
            await self.flow.renew(list(self._held.values()))

    @contextlib.asynccontextmanager
    async def held(
        self, key: tuple[str, str], record: TaskRecord, *, taken_over: Callable[[], bool]
    ) -> AsyncIterator[None]:
        """The places of ``record``'s run (``key``: task and delivery) while the block runs them."""
        self._held[key] = record
        try:
            yield
        finally:
            del self._held[key]
            if not taken_over():  # a run taken over by another worker keeps its places for it
                with contextlib.suppress(TaskStoreUnavailable):  # else they lapse with the lease
                    await self.flow.leave(record)


def tool_passage(tool: Tool, arguments: dict[str, object]) -> Passage:
    """The gate of ``tool``'s runs with ``arguments``: the tool's, or its key's."""
    limit = tool.concurrency or 1
    if tool.concurrency_key is None:
        waiting_for = f"waiting for another {tool.name}" if limit == 1 else f"waiting: {limit} {tool.name} runs"
        return Passage(Gate(f"tool:{tool.name}", limit), waiting_for)
    try:
        key = str(tool.concurrency_key(arguments))
    except Exception as exc:  # the tool author's function, on the caller's arguments
        raise InvalidParams(f"The concurrency key of {tool.name} cannot be taken from these arguments: {exc}") from exc
    if limit == 1:
        waiting_for = f"waiting for another {tool.name} of {key}"
    else:
        waiting_for = f"waiting: {limit} {tool.name} runs of {key}"
    return Passage(Gate(f"tool:{tool.name}:key:{key}", limit), waiting_for)
