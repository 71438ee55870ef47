"""The Valkey store: one hash per task, a stream with a consumer group as the run queue, pub/sub for
cancellations. Every multi-step change is one Lua script, so it is atomic across instances.

Records are stored field by field (JSON for structured fields, never pickle). ``commit`` rewrites the
whole hash under a compare-and-set on ``version``; records are small and a full rewrite keeps the
script obvious.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

import msgspec
from valkey.asyncio import Valkey
from valkey.exceptions import ResponseError

from ..protocol.states import TaskStatus
from ..protocol.tasks import TaskRecord, task_event
from .base import (
    ActiveLimit,
    ExistingTask,
    Expired,
    IdempotencyClaim,
    Run,
    TooManyActiveTasks,
    TooManyStoredTasks,
)
from .keys import KeySchema
from .memory import TOMBSTONE_MS
from .plumbing import Channels, connect, unavailable_on_connection_errors

logger = logging.getLogger("ext_tasks.store")
T = TypeVar("T")

_CREATE: Final = """
if ARGV[5] ~= '' then
  local prior = redis.call('GET', KEYS[4])
  if prior then return prior end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local function admit(key, cap, refusal)
  if cap == '' then return nil end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[10])
  if redis.call('ZCARD', key) >= tonumber(cap) then return refusal end
  return nil
end
local refused = admit(KEYS[6], ARGV[12], -3) or admit(KEYS[5], ARGV[9], -2)
if refused then return refused end
for _, pair in ipairs({{KEYS[5], ARGV[9]}, {KEYS[6], ARGV[12]}}) do
  if pair[2] ~= '' then
    redis.call('ZADD', pair[1], ARGV[11], ARGV[4])
    if redis.call('PEXPIRETIME', pair[1]) < tonumber(ARGV[11]) then redis.call('PEXPIREAT', pair[1], ARGV[11]) end
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 13))
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[2], ARGV[3], 'PXAT', ARGV[2])
  redis.call('PEXPIREAT', KEYS[1], ARGV[1])
end
if ARGV[5] ~= '' then redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6]) end
redis.call('XADD', KEYS[3], '*', 'task', ARGV[4])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
"""

_COMMIT: Final = """
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return -1 end
if version ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 9))
if ARGV[8] == '1' then redis.call('ZREM', KEYS[3], ARGV[5]) end
if ARGV[2] ~= '' then redis.call('ZADD', KEYS[4], 'XX', ARGV[2], ARGV[5]) end
if ARGV[3] == '1' then redis.call('XADD', KEYS[2], '*', 'task', ARGV[5]) end
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
redis.call('PUBLISH', ARGV[6], ARGV[7])
if ARGV[2] ~= '' then redis.call('PEXPIREAT', KEYS[1], ARGV[2]) end
return 1
"""

_JSON_FIELDS: Final = (
    "arguments",
    "client_capabilities",
    "input_requests",
    "answers",
    "state",
    "result",
    "error",
    "asked_as",
)
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def record_fields(record: TaskRecord) -> list[str]:
    """The record as a flat field/value list for HSET (absent optional fields are left out)."""
    fields: dict[str, str] = {
        "task_id": record.task_id,
        "owner": record.owner,
        "tool": record.tool,
        "status": record.status.value,
        "version": str(record.version),
        "created_at_ms": str(record.created_at_ms),
        "updated_at_ms": str(record.updated_at_ms),
        "poll_interval_ms": str(record.poll_interval_ms),
        "attempts": str(record.attempts),
    }
    if record.ttl_ms is not None:
        fields["ttl_ms"] = str(record.ttl_ms)
    if record.status_message is not None:
        fields["status_message"] = record.status_message
    if record.poll_max_ms is not None:
        fields["poll_max_ms"] = str(record.poll_max_ms)
    if record.sensitive:
        fields["sensitive"] = "1"
    if record.delivered_at_ms is not None:
        fields["delivered_at_ms"] = str(record.delivered_at_ms)
    for name in _JSON_FIELDS:
        value = getattr(record, name)
        if value is not None:
            fields[name] = _encoder.encode(value).decode()
    return [item for pair in fields.items() for item in pair]


def record_from_fields(fields: Mapping[str, str]) -> TaskRecord:
    decoded: dict[str, Any] = {name: _decoder.decode(fields[name]) for name in _JSON_FIELDS if name in fields}
    return TaskRecord(
        task_id=fields["task_id"],
        owner=fields["owner"],
        tool=fields["tool"],
        status=TaskStatus(fields["status"]),
        version=int(fields["version"]),
        created_at_ms=int(fields["created_at_ms"]),
        updated_at_ms=int(fields["updated_at_ms"]),
        ttl_ms=int(fields["ttl_ms"]) if "ttl_ms" in fields else None,
        poll_interval_ms=int(fields["poll_interval_ms"]),
        attempts=int(fields.get("attempts", "0")),
        status_message=fields.get("status_message"),
        poll_max_ms=int(fields["poll_max_ms"]) if "poll_max_ms" in fields else None,
        sensitive=fields.get("sensitive") == "1",
        delivered_at_ms=int(fields["delivered_at_ms"]) if "delivered_at_ms" in fields else None,
        arguments=decoded.get("arguments") or {},
        client_capabilities=decoded.get("client_capabilities") or {},
        input_requests=decoded.get("input_requests") or {},
        answers=decoded.get("answers") or {},
        asked_as=decoded.get("asked_as") or {},
        state=decoded.get("state"),
        result=decoded.get("result"),
        error=decoded.get("error"),
    )


class ValkeyTaskStore:
    def __init__(
        self, url: str, *, prefix: str = "ext-tasks", connect_timeout_s: float = 2.0, max_connections: int = 64
    ) -> None:
        self.keys = KeySchema(prefix)
        self._client: Valkey = connect(url, max_connections=max_connections, connect_timeout_s=connect_timeout_s)
        self._channels = Channels(self._client)
        self._create = self._client.register_script(_CREATE)
        self._commit = self._client.register_script(_COMMIT)

    async def open(self) -> None:
        with unavailable_on_connection_errors():
            try:
                await self._client.xgroup_create(self.keys.runs, self.keys.run_group, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _on_queue(self, command: Callable[[], Awaitable[T]]) -> T:
        """Run a consumer-group command; if the group is gone (Valkey came back empty: restarted without
        persistence, or flushed), create it again and retry once, so the workers carry on."""
        with unavailable_on_connection_errors():
            try:
                return await command()
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
            logger.warning("the run queue's consumer group was gone (Valkey came back empty?); creating it again")
            await self.open()
            return await command()

    async def close(self) -> None:
        await self._channels.close()
        await self._client.aclose()

    async def ping(self) -> None:
        with unavailable_on_connection_errors():
            await self._client.ping()

    async def create(
        self, record: TaskRecord, idempotency: IdempotencyClaim | None = None, limit: ActiveLimit | None = None
    ) -> ExistingTask | None:
        expires = record.expires_at_ms
        args = [
            "" if expires is None else str(expires),
            "" if expires is None else str(expires + TOMBSTONE_MS),
            record.owner,
            record.task_id,
            "" if idempotency is None else f"{record.task_id} {idempotency.fingerprint}",
            "" if idempotency is None else str(max(1, idempotency.window_ms)),
            self.keys.events_channel,
            _encoder.encode(task_event(record)).decode(),
            "" if limit is None or limit.cap <= 0 else str(limit.cap),
            "" if limit is None else str(limit.now_ms),
            str(expires if expires is not None else 2**62),
            "" if limit is None or limit.stored_cap <= 0 else str(limit.stored_cap),
            *record_fields(record),
        ]
        keys = [
            self.keys.task(record.task_id),
            self.keys.tombstone(record.task_id),
            self.keys.runs,
            self.keys.idempotency(idempotency.key if idempotency is not None else "-"),
            self.keys.active(record.owner),
            self.keys.stored(record.owner),
        ]
        with unavailable_on_connection_errors():
            created = await self._create(keys=keys, args=args)
        if created == -2:
            raise TooManyActiveTasks(record.owner)
        if created == -3:
            raise TooManyStoredTasks(record.owner)
        if isinstance(created, str):
            task_id, _, fingerprint = created.partition(" ")
            return ExistingTask(task_id, fingerprint)
        if created != 1:
            raise ValueError(f"task {record.task_id} exists")
        return None

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        with unavailable_on_connection_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for task_id in task_ids:
                    pipe.hget(self.keys.task(task_id), "owner")
                found = await pipe.execute()
        return {task_id: owner for task_id, owner in zip(task_ids, found, strict=True) if owner is not None}

    async def lookup(self, task_id: str) -> TaskRecord | Expired | None:
        with unavailable_on_connection_errors():
            fields = cast(dict[str, str], await self._client.hgetall(self.keys.task(task_id)))  # type: ignore[misc]
            if fields:
                return record_from_fields(fields)
            owner = await self._client.get(self.keys.tombstone(task_id))
        return None if owner is None else Expired(owner)

    async def commit(
        self, record: TaskRecord, *, expect_version: int, enqueue: bool = False, cancel: bool = False
    ) -> bool:
        expires = record.expires_at_ms
        args = [
            str(expect_version),
            "" if expires is None else str(expires),
            "1" if enqueue else "0",
            self.keys.cancel_channel if cancel else "",
            record.task_id,
            self.keys.events_channel,
            _encoder.encode(task_event(record)).decode(),
            "1" if record.terminal else "0",
            *record_fields(record),
        ]
        keys = [
            self.keys.task(record.task_id),
            self.keys.runs,
            self.keys.active(record.owner),
            self.keys.stored(record.owner),
        ]
        with unavailable_on_connection_errors():
            outcome = await self._commit(keys=keys, args=args)
        return bool(outcome == 1)

    async def claim(self, key: str, ttl_ms: int) -> bool:
        with unavailable_on_connection_errors():
            return bool(await self._client.set(self.keys.claim(key), "1", nx=True, px=max(1, ttl_ms)))

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        reply = await self._on_queue(
            lambda: self._client.xreadgroup(
                self.keys.run_group, consumer, {self.keys.runs: ">"}, count=count, block=block_ms
            )
        )
        return [
            Run(task_id=fields["task"], delivery=entry_id) for _, entries in reply or [] for entry_id, fields in entries
        ]

    async def heartbeat(self, consumer: str, runs: list[Run]) -> None:
        if not runs:
            return
        # Re-claiming one's own entries resets their idle time, which is what `reclaim` measures.
        await self._on_queue(
            lambda: self._client.xclaim(
                self.keys.runs, self.keys.run_group, consumer, 0, [run.delivery for run in runs], justid=True
            )
        )

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        reply = await self._on_queue(
            lambda: self._client.xautoclaim(
                self.keys.runs, self.keys.run_group, consumer, min_idle_ms, start_id="0-0", count=count
            )
        )
        entries = reply[1]
        return [Run(task_id=fields["task"], delivery=entry_id) for entry_id, fields in entries if fields]

    async def ack(self, run: Run) -> None:
        await self._on_queue(lambda: self._client.xack(self.keys.runs, self.keys.run_group, run.delivery))
        with unavailable_on_connection_errors():
            await self._client.xdel(self.keys.runs, run.delivery)

    async def queue_depth(self) -> int:
        with unavailable_on_connection_errors():
            return int(await self._client.xlen(self.keys.runs))

    async def requeue(self, run: Run) -> None:
        with unavailable_on_connection_errors():
            await self._client.xadd(self.keys.runs, {"task": run.task_id})
        await self.ack(run)

    async def cancellations(self) -> AsyncIterator[str]:
        async for data in self._channel(self.keys.cancel_channel):
            if data is not None:
                yield data

    async def task_events(self) -> AsyncIterator[dict[str, Any]]:
        async for data in self._channel(self.keys.events_channel):
            yield {} if data is None else _decoder.decode(data)

    async def _channel(self, channel: str) -> AsyncIterator[str | None]:
        """Messages of ``channel``; ``None`` once the subscription is live, and again after the shared
        pub/sub connection was re-established (messages may have been missed meanwhile)."""
        async with self._channels.subscribe(channel) as queue:
            while True:
                yield await queue.get()
