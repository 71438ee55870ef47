"""A per-principal budget for the requests that cost the most CPU: one token bucket per principal and
process, in front of the costly requests only.

Most requests cost a process about the same small amount (a ``tasks/get``, a short call). A few cost
in proportion to what the client put in them: a ``subscriptions/listen`` checks every task id it names
against the store (about 32 µs of server CPU per id on Valkey, measured: 34 ms for 1,000 ids), and a
large body is read, decoded, validated and stored (about 8 µs per KiB). Without a budget, one principal
opening listens of 1,000 ids from 100 connections took another principal's ``tasks/get`` from a 3 ms to
a 1.37 s median, and emptied the Valkey connection pool under it (503s).

So each such request is charged **cost units** (:func:`body_cost`, :func:`listen_cost`): one unit per
task id or resource URI a listen names, and one per 4 KiB of body beyond the first 16 KiB (so ordinary
requests cost nothing and never touch a bucket). A principal's bucket holds up to ``burst`` units and
refills at ``rate`` units per second; a request the bucket cannot pay is refused with HTTP 429,
``Retry-After`` and -31429 (``data.limit`` = ``"pacing"``) before the costly part runs. A request
costing more than ``burst`` is charged ``burst``: it passes on a full bucket and empties it.

A refusal is cheap, but not free (~0.25 ms of a process's CPU): a client that ignores ``Retry-After``
and sends again at once from 100 connections turns refusals into a flood of their own (measured: the
other principal's median went from 6 to 177 ms). So the HTTP edge holds a refusal until the budget
would have paid for the request, at most :data:`MAX_HOLD_S`, before sending it (as nginx's
``limit_req`` delays excess requests), with its body already let go; ``Retry-After`` counts from the
moment it is sent. A connection then gets about one refusal a second. At most :data:`MAX_HELD`
refusals are held at once per process; past that they are sent at once.

The buckets are per process, like the CPU they protect. Their number is bounded: past
:data:`MAX_BUCKETS`, full buckets are forgotten first (a full bucket is what a new one would be), then
the least recently charged.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Final

from .metrics import PACING_REFUSALS
from .protocol.errors import LimitExceeded

#: Body bytes every request may carry without being charged.
FREE_BODY_BYTES: Final = 16 * 1024
#: Body bytes one unit pays for, beyond the free part.
BODY_BYTES_PER_UNIT: Final = 4 * 1024
#: Buckets kept at most (principals that spent recently).
MAX_BUCKETS: Final = 10_000
#: The longest a refusal is held before it is sent (the HTTP edge holds at most ``MAX_HELD`` at once).
MAX_HOLD_S: Final = 1.0
MAX_HELD: Final = 1024


def body_cost(size: int) -> int:
    """The units a request body of ``size`` bytes costs: 0 up to :data:`FREE_BODY_BYTES`."""
    if size <= FREE_BODY_BYTES:
        return 0
    return math.ceil((size - FREE_BODY_BYTES) / BODY_BYTES_PER_UNIT)


def listen_cost(task_ids: int, resources: int) -> int:
    """The units a ``subscriptions/listen`` naming that many task ids and resource URIs costs."""
    return task_ids + resources


class Pacing:
    """``rate`` units per second per principal, at most ``burst`` saved up; ``rate == 0``: no budget."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        #: Per principal: units left, and when they were counted. Insertion order is charge order.
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def charge(self, principal: str, cost: int, *, kind: str) -> None:
        """Take ``cost`` units from ``principal``'s bucket, or raise :class:`LimitExceeded` (nothing
        taken) saying when the bucket will hold them. ``kind`` (``body``, ``listen``) labels the metric."""
        if cost <= 0 or not self.enabled:
            return
        now = self._clock()
        cost = min(cost, self.burst)
        # A principal without a bucket has a full one (new, or forgotten when it had refilled).
        left, counted_at = self._buckets.pop(principal, (float(self.burst), now))
        units = min(float(self.burst), left + (now - counted_at) * self.rate)
        if units < cost:
            self._keep(principal, units, now)
            PACING_REFUSALS.labels(kind).inc()
            wait_s = (cost - units) / self.rate
            hold_s = min(wait_s, MAX_HOLD_S)
            raise LimitExceeded(
                f"Too many costly requests from this caller (the budget is {self.rate:g} units a second, "
                f"{self.burst} at most saved up; this one costs {cost}); retry after {math.ceil(wait_s)}s",
                limit="pacing",
                retry_after_s=math.ceil(wait_s - hold_s),
                hold_s=hold_s,
            )
        self._keep(principal, units - cost, now)

    def _keep(self, principal: str, units: float, now: float) -> None:
        if len(self._buckets) >= MAX_BUCKETS:
            self._forget(now)
        self._buckets[principal] = (units, now)

    def _forget(self, now: float) -> None:
        """Make room: drop every bucket that has refilled, else the tenth least recently charged (in one
        sweep, so a process at the bound does not scan every bucket on each new principal)."""
        full = [key for key, (units, at) in self._buckets.items() if units + (now - at) * self.rate >= self.burst]
        for key in full or list(itertools.islice(self._buckets, max(1, MAX_BUCKETS // 10))):
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
