"""Owners' places on Valkey (see :mod:`.places` for what they count and when a task is charged).

Two keys per owner, both in the owner's own slot (``{o<digest>}``), so every step below is one script
and the caps are **exact** under any concurrency, across instances and shards:

* ``places``: a sorted set, one member per kept task, scored by its expiry, negated while the task is
  unfinished (so the active cap is one ``ZCOUNT``);
* ``bytes``: a hash, the bytes each member is charged, and their sum under :data:`TOTAL` (so the budget
  check is one ``HGET``).

Lapsed places are forgotten, and their bytes given back, only when a cap is reached (the count cap,
or the budget): a creation below every cap costs no scan. Both keys expire with the owner's
longest-lived place.

Commands per task, with a byte budget (inner commands of the scripts; round trips unchanged): taking a
place is one script of 8 (``ZCARD``, ``ZCOUNT``, ``HGET``, ``HSET``, ``HINCRBY``, ``ZADD`` and a
``PEXPIREAT`` per key; 10 when a key's expiry is not extended, a count-only take is 4 to 5); settling
one is one script of 4 (``ZADD XX``, ``HGET``, ``HSET``, ``HINCRBY``; 2 without a budget) where one
``ZADD XX`` was before; growing one before ``tasks/update`` merges answers is one more round trip, a script
of 1 to 4 (the task's record and its owner's places are in different slots, so the growth cannot ride
in the commit's script).
"""

from __future__ import annotations

from typing import Any, Final

from ..base import ActiveLimit, Place, TooManyActiveTasks, TooManyStoredBytes, TooManyStoredTasks
from ..connection.refusals import unavailable_on_connection_errors
from ..connection.scripts import Script
from ..places import NEVER_MS
from .keys import KeySchema

#: The field of an owner's ``bytes`` hash that holds the sum of the others (no task id looks like it).
TOTAL: Final = "#total"
_REFUSED_ACTIVE: Final = -2
_REFUSED_STORED: Final = -3
_REFUSED_BYTES: Final = -4

#: ``charged_total()``: the owner's bytes; ``lapse()``: forget the places that lapsed by now (scores
#: ``lapsed_min``..``lapsed_max``) and give their bytes back, a chunk at a time (Lua's ``unpack`` takes a
#: few thousand values at most).
_LAPSE: Final = (
    f"local total_field = '{TOTAL}'\n"
    + """
local function charged_total()
  return tonumber(redis.call('HGET', charges, total_field) or '0')
end
local function lapse()
  local gone = redis.call('ZRANGEBYSCORE', places, lapsed_min, lapsed_max)
  for first = 1, #gone, 500 do
    local chunk = {unpack(gone, first, math.min(first + 499, #gone))}
    local freed = 0
    for _, charged in ipairs(redis.call('HMGET', charges, unpack(chunk))) do
      if charged then freed = freed + tonumber(charged) end
    end
    redis.call('ZREM', places, unpack(chunk))
    redis.call('HDEL', charges, unpack(chunk))
    if freed > 0 then redis.call('HINCRBY', charges, total_field, -freed) end
  end
end
"""
)

TAKE: Final = Script(
    "take a place",
    keys=("places", "charges"),
    args=(
        "member",
        "score",
        "expires_at",
        "lapsed_min",
        "lapsed_max",
        "live_unfinished_max",
        "active_cap",
        "stored_cap",
        "max_bytes",
        "size",
    ),
    body=_LAPSE
    + """
local function expire_with(key)
  if redis.call('PEXPIREAT', key, expires_at, 'GT') == 0 then redis.call('PEXPIREAT', key, expires_at, 'NX') end
end
local swept = false
if stored_cap ~= '' and redis.call('ZCARD', places) >= tonumber(stored_cap) then
  lapse()
  swept = true
  if redis.call('ZCARD', places) >= tonumber(stored_cap) then return -3 end
end
if active_cap ~= '' and redis.call('ZCOUNT', places, '-inf', live_unfinished_max) >= tonumber(active_cap) then
  return -2
end
if max_bytes ~= '' then
  local size_n = tonumber(size)
  if charged_total() + size_n > tonumber(max_bytes) then
    if not swept then lapse() end
    if charged_total() + size_n > tonumber(max_bytes) then return -4 end
  end
  redis.call('HSET', charges, member, size)
  redis.call('HINCRBY', charges, total_field, size_n)
  expire_with(charges)
end
redis.call('ZADD', places, score, member)
expire_with(places)
return 1
""",
)

GROW: Final = Script(
    "grow a place",
    keys=("places", "charges"),
    args=("member", "size", "max_bytes", "lapsed_min", "lapsed_max"),
    body=_LAPSE
    + """
local charged = redis.call('HGET', charges, member)
if not charged then return 1 end
local growth = tonumber(size) - tonumber(charged)
if growth <= 0 then return 1 end
if charged_total() + growth > tonumber(max_bytes) then
  lapse()
  if charged_total() + growth > tonumber(max_bytes) then return -4 end
end
redis.call('HSET', charges, member, size)
redis.call('HINCRBY', charges, total_field, growth)
return 1
""",
)

SETTLE: Final = Script(
    "settle a place",
    keys=("places", "charges"),
    args=("member", "score", "size"),
    body=f"local total_field = '{TOTAL}'\n"
    + """
redis.call('ZADD', places, 'XX', score, member)
local charged = redis.call('HGET', charges, member)
if charged then
  redis.call('HSET', charges, member, size)
  redis.call('HINCRBY', charges, total_field, tonumber(size) - tonumber(charged))
end
return 1
""",
)

GIVE_BACK: Final = Script(
    "give a place back",
    keys=("places", "charges"),
    args=("member",),
    body=f"local total_field = '{TOTAL}'\n"
    + """
redis.call('ZREM', places, member)
local charged = redis.call('HGET', charges, member)
if charged then
  redis.call('HDEL', charges, member)
  redis.call('HINCRBY', charges, total_field, -tonumber(charged))
end
return 1
""",
)


class ValkeyPlaces:
    def __init__(self, client: Any, keys: KeySchema) -> None:
        self._client = client
        self.keys = keys
        # Places are the server's own bookkeeping, not what a client is told happened: never confirmed
        # by replicas (a promotion can lose a place, which then counts nothing until the owner's next).
        self._take = TAKE.bind(client)
        self._grow = GROW.bind(client)
        self._settle = SETTLE.bind(client)
        self._give_back = GIVE_BACK.bind(client)

    def _keys_of(self, owner: str) -> dict[str, str]:
        return {"places": self.keys.owner_places(owner), "charges": self.keys.owner_bytes(owner)}

    async def take(self, place: Place, limit: ActiveLimit) -> None:
        expires = NEVER_MS if place.expires_at_ms is None else place.expires_at_ms
        now = limit.now_ms
        with unavailable_on_connection_errors():
            outcome = await self._take(
                keys=self._keys_of(place.owner),
                args={
                    "member": place.member,
                    "score": str(expires if place.finished else -expires),
                    "expires_at": str(expires),
                    "lapsed_min": str(-now),
                    "lapsed_max": str(now),
                    "live_unfinished_max": f"({-now}",
                    "active_cap": str(limit.cap) if limit.cap > 0 and not place.finished else "",
                    "stored_cap": str(limit.stored_cap) if limit.stored_cap > 0 else "",
                    "max_bytes": str(limit.max_bytes) if limit.max_bytes > 0 else "",
                    "size": str(place.size),
                },
            )
        if outcome == _REFUSED_ACTIVE:
            raise TooManyActiveTasks(place.owner)
        if outcome == _REFUSED_STORED:
            raise TooManyStoredTasks(place.owner)
        if outcome == _REFUSED_BYTES:
            raise TooManyStoredBytes(place.owner)

    async def grow(self, place: Place, limit: ActiveLimit) -> None:
        if limit.max_bytes <= 0:
            return
        with unavailable_on_connection_errors():
            outcome = await self._grow(
                keys=self._keys_of(place.owner),
                args={
                    "member": place.member,
                    "size": str(place.size),
                    "max_bytes": str(limit.max_bytes),
                    "lapsed_min": str(-limit.now_ms),
                    "lapsed_max": str(limit.now_ms),
                },
            )
        if outcome == _REFUSED_BYTES:
            raise TooManyStoredBytes(place.owner)

    async def settle(self, place: Place) -> None:
        expires = NEVER_MS if place.expires_at_ms is None else place.expires_at_ms
        with unavailable_on_connection_errors():
            await self._settle(
                keys=self._keys_of(place.owner),
                args={"member": place.member, "score": str(expires), "size": str(place.size)},
            )

    async def give_back(self, owner: str, member: str) -> None:
        with unavailable_on_connection_errors():
            await self._give_back(keys=self._keys_of(owner), args={"member": member})

    async def charged(self, owner: str) -> int:
        with unavailable_on_connection_errors():
            total = await self._client.hget(self.keys.owner_bytes(owner), TOTAL)
        return int(total or 0)
