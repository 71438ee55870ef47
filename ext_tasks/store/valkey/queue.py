"""The run queue on Valkey: one stream per partition, each with the consumer group ``workers``.

* **Taking runs.** On one Valkey a worker reads every partition in one blocking ``XREADGROUP`` (at
  most one entry per stream, so no partition starves). On a cluster each partition lives in its own
  slot, and one command cannot read streams of several slots: a worker keeps one blocking reader per
  partition, which reads only while the worker has room for a run. Runs read beyond the room the
  worker asked for wait here (heartbeated with the worker's own, given back at close) for its next
  call.
* **Attempts** are counted by the stream itself: a run's first delivery is attempt 1; a run reclaimed
  from a worker that stopped comes back with the delivery count the stream kept; a run given back at
  shutdown is queued again carrying the attempts it already had (``after``). No write is needed to
  count an attempt.
* **Scheduled runs** (retries with backoff) wait in each partition's sorted set of due runs, in the
  stream's slot (``ZADD`` in the commit that schedules one); ``promote_due`` moves those due into the
  stream, one script per partition, each run exactly once however many workers promote.
* **Reclaim** runs partition by partition: runs idle longer than the lease move to this worker. The
  same pass trims each stream of the entries every reader has acknowledged, so acknowledging a run
  costs one command (``XACK``, inside the outcome's commit) and no ``XDEL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from valkey.exceptions import ResponseError

from ..base import Run, TaskStoreUnavailable
from ..connection.refusals import unavailable_on_connection_errors
from ..connection.topology import Topology
from ..ids import LEGACY_PARTITION, PARTITION_TAGS, partition_of
from .keys import KeySchema
from .queue_scripts import HEARTBEAT, PROMOTE, RECLAIM, REQUEUE, WAKE
from .readers import READER_BLOCK_MS, PartitionReaders

logger = logging.getLogger("ext_tasks.store")
T = TypeVar("T")

#: The most due runs one promotion queues per partition (the rest wait for the next one).
_PROMOTE_COUNT: Final = 100
#: How often one worker trims the streams it reclaims from (trimming is housekeeping, not correctness).
_TRIM_EVERY_S: Final = 30.0


def _run(task_id: str, delivery: str, fields: dict[str, str]) -> Run:
    return Run(task_id=task_id, delivery=delivery, attempt=int(fields.get("after", "0")) + 1)


class ValkeyRunQueue:
    def __init__(self, topology: Topology, keys: KeySchema) -> None:
        self._topology = topology
        self._client: Any = topology.client
        self.keys = keys
        self._partitions: list[str] = list(PARTITION_TAGS)
        #: Runs taken for this process beyond what the worker asked for, in delivery order.
        self._surplus: list[Run] = []
        self._last_trim = 0.0
        self._reclaim_from = 0
        # Reclaiming and giving back move runs between workers: confirmed like taking them.
        self._reclaim = RECLAIM.bind(self._client, topology)
        self._requeue = REQUEUE.bind(self._client, topology)
        self._heartbeat = HEARTBEAT.bind(self._client)
        # Queueing a due run is what a commit's enqueue is: confirmed the same way.
        self._promote = PROMOTE.bind(self._client, topology)
        self._wake = WAKE.bind(self._client, topology)
        self._readers: PartitionReaders | None = None

    @property
    def partitions(self) -> list[str]:
        return self._partitions

    async def open(self) -> None:
        """Create each partition's consumer group (idempotently); on one Valkey, also read the single
        stream of earlier versions for as long as it holds runs."""
        with unavailable_on_connection_errors():
            for partition in PARTITION_TAGS:
                await self._create_group(partition)
            # The stream of earlier versions lives in no partition's slot: one command reads it with the
            # others only where a command may span slots (never on a cluster, which earlier versions
            # did not support).
            if self._topology.spans_slots and await self._client.exists(self.keys.runs(LEGACY_PARTITION)):
                await self._create_group(LEGACY_PARTITION)
                self._partitions = [*PARTITION_TAGS, LEGACY_PARTITION]

    async def _create_group(self, partition: str) -> None:
        try:
            await self._client.xgroup_create(self.keys.runs(partition), self.keys.run_group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _on_queue(self, command: Callable[[], Awaitable[T]]) -> T:
        """Run a consumer-group command; if a group is gone (Valkey came back empty: restarted without
        persistence, or flushed), create the groups again and retry once, so the workers carry on."""
        with unavailable_on_connection_errors():
            try:
                return await command()
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
            logger.warning("a run queue consumer group was gone (Valkey came back empty?); creating it again")
            await self.open()
            return await command()

    async def close(self) -> None:
        await self._stop_readers()
        surplus, self._surplus = self._surplus, []
        for run in surplus:  # taken, never started: give them back rather than wait for a reclaim
            with contextlib.suppress(Exception):
                await self._return_run(run, started=False)

    async def _stop_readers(self) -> None:
        if self._readers is not None:
            readers, self._readers = self._readers, None
            await readers.close()
            self._surplus += readers.buffered()

    # --- taking runs -------------------------------------------------------------------------------

    async def next_runs(self, consumer: str, count: int, block_ms: int) -> list[Run]:
        if count <= 0:
            return []
        if self._surplus:
            runs, self._surplus = self._surplus[:count], self._surplus[count:]
            return runs
        if not self._topology.spans_slots:  # one command cannot read every partition's stream
            if self._readers is None or self._readers.consumer != consumer:
                await self._stop_readers()
                for run in self._surplus:  # another consumer's: back to the queue, uncounted
                    await self._return_run(run, started=False)
                self._surplus = []
                self._readers = PartitionReaders(self, consumer)
            return await self._readers.take(count, block_ms)
        runs = await self._read_all(consumer, block_ms)
        self._surplus = runs[count:]
        return runs[:count]

    async def _read_all(self, consumer: str, block_ms: int) -> list[Run]:
        """One blocking read of every partition, at most one entry from each."""
        streams = [self.keys.runs(partition) for partition in self._partitions]
        return await self._take(streams, consumer, block_ms)

    async def _take(self, streams: list[str], consumer: str, block_ms: int) -> list[Run]:
        """``XREADGROUP`` of ``streams`` (one slot's, on a cluster). When writes must be confirmed, so
        is taking a run: a claim the replicas do not have could be lost in a promotion and the run
        handed to a second worker while the first still runs it; a claim they did not confirm in time
        fails as "unavailable", its runs left to be reclaimed, never started."""
        command: list[str | int] = ["XREADGROUP", "GROUP", self.keys.run_group, consumer, "COUNT", 1]
        command += ["BLOCK", block_ms, "STREAMS", *streams, *(">" for _ in streams)]

        async def read() -> Any:
            if self._topology.confirms:
                return await self._topology.confirmed(streams[0], *command)
            return await self._client.execute_command(*command, **self._topology.routing(streams[0]))

        reply = await self._on_queue(read)
        return [_run(fields["task"], entry_id, fields) for _, entries in reply or [] for entry_id, fields in entries]

    async def read_partition(self, consumer: str, partition: str, block_ms: int = READER_BLOCK_MS) -> list[Run]:
        """One blocking read of one partition (a cluster)."""
        return await self._take([self.keys.runs(partition)], consumer, block_ms)

    # --- keeping, returning and acknowledging runs -----------------------------------------------------

    async def heartbeat(self, consumer: str, runs: list[Run]) -> list[Run]:
        held = [*runs, *self._surplus, *(self._readers.buffered() if self._readers is not None else ())]
        if not held:
            return []
        by_stream = _by_stream(self.keys, held)
        args = {"group": self.keys.run_group, "consumer": consumer}

        async def keep() -> list[list[str]]:
            return list(
                await asyncio.gather(
                    *(
                        self._heartbeat(keys={"runs": stream}, args=args, rest=deliveries)
                        for stream, deliveries in by_stream.items()
                    )
                )
            )

        lost = {delivery for found in await self._on_queue(keep) for delivery in found}
        if not lost:
            return []
        self._surplus = [run for run in self._surplus if run.delivery not in lost]
        return [run for run in runs if run.delivery in lost]

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[Run]:
        """At most ``count`` idle runs, partition after partition (starting one further each time, so
        no partition waits behind the others). Never more than asked for: a claimed run counts as a
        delivery, and one claimed but not run would only be reclaimed again, an attempt lost."""
        trim = time.monotonic() - self._last_trim >= _TRIM_EVERY_S
        if trim:
            self._last_trim = time.monotonic()
        self._reclaim_from = (self._reclaim_from + 1) % len(self._partitions)
        order = self._partitions[self._reclaim_from :] + self._partitions[: self._reclaim_from]
        runs: list[Run] = []
        failed: TaskStoreUnavailable | None = None
        for partition in order:
            if len(runs) >= count and not trim:
                break
            try:
                runs += await self._reclaim_partition(partition, consumer, min_idle_ms, count - len(runs), trim)
            except TaskStoreUnavailable as exc:  # one shard away: the others' runs are still reclaimed
                failed = exc
        if failed is not None and not runs:
            raise failed
        return runs

    async def _reclaim_partition(
        self, partition: str, consumer: str, min_idle_ms: int, count: int, trim: bool
    ) -> list[Run]:
        args = {
            "group": self.keys.run_group,
            "consumer": consumer,
            "min_idle_ms": str(min_idle_ms),
            "count": str(count),
            "trim": "1" if trim else "",
        }
        stream = self.keys.runs(partition)
        reply: list[str] = await self._on_queue(lambda: self._reclaim(keys={"runs": stream}, args=args))
        return [
            Run(task_id=reply[i + 1], delivery=reply[i], attempt=int(reply[i + 2])) for i in range(0, len(reply), 3)
        ]

    async def ack(self, run: Run) -> None:
        stream = self.keys.runs(partition_of(run.task_id))
        await self._on_queue(lambda: self._client.xack(stream, self.keys.run_group, run.delivery))

    async def requeue(self, run: Run) -> None:
        await self._return_run(run, started=True)

    async def _return_run(self, run: Run, *, started: bool) -> None:
        """Queue ``run`` again and acknowledge this delivery; a run that never started keeps its count."""
        with unavailable_on_connection_errors():
            await self._requeue(
                keys={"runs": self.keys.runs(partition_of(run.task_id))},
                args={
                    "group": self.keys.run_group,
                    "delivery": run.delivery,
                    "task_id": run.task_id,
                    "after": str(run.attempt if started else run.attempt - 1),
                },
            )

    async def promote_due(self, now_ms: int, task_ids: Sequence[str] = ()) -> int:
        """One script per partition with something due (in its slot): the due runs removed and queued at
        once. Without ``task_ids`` (a sweep), which partitions have something due is asked first, in one
        pipelined round trip (per node): a sweep that finds nothing costs one ``ZCOUNT`` per partition."""
        partitions = sorted({partition_of(task_id) for task_id in task_ids}) if task_ids else await self._due(now_ms)
        args = {"now": str(now_ms), "count": str(_PROMOTE_COUNT)}

        async def promote(partition: str) -> int:
            keys = {"due": self.keys.due(partition), "runs": self.keys.runs(partition)}
            return int(await self._promote(keys=keys, args=args))

        with unavailable_on_connection_errors():
            return sum(await asyncio.gather(*(promote(partition) for partition in partitions)))

    async def wake(self, task_ids: Sequence[str]) -> int:
        """One script per partition of ``task_ids`` (in its slot): each named task's scheduled run,
        removed from the due runs and queued at once; a task with none (queued, running, woken by
        another caller) is left alone."""
        by_partition: dict[str, list[str]] = {}
        for task_id in dict.fromkeys(task_ids):
            by_partition.setdefault(partition_of(task_id), []).append(task_id)

        async def wake(partition: str, named: list[str]) -> int:
            keys = {"due": self.keys.due(partition), "runs": self.keys.runs(partition)}
            return int(await self._wake(keys=keys, args={}, rest=named))

        with unavailable_on_connection_errors():
            return sum(await asyncio.gather(*(wake(partition, named) for partition, named in by_partition.items())))

    async def _due(self, now_ms: int) -> list[str]:
        """The partitions with a scheduled run due by ``now_ms``."""
        with unavailable_on_connection_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for partition in self._partitions:
                    pipe.zcount(self.keys.due(partition), "-inf", now_ms)
                counts = await pipe.execute()
        return [partition for partition, count in zip(self._partitions, counts, strict=True) if int(count)]

    async def queue_depth(self) -> int:
        """Runs waiting for a worker or in flight, over every partition: one pipelined round trip (per
        node, on a cluster), on one connection, where sixteen commands at once would each take one."""
        with unavailable_on_connection_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for partition in self._partitions:
                    pipe.xinfo_groups(self.keys.runs(partition))
                replies = await pipe.execute()
        return sum(
            int(group.get("pending") or 0) + int(group.get("lag") or 0) for groups in replies for group in groups
        )


def _by_stream(keys: KeySchema, runs: Iterable[Run]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for run in runs:
        grouped.setdefault(keys.runs(partition_of(run.task_id)), []).append(run.delivery)
    return grouped
