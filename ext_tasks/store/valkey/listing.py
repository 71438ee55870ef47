"""The operator's listing on Valkey (see :mod:`..listing`): it reads only what the store keeps anyway,
so creating, running and finishing a task costs no command more for it.

* Rows: ``SCAN`` of every primary (each node of a cluster in turn: a key's node is where its slot
  lives, and ``SCAN`` reads one node) for the task keys, then ``HMGET`` of the row's fields of each,
  pipelined (one round trip per node).
* Leases: one read-only script per partition's run stream: ``XPENDING`` (holder, idle time, deliveries
  of each run taken and not acknowledged) and the task id of each entry.
* Removal: one script in the task's slot that deletes the record and its tombstone, only if the task
  is finished; then its owner's place is given back.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ...protocol.states import TERMINAL, TaskStatus
from ..connection.jsontext import decode_json
from ..connection.refusals import unavailable_on_connection_errors
from ..connection.scripts import Script
from ..connection.topology import Topology
from ..ids import LEGACY_PARTITION, PARTITION_TAGS
from ..listing import ROW_FIELDS, Lease, TaskRow
from .keys import KeySchema
from .places import ValkeyPlaces

#: Keys asked of one ``SCAN`` step, and the most pending runs read of one partition.
_SCAN_COUNT: Final = 1000
_MAX_LEASES: Final = 10_000
_FINISHED: Final = " ".join(sorted(status.value for status in TERMINAL))

LEASES: Final = Script(
    "read the runs held",
    keys=("runs",),
    args=("group", "count"),
    body="""
local held = {}
local ok, pending = pcall(redis.call, 'XPENDING', runs, group, '-', '+', tonumber(count))
if not ok then return held end
for _, entry in ipairs(pending) do
  local found = redis.call('XRANGE', runs, entry[1], entry[1])
  if found[1] then
    local fields, task, after = found[1][2], nil, '0'
    for i = 1, #fields, 2 do
      if fields[i] == 'task' then task = fields[i + 1] elseif fields[i] == 'after' then after = fields[i + 1] end
    end
    if task then
      held[#held + 1] = task
      held[#held + 1] = entry[2]
      held[#held + 1] = tostring(entry[3])
      held[#held + 1] = tostring(tonumber(after) + entry[4])
    end
  end
end
return held
""",
)

REMOVE: Final = Script(
    "remove a finished task",
    keys=("record", "tombstone"),
    args=("finished",),
    body="""
local status = redis.call('HGET', record, 'status')
if not status or not string.find(' ' .. finished .. ' ', ' ' .. status .. ' ', 1, true) then return 0 end
redis.call('DEL', record, tombstone)
return 1
""",
)


class ValkeyListing:
    def __init__(self, topology: Topology, keys: KeySchema, places: ValkeyPlaces | None) -> None:
        self._topology = topology
        self._client: Any = topology.client
        self._keys = keys
        self._places = places
        self._leases = LEASES.bind(self._client)
        self._remove = REMOVE.bind(self._client, topology)

    async def rows(self) -> list[TaskRow]:
        names = await self._task_keys()
        if not names:
            return []
        with unavailable_on_connection_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hmget(name, ROW_FIELDS)
                found = await pipe.execute()
        return [row for values in found if (row := _row(values)) is not None]

    async def _task_keys(self) -> list[str]:
        prefix = re.sub(r"([*?\[\]\\])", r"\\\1", self._keys.prefix)  # the prefix as it is, not a pattern
        # A partition's tag is two characters: nothing else of the store (an idempotency key, whatever its
        # text) has ":task:" right after one.
        patterns = [f"{prefix}:{{??}}:task:*"]
        nodes: list[Any] = [None]  # one Valkey: its one keyspace
        if self._topology.spans_slots:
            patterns.append(f"{prefix}:task:{{*}}")  # task ids of earlier versions (one Valkey only)
        else:
            with unavailable_on_connection_errors():
                await self._client.initialize()  # a no-op once the slot map is known
            nodes = list(self._client.get_primaries())
        found: set[str] = set()
        with unavailable_on_connection_errors():
            for node in nodes:
                for pattern in patterns:
                    found.update(await self._scan(node, pattern))
        return sorted(found)

    async def _scan(self, node: Any, pattern: str) -> list[str]:
        routing = {} if node is None else {"target_nodes": node}
        cursor: Any = 0
        keys: list[str] = []
        while True:
            cursor, batch = await self._client.execute_command(
                "SCAN", cursor, "MATCH", pattern, "COUNT", _SCAN_COUNT, **routing
            )
            if isinstance(cursor, dict):  # the cluster client answers a node's cursor by node name
                cursor = next(iter(cursor.values()))
            keys += batch
            if int(cursor) == 0:
                return keys

    async def leases(self) -> dict[str, Lease]:
        partitions = list(PARTITION_TAGS)
        if self._topology.spans_slots:
            partitions.append(LEGACY_PARTITION)
        held: dict[str, Lease] = {}
        args = {"group": self._keys.run_group, "count": str(_MAX_LEASES)}
        with unavailable_on_connection_errors():
            for partition in partitions:
                reply = await self._leases(keys={"runs": self._keys.runs(partition)}, args=args)
                for i in range(0, len(reply), 4):
                    lease = Lease(reply[i], reply[i + 1], int(reply[i + 2]), int(reply[i + 3]))
                    prior = held.get(lease.task_id)
                    if prior is None or lease.attempt > prior.attempt:
                        held[lease.task_id] = lease
        return held

    async def remove(self, task_id: str) -> bool:
        record_key = self._keys.task(task_id)
        with unavailable_on_connection_errors():
            owner = await self._client.hget(record_key, "owner")
            removed = await self._remove(
                keys={"record": record_key, "tombstone": self._keys.tombstone(task_id)}, args={"finished": _FINISHED}
            )
        if removed != 1:
            return False
        if self._places is not None and owner is not None:
            await self._places.give_back(owner, task_id)
        return True


def _row(values: list[str | None]) -> TaskRow | None:
    fields = dict(zip(ROW_FIELDS, values, strict=True))
    task_id, status = fields["task_id"], fields["status"]
    if task_id is None or status is None:
        return None  # expired (or removed) between the scan and the read
    created = int(fields["created_at_ms"] or 0)
    ttl = fields["ttl_ms"]
    error = fields["error"]
    return TaskRow(
        task_id=task_id,
        owner=fields["owner"] or "",
        tool=fields["tool"] or "",
        status=TaskStatus(status),
        created_at_ms=created,
        updated_at_ms=int(fields["updated_at_ms"] or created),
        expires_at_ms=None if ttl is None else created + int(ttl),
        attempts=int(fields["attempts"] or 0),
        status_message=fields["status_message"],
        error=None if error is None else decode_json(error),
        traceparent=fields[ROW_FIELDS[-1]],
        retry_at_ms=None if fields["retry_at_ms"] is None else int(fields["retry_at_ms"]),
    )
