"""Flow control's gates and token buckets on Valkey (the semantics: :mod:`..gates`, whose
:class:`~..gates.MemoryGates` is the reference).

A gate is three sorted sets in the gate's own slot (``{g<digest>}``), so entering, renewing and leaving
are each **one script** and the limit is exact under any concurrency, across instances and shards:

* ``holders``: task -> the instant its hold lapses;
* ``line``: task -> its turn (one more than the last turn in line, so the order is the order they came;
  an empty line starts again at 1, and no counter outlives the line);
* ``waits``: the same tasks -> the instant each wait lapses, so the lapsed waits are one range.

A token bucket is one hash (``tokens``, ``at``) in its own slot, one script per token.

Nothing here is unbounded: every key expires with the latest instant it holds (an expiry only ever
extended: ``PEXPIRE ... GT``, else ``NX`` for a key that had none), a sorted set left empty is gone at
once, and a bucket expires when it would be full again (a full bucket is one never used). Expiries are
set *relative* to the caller's ``now`` (never the server's ``TIME``), so a caller's clock ahead of or
behind Valkey's shifts a key's expiry, never empties it early.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ...clock import now_ms as wall_clock_ms
from ..base import Gate
from ..connection.refusals import unavailable_on_connection_errors
from ..connection.scripts import Script
from ..connection.topology import Topology
from .keys import KeySchema

#: ``expire_in(key, ms)``: the key lives at least ``ms`` more; ``drop_lapsed()``: the holds and waits
#: that lapsed by ``now`` are forgotten (a chunk at a time: Lua's ``unpack`` takes a few thousand values).
_COMMON: Final = """
local function expire_in(key, ms)
  ms = math.max(1, math.ceil(tonumber(ms)))
  if redis.call('PEXPIRE', key, ms, 'GT') == 0 then redis.call('PEXPIRE', key, ms, 'NX') end
end
local function drop_lapsed()
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', waits, '-inf', now)
  if #gone == 0 then return end  -- the common case: one read, nothing to drop
  for first = 1, #gone, 500 do
    redis.call('ZREM', line, unpack(gone, first, math.min(first + 499, #gone)))
  end
  redis.call('ZREMRANGEBYSCORE', waits, '-inf', now)
end
"""

ENTER: Final = Script(
    "enter a gate",
    keys=("holders", "line", "waits"),
    args=("task", "now", "limit", "hold_ms", "wait_ms"),
    body=_COMMON
    + """
local function hold(fresh)
  redis.call('ZADD', holders, tonumber(now) + tonumber(hold_ms), task)
  -- A key the ZADD made has no expiry yet: set it at once (else only ever extend it).
  if fresh then
    redis.call('PEXPIRE', holders, math.max(1, math.ceil(tonumber(hold_ms))))
  else
    expire_in(holders, hold_ms)
  end
  return -1
end
-- A place held and not lapsed (the worker entering again as it takes the run): renewed, nothing else read.
local held = redis.call('ZSCORE', holders, task)
if held and tonumber(held) > tonumber(now) then return hold(false) end
drop_lapsed()
local holding = redis.call('ZCARD', holders)
local free = tonumber(limit) - holding
local waiting = redis.call('ZCARD', line)
local rank = false
if waiting > 0 then rank = redis.call('ZRANK', line, task) end
local ahead = rank or waiting
if ahead < free then
  if rank then
    redis.call('ZREM', line, task)
    redis.call('ZREM', waits, task)
  end
  return hold(holding == 0)
end
if not rank then
  local last = redis.call('ZRANGE', line, -1, -1, 'WITHSCORES')
  redis.call('ZADD', line, last[2] and tonumber(last[2]) + 1 or 1, task)
end
redis.call('ZADD', waits, tonumber(now) + tonumber(wait_ms), task)
expire_in(line, wait_ms)
expire_in(waits, wait_ms)
return ahead
""",
)

RENEW: Final = Script(
    "renew a place in a gate",
    keys=("holders",),
    args=("task", "now", "until_ms"),
    body="""
local held = redis.call('ZSCORE', holders, task)
if not held then return 0 end
if tonumber(held) <= tonumber(now) then
  -- Lapsed: the place was free to be taken since; it is not the caller's any more.
  redis.call('ZREM', holders, task)
  return 0
end
redis.call('ZADD', holders, until_ms, task)
local ms = math.max(1, tonumber(until_ms) - tonumber(now))
if redis.call('PEXPIRE', holders, ms, 'GT') == 0 then redis.call('PEXPIRE', holders, ms, 'NX') end
return 1
""",
)

LEAVE: Final = Script(
    "leave a gate",
    keys=("holders", "line", "waits"),
    args=("task", "now", "limit"),
    body=_COMMON
    + """
-- A task holds a place or waits in line, never both (entering takes it out of the line).
if redis.call('ZREM', holders, task) == 0 then
  redis.call('ZREM', line, task)
  redis.call('ZREM', waits, task)
end
drop_lapsed()
local free = tonumber(limit) - redis.call('ZCARD', holders)
if free <= 0 then return {} end
return redis.call('ZRANGE', line, 0, free - 1)
""",
)

TAKE_TOKEN: Final = Script(
    "take a token",
    keys=("bucket",),
    args=("now", "rate_per_s", "burst"),
    body="""
local now_n, rate, full = tonumber(now), tonumber(rate_per_s), tonumber(burst)
local kept = redis.call('HMGET', bucket, 'tokens', 'at')
local tokens = tonumber(kept[1]) or full
local at = tonumber(kept[2]) or now_n
tokens = math.min(full, tokens + math.max(0, now_n - at) * rate / 1000)
local wait_ms = 0
if tokens >= 1 then tokens = tokens - 1 else wait_ms = math.ceil((1 - tokens) * 1000 / rate) end
redis.call('HSET', bucket, 'tokens', string.format('%.17g', tokens), 'at', now)
-- Full again by then, which is what a bucket never used is: it may go.
redis.call('PEXPIRE', bucket, math.max(1, math.ceil((full - tokens) * 1000 / rate)))
return wait_ms
""",
)


class ValkeyGates:
    """:class:`~..gates.FlowGates` on Valkey: one script per call, in the gate's (or bucket's) slot.

    ``clock_ms`` is only for :meth:`renew`, whose caller names no ``now``: a hold that lapsed by then
    is not renewed (the scripts never read the server's clock, so tests and callers share one)."""

    def __init__(self, topology: Topology, keys: KeySchema, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        client: Any = topology.client
        self.keys = keys
        self._clock_ms = clock_ms
        # Who holds a place is what bounds the runs: confirmed by replicas when the deployment asks
        # (a place lost in a promotion would let one run more through).
        self._enter = ENTER.bind(client, topology)
        self._renew = RENEW.bind(client, topology)
        self._leave = LEAVE.bind(client, topology)
        self._take_token = TAKE_TOKEN.bind(client, topology)

    def _keys_of(self, gate: Gate) -> dict[str, str]:
        return {
            "holders": self.keys.gate_holders(gate.name),
            "line": self.keys.gate_line(gate.name),
            "waits": self.keys.gate_waits(gate.name),
        }

    async def enter(self, gate: Gate, task_id: str, *, now_ms: int, hold_ms: int, wait_ms: int) -> int:
        with unavailable_on_connection_errors():
            return int(
                await self._enter(
                    keys=self._keys_of(gate),
                    args={
                        "task": task_id,
                        "now": now_ms,
                        "limit": gate.limit,
                        "hold_ms": hold_ms,
                        "wait_ms": wait_ms,
                    },
                )
            )

    async def renew(self, gate: Gate, task_id: str, *, until_ms: int) -> bool:
        with unavailable_on_connection_errors():
            renewed = await self._renew(
                keys={"holders": self.keys.gate_holders(gate.name)},
                args={"task": task_id, "now": self._clock_ms(), "until_ms": until_ms},
            )
        return bool(renewed)

    async def leave(self, gate: Gate, task_id: str, *, now_ms: int) -> list[str]:
        with unavailable_on_connection_errors():
            named = await self._leave(
                keys=self._keys_of(gate), args={"task": task_id, "now": now_ms, "limit": gate.limit}
            )
        return [str(task) for task in named]

    async def take_token(self, bucket: str, *, rate_per_s: float, burst: int, now_ms: int) -> int:
        with unavailable_on_connection_errors():
            return int(
                await self._take_token(
                    keys={"bucket": self.keys.bucket(bucket)},
                    args={"now": now_ms, "rate_per_s": repr(float(rate_per_s)), "burst": burst},
                )
            )
