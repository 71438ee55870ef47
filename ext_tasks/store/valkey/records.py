"""Task records on Valkey: one hash per task, created and changed by scripts that each touch one slot.

Creating a task is at most two atomic steps, each in one slot:

1. **Take a place** among the owner's (only when a cap is configured; :mod:`.places`): one
   script in the owner's slot forgets lapsed places when a cap is reached, checks the caps (unfinished
   tasks, kept tasks, bytes kept) and takes the place, charged the record's size, so the caps are
   **exact** under any concurrency, across instances and shards. A task that finishes settles its
   place (no longer active; charged its finished size) right after its outcome is committed; a
   process that dies between the two steps leaves the place counted as active until the task expires,
   so the cap errs toward refusing, never toward letting more through.
2. **Create** in the task's partition slot: the idempotency check, the hash, its tombstone and the
   first run. When the idempotency key already names a task, the place taken is given back.

A commit is a compare-and-set on ``version`` that writes only the changed fields, and in the same step
may queue a run (or schedule it for later, a retry: ``ZADD`` to the partition's due runs), acknowledge
the run that produced it, and publish the record as the commit left it
(its hash, as a JSON object of its fields) on the task's sharded channel: only if someone marked the
task watched, so an unwatched task's commit publishes nothing and costs no encoding.

**Lifetimes** (:mod:`ext_tasks.lifetimes`). An unfinished task's key is created without an expiry: it
never expires while it lives, and its life is bounded by whoever ends it, which every atomic step keeps
possible: a working task always has a run in its partition's stream (queued, or pending with a lease
that another worker reclaims), written in the same script as the record, and the worker that runs it
ends it ``failed`` past its life's bound; a task waiting for input is in its partition's ``deadlines``
set, written in the same script as its status, which the workers sweep. The commit that ends the task
gives the key its retention from the end (one ``PEXPIREAT``, the one command the retention costs: the
one creation no longer spends is what pays for it). The tombstone is written at creation for the life's
bound (plus :data:`~..base.TOMBSTONE_MS`) and moved only by a commit that makes the record live longer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Final, Unpack, cast

from ...protocol.states import TaskStatus
from ...protocol.tasks import TaskRecord
from ..base import TOMBSTONE_MS, ActiveLimit, ExistingTask, Expired, Followups, IdempotencyClaim, OverCap
from ..connection.refusals import unavailable_on_connection_errors
from ..connection.scripts import Script
from ..connection.topology import Topology
from ..ids import LEGACY_PARTITION, PARTITION_TAGS, partition_of
from ..places import place_changes, place_of
from .codec import changes, field_map, flat, record_from_fields
from .keys import KeySchema
from .places import ValkeyPlaces

CREATE: Final = Script(
    "create a task",
    keys=("record", "tombstone", "runs", "idempotency", "due"),
    args=(
        "task_id",
        "owner",
        "expires_at",
        "tombstone_until",
        "idempotency_value",
        "idempotency_window_ms",
        "confirming",
        "start_at",
    ),
    body="""
if idempotency_value ~= '' then
  local prior = redis.call('GET', idempotency)
  if prior then
    -- A resend's WAIT must cover the original creation, made on another connection: write once more.
    if confirming == '1' then redis.call('SET', idempotency, prior, 'KEEPTTL') end
    return prior
  end
end
redis.call('HSET', record, unpack(rest))
if expires_at ~= '' then redis.call('PEXPIREAT', record, expires_at) end
if tombstone_until ~= '' then redis.call('SET', tombstone, owner, 'PXAT', tombstone_until) end
if idempotency_value ~= '' then redis.call('SET', idempotency, idempotency_value, 'PX', idempotency_window_ms) end
if start_at ~= '' then
  redis.call('ZADD', due, start_at, task_id)
else
  redis.call('XADD', runs, '*', 'task', task_id)
end
return 1
""",
)

COMMIT: Final = Script(
    "commit a change",
    keys=("record", "runs", "channel", "due", "tombstone", "deadlines"),
    args=(
        "task_id",
        "expect_version",
        "dropped",
        "expires_at",
        "enqueue",
        "finishing",
        "group",
        "retry_at",
        "owner",
        "tombstone_until",
        "deadline_at",
        "unindex",
    ),
    body="""
local seen = redis.call('HMGET', record, 'version', 'watched')
if not seen[1] then return -1 end
if seen[1] ~= expect_version then return 0 end
redis.call('HSET', record, unpack(rest))
if dropped ~= '' then
  local names = {}
  for name in string.gmatch(dropped, '%S+') do names[#names + 1] = name end
  redis.call('HDEL', record, unpack(names))
end
if expires_at ~= '' then redis.call('PEXPIREAT', record, expires_at) end
if tombstone_until ~= '' then redis.call('SET', tombstone, owner, 'PXAT', tombstone_until) end
if deadline_at ~= '' then redis.call('ZADD', deadlines, deadline_at, task_id) end
if unindex == '1' then redis.call('ZREM', deadlines, task_id) end
if enqueue == '1' then redis.call('XADD', runs, '*', 'task', task_id) end
if retry_at ~= '' then redis.call('ZADD', due, retry_at, task_id) end
if finishing ~= '' then redis.call('XACK', runs, group, finishing) end
if seen[2] then
  local flat, fields = redis.call('HGETALL', record), {}
  for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
  redis.call('SPUBLISH', channel, cjson.encode(fields))
end
return 1
""",
)

MARK_WATCHED: Final = Script(
    "mark a task watched",
    keys=("record",),
    args=(),
    body="""
if redis.call('EXISTS', record) == 1 then redis.call('HSET', record, 'watched', '1') end
return 1
""",
)


def _unfinished(record: TaskRecord) -> bool:
    """An unfinished task with a lifetime grant: its key gets no expiry until it ends (see the module)."""
    return record.grant_ms is not None and not record.terminal


def _waiting(record: TaskRecord) -> int | None:
    """The deadline of ``record``'s wait for input (``None``: it is not waiting, or has no deadline)."""
    return record.deadline_ms if record.status is TaskStatus.INPUT_REQUIRED else None


class ValkeyRecords:
    def __init__(self, topology: Topology, keys: KeySchema, *, owner_places: bool = True) -> None:
        self._client: Any = topology.client
        self._confirming = topology.confirms
        self._spans_slots = topology.spans_slots
        self.keys = keys
        #: Whether caps keep owners' places (off when the deployment configures no cap: nothing to settle).
        self._places = owner_places
        self.places = ValkeyPlaces(self._client, keys)
        # Creations and transitions are what a client is told happened: the replicas confirm them when
        # the deployment asks for that (reserving and marking are recoverable either way).
        self._create = CREATE.bind(self._client, topology)
        self._commit = COMMIT.bind(self._client, topology)
        self._mark_watched = MARK_WATCHED.bind(self._client)

    async def create(
        self,
        record: TaskRecord,
        idempotency: IdempotencyClaim | None = None,
        limit: ActiveLimit | None = None,
        *,
        start_at_ms: int | None = None,
    ) -> ExistingTask | None:
        if idempotency is not None and partition_of(record.task_id) != idempotency.partition:
            raise ValueError("a task created under an idempotency key takes the key's partition")
        reserved = limit is not None and limit.counts
        if reserved:
            assert limit is not None
            try:
                await self.places.take(place_of(record), limit)
            except OverCap:
                prior = await self._prior(idempotency) if idempotency is not None else None
                if prior is not None:
                    return prior  # a resend at the cap still names its task
                raise
        try:
            created = await self._create_in_partition(record, idempotency, start_at_ms)
        except BaseException:
            if reserved:
                with contextlib.suppress(Exception):
                    await self.places.give_back(record.owner, record.task_id)
            raise
        if isinstance(created, str):
            if reserved:
                await self.places.give_back(record.owner, record.task_id)
            task_id, _, fingerprint = created.partition(" ")
            return ExistingTask(task_id, fingerprint)
        return None

    async def _prior(self, idempotency: IdempotencyClaim) -> ExistingTask | None:
        with unavailable_on_connection_errors():
            prior = await self._client.get(self.keys.idempotency(idempotency.key))
        if not prior:
            return None
        task_id, _, fingerprint = str(prior).partition(" ")
        return ExistingTask(task_id, fingerprint)

    async def _create_in_partition(
        self, record: TaskRecord, idempotency: IdempotencyClaim | None, start_at_ms: int | None
    ) -> Any:
        """The first run queued, or with ``start_at_ms`` scheduled then (in the partition's due runs)."""
        expires = record.expires_at_ms
        partition = partition_of(record.task_id)
        task_key = self.keys.task(record.task_id)
        tombstone = self.keys.tombstone(record.task_id)
        with unavailable_on_connection_errors():
            return await self._create(
                keys={
                    "record": task_key,
                    "tombstone": tombstone,
                    "runs": self.keys.runs(partition),
                    # Not touched without a claim; any key of the task's slot fills the place.
                    "idempotency": tombstone if idempotency is None else self.keys.idempotency(idempotency.key),
                    "due": self.keys.due(partition),
                },
                args={
                    "task_id": record.task_id,
                    "owner": record.owner,
                    "expires_at": "" if expires is None or _unfinished(record) else str(expires),
                    "tombstone_until": "" if expires is None else str(expires + TOMBSTONE_MS),
                    "idempotency_value": "" if idempotency is None else f"{record.task_id} {idempotency.fingerprint}",
                    "idempotency_window_ms": "" if idempotency is None else str(max(1, idempotency.window_ms)),
                    "confirming": "1" if self._confirming else "",
                    "start_at": "" if start_at_ms is None else str(start_at_ms),
                },
                rest=flat(field_map(record)),
            )

    async def lookup(self, task_id: str) -> TaskRecord | Expired | None:
        with unavailable_on_connection_errors():
            fields = cast(dict[str, str], await self._client.hgetall(self.keys.task(task_id)))
            if fields:
                return record_from_fields(fields)
            owner = await self._client.get(self.keys.tombstone(task_id))
        return None if owner is None else Expired(owner)

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        if not task_ids:
            return {}
        with unavailable_on_connection_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for task_id in task_ids:
                    pipe.hget(self.keys.task(task_id), "owner")
                found = await pipe.execute()
        return {task_id: owner for task_id, owner in zip(task_ids, found, strict=True) if owner is not None}

    async def commit(self, before: TaskRecord, after: TaskRecord, **then: Unpack[Followups]) -> bool:
        enqueue, finishing, retry_at_ms = then.get("enqueue", False), then.get("finishing"), then.get("retry_at_ms")
        changed, dropped = changes(before, after)
        expires = after.expires_at_ms
        task_id = after.task_id
        partition = partition_of(task_id)
        moved = expires is not None and expires != before.expires_at_ms
        # The tombstone outlives the longest the record ever lived: moved only when the record now lives
        # longer (a task that ends late and is kept long), so most commits leave it alone.
        later = expires is not None and before.expires_at_ms is not None and expires > before.expires_at_ms
        waits, waited = _waiting(after), _waiting(before)
        with unavailable_on_connection_errors():
            outcome = await self._commit(
                keys={
                    "record": self.keys.task(task_id),
                    "runs": self.keys.runs(partition),
                    "channel": self.keys.task_channel(task_id),
                    "due": self.keys.due(partition),
                    "tombstone": self.keys.tombstone(task_id),
                    "deadlines": self.keys.deadlines(partition),
                },
                args={
                    "task_id": task_id,
                    "expect_version": str(before.version),
                    "dropped": " ".join(dropped),
                    "expires_at": str(expires) if moved else "",
                    "enqueue": "1" if enqueue else "",
                    "finishing": "" if finishing is None else finishing.delivery,
                    "group": self.keys.run_group,
                    "retry_at": "" if retry_at_ms is None else str(retry_at_ms),
                    "owner": after.owner,
                    "tombstone_until": str(expires + TOMBSTONE_MS) if later and expires is not None else "",
                    "deadline_at": str(waits) if waits is not None and waits != waited else "",
                    "unindex": "1" if waited is not None and waits is None else "",
                },
                rest=flat(changed),
            )
            if outcome != 1:
                return False
        if self._places and place_changes(before, after):
            # A finished task gives its active place back (its place now lapses with the task), and is
            # charged what it keeps now (its result included).
            await self.places.settle(place_of(after))
        return True

    async def overdue(self, now_ms: int, count: int) -> list[TaskRecord]:
        """Each partition's waits past their deadline (one ``ZRANGEBYSCORE`` per partition, in one
        pipeline), then their records; an entry whose task is gone, or no longer waits, is dropped."""
        partitions = list(PARTITION_TAGS) + ([LEGACY_PARTITION] if self._spans_slots else [])
        with unavailable_on_connection_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for partition in partitions:
                    pipe.zrangebyscore(self.keys.deadlines(partition), "-inf", now_ms, start=0, num=count)
                due = [task_id for found in await pipe.execute() for task_id in found][:count]
            if not due:
                return []
            async with self._client.pipeline(transaction=False) as pipe:
                for task_id in due:
                    pipe.hgetall(self.keys.task(task_id))
                fields = await pipe.execute()
            records = [record_from_fields(found) if found else None for found in fields]
            for task_id, record in zip(due, records, strict=True):
                if record is None or _waiting(record) is None:
                    await self._client.zrem(self.keys.deadlines(partition_of(task_id)), task_id)
        return [record for record in records if record is not None and _waiting(record) is not None]

    async def mark_watched(self, task_id: str) -> None:
        """From now on every commit of the task is published on its channel."""
        with unavailable_on_connection_errors():
            await self._mark_watched(keys={"record": self.keys.task(task_id)}, args={})
