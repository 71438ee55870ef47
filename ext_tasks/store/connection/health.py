"""Whether the Valkey store keeps what it is given and accepts writes now, read from ``INFO`` on every
primary (one Valkey, the primary Sentinel names, each primary of a cluster).

* **Eviction.** A Valkey whose ``maxmemory-policy`` is not ``noeviction`` deletes keys to make room
  once it reaches ``maxmemory``: finished tasks read "not found", idempotency keys vanish (a resend runs
  twice), the owners' places stop capping and runs leave their queue, all silently. The policy is read
  from ``INFO memory`` (``maxmemory_policy``), which works where operators renamed or denied ``CONFIG``.
  A store that may evict is refused at start (:func:`refusal_to_start`, unless the deployment allows it);
  one found later (an operator changed it) is logged as an error at every check and makes the process
  unready.
* **Refusing writes.** At ``maxmemory`` under ``noeviction`` Valkey refuses every write while ``PING``
  and reads still pass. A primary counts as full when ``used_memory - mem_not_counted_for_evict`` reaches
  ``maxmemory``: Valkey's own test before it refuses. A write refused for any reason in the last seconds
  (:mod:`.refusals`) counts too, which covers the refusals ``INFO`` does not show (busy, no replicas).
* **Cost.** The readiness probe reads ``INFO memory`` (about 1.5 kB) in place of a ``PING``: one round
  trip per primary, as the ping was. The check every :data:`CHECK_EVERY_S` also reads ``INFO stats``
  for the evictions counter. Where ``INFO`` itself is refused, the probe falls back to ``PING`` and the
  settings go unchecked, with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from valkey.exceptions import ResponseError

from ...metrics import STORE_ACCEPTS_WRITES, STORE_EVICTED_KEYS, STORE_EVICTING_PRIMARIES
from .errors import TaskStoreUnavailable
from .refusals import REFUSALS
from .topology import Topology

logger = logging.getLogger("ext_tasks.store")

#: How often the store's settings and evictions are checked in the background.
CHECK_EVERY_S: Final = 30.0
KEEPS_EVERYTHING: Final = "noeviction"


@dataclass(frozen=True, slots=True)
class PrimaryState:
    """What ``INFO`` says about one primary (``policy`` is ``None`` where it does not say)."""

    node: str
    policy: str | None
    used: int
    limit: int
    evicted: int

    @property
    def evicts(self) -> bool:
        return self.policy is not None and self.policy != KEEPS_EVERYTHING

    @property
    def full(self) -> bool:
        """Over ``maxmemory``, so refusing writes: under ``noeviction``, or with nothing left to evict (a
        primary that can evict makes room at its next command, so it is seldom seen over)."""
        return self.limit > 0 and self.used > self.limit

    def describe(self) -> str:
        return f"maxmemory-policy {self.policy} on {self.node}"


def _state(node: str, info: Mapping[str, Any]) -> PrimaryState:
    def number(name: str) -> int:
        try:
            return int(info.get(name) or 0)
        except (TypeError, ValueError):
            return 0

    policy = info.get("maxmemory_policy")
    return PrimaryState(
        node=node,
        policy=str(policy) if policy is not None else None,
        used=number("used_memory") - number("mem_not_counted_for_evict"),
        limit=number("maxmemory"),
        evicted=number("evicted_keys"),
    )


async def read_primaries(topology: Topology, *, stats: bool = False) -> list[PrimaryState]:
    """``INFO memory`` (and ``stats``) of every primary. Raises :class:`TaskStoreUnavailable` when one
    cannot be reached, and ``ResponseError`` when ``INFO`` is refused."""
    sections = ("memory", "stats") if stats else ("memory",)
    return [_state(node, info) for node, info in await topology.primaries(*sections)]


class StoreHealth:
    """The store's settings and whether it accepts writes, for readiness, the log and the metrics."""

    def __init__(self, topology: Topology, *, allow_eviction: bool = False, every_s: float = CHECK_EVERY_S) -> None:
        self._topology = topology
        self.allow_eviction = allow_eviction
        self._every_s = every_s
        #: As last read: primaries that may evict, and primaries at maxmemory.
        self.evicting: list[PrimaryState] = []
        self.full: list[PrimaryState] = []
        self._info_refused = False
        #: Whether the last read saw every primary's memory (INFO answered).
        self._memory_read = False
        self._loop: asyncio.Task[None] | None = None

    # --- reading ------------------------------------------------------------------------------------

    async def check(self) -> list[PrimaryState]:
        """The periodic check: settings, memory and evictions of every primary, logged and exported."""
        logged = bool(self.evicting)
        primaries = await self._read(stats=True)
        STORE_EVICTED_KEYS.set(sum(primary.evicted for primary in primaries))
        if logged and self.evicting:  # a new finding was logged by _read; an old one is logged again
            self._log_evicting()
        return primaries

    async def probe(self) -> None:
        """For readiness (in place of a ``PING``): raises :class:`TaskStoreUnavailable` while the store
        cannot be reached, refuses writes, or may evict keys without the deployment allowing it."""
        try:
            await self._read(stats=False)
        except TaskStoreUnavailable:
            raise
        except Exception as exc:  # anything else from the store is "not ready" too
            STORE_ACCEPTS_WRITES.set(0)
            raise TaskStoreUnavailable(f"task store check failed: {type(exc).__name__}") from exc
        problem = self.problem()
        if problem is not None:
            raise TaskStoreUnavailable(problem)

    def problem(self) -> str | None:
        """Why the store cannot do its job now, as last read (``None``: it can)."""
        if self.evicting and not self.allow_eviction:
            return f"task store may evict keys ({self.evicting[0].describe()})"
        if self.full:
            full = self.full[0]
            return f"task store at maxmemory on {full.node} ({full.used} of {full.limit} bytes): it refuses writes"
        reason = self._recent_refusal()
        if reason is not None:
            return f"task store refused a write moments ago ({reason})"
        return None

    def _recent_refusal(self) -> str | None:
        """A refusal seen in the last seconds, unless ``INFO`` has since shown it is over: an out of
        memory refusal is, once every primary is below ``maxmemory`` (so readiness comes back with the
        memory, not seconds later); the others (busy, no replicas, ...) do not show in ``INFO memory``."""
        reason = REFUSALS.recent()
        if reason == "oom" and self._memory_read and not self.full:
            return None
        return reason

    async def _read(self, *, stats: bool) -> list[PrimaryState]:
        try:
            primaries = await read_primaries(self._topology, stats=stats)
        except TaskStoreUnavailable:
            STORE_ACCEPTS_WRITES.set(0)
            raise
        except ResponseError as exc:  # INFO renamed or denied: the settings cannot be read here
            if not self._info_refused:
                self._info_refused = True
                logger.warning(
                    "the task store refuses INFO (%s): its maxmemory-policy and memory are not checked; make "
                    "sure it runs with maxmemory-policy noeviction",
                    str(exc)[:120],
                )
            await self._topology.ping()
            primaries = []
        self._memory_read = bool(primaries)
        self._note(primaries)
        return primaries

    def _note(self, primaries: list[PrimaryState]) -> None:
        evicting = [primary for primary in primaries if primary.evicts]
        full = [primary for primary in primaries if primary.full]
        newly_evicting = {primary.node for primary in evicting} - {primary.node for primary in self.evicting}
        for primary in full:
            if primary.node not in {before.node for before in self.full}:
                logger.warning(
                    "task store primary %s is at maxmemory (%d of %d bytes): it refuses writes; tasks wait for "
                    "room (raise maxmemory, or free memory)",
                    primary.node, primary.used, primary.limit,
                )  # fmt: skip
        if self.full and not full:
            logger.info("task store accepts writes again (below maxmemory)")
        self.evicting, self.full = evicting, full
        if newly_evicting:
            self._log_evicting()
        STORE_EVICTING_PRIMARIES.set(len(evicting))
        STORE_ACCEPTS_WRITES.set(0 if full or self._recent_refusal() else 1)

    def _log_evicting(self) -> None:
        found = ", ".join(primary.describe() for primary in self.evicting)
        if self.allow_eviction:
            logger.warning(
                "the task store may evict keys (%s): tasks, idempotency keys and queued runs can vanish; "
                "running anyway because EXT_TASKS_VALKEY_ALLOW_EVICTION is set",
                found,
            )
        else:
            logger.error(
                "the task store may evict keys (%s): tasks, idempotency keys and queued runs can vanish; "
                "not ready until it runs with maxmemory-policy noeviction",
                found,
            )

    # --- the periodic check --------------------------------------------------------------------------

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._check_forever(), name="ext-tasks-store-health")

    async def _check_forever(self) -> None:
        while True:
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - the store is away: readiness says so already
                logger.debug("task store check failed (%s)", type(exc).__name__)
            await asyncio.sleep(self._every_s)

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None


def refusal_to_start(primaries: list[PrimaryState]) -> str | None:
    """Why a deployment that does not allow eviction must not start on these primaries (``None``: it may)."""
    evicting = [primary for primary in primaries if primary.evicts]
    if not evicting:
        return None
    found = ", ".join(primary.describe() for primary in evicting)
    return (
        f"the task store may evict keys ({found}): set maxmemory-policy noeviction on every primary, "
        "or EXT_TASKS_VALKEY_ALLOW_EVICTION=true to run anyway"
    )
