"""A worker's runs on a cluster: each partition lives in its own slot, and one command cannot read
streams of several slots, so a worker keeps one blocking reader per partition, which reads only while
the worker has room for a run. Runs read beyond the room the worker asked for wait in
:meth:`PartitionReaders.buffered` (the queue heartbeats them with the worker's own, and gives them back
at close)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final, Protocol

from ..base import Run

logger = logging.getLogger("ext_tasks.store")

#: How long one reader's blocking read waits before it looks at the worker's room again.
READER_BLOCK_MS: Final = 1000


class PartitionSource(Protocol):
    """What the readers read from: the run queue."""

    @property
    def partitions(self) -> list[str]: ...

    async def read_partition(self, consumer: str, partition: str, block_ms: int) -> list[Run]: ...


class PartitionReaders:
    """One blocking reader per partition (a cluster), reading only while the worker has room."""

    def __init__(self, queue: PartitionSource, consumer: str) -> None:
        self.consumer = consumer
        self._queue = queue
        self._ready: asyncio.Queue[Run] = asyncio.Queue()
        self._wanted = 0
        self._demand = asyncio.Event()
        self._closing = False
        self._readers = [
            asyncio.create_task(self._read(partition), name=f"ext-tasks-runs-{partition}")
            for partition in queue.partitions
        ]

    def buffered(self) -> list[Run]:
        """Runs read but not yet handed to the worker (they are ours: keep them heartbeated)."""
        return list(self._ready._queue)  # type: ignore[attr-defined]

    async def take(self, count: int, block_ms: int) -> list[Run]:
        runs = self._drain(count)
        if not runs:
            self._wanted = count
            self._demand.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(block_ms / 1000):
                    runs.append(await self._ready.get())
            runs += self._drain(count - len(runs))
        self._wanted = 0
        self._demand.clear()
        return runs

    def _drain(self, count: int) -> list[Run]:
        runs: list[Run] = []
        while len(runs) < count and not self._ready.empty():
            runs.append(self._ready.get_nowait())
        return runs

    async def _read(self, partition: str) -> None:
        me = asyncio.current_task()
        assert me is not None
        while True:
            await self._demand.wait()
            if self._closed():
                return
            try:
                runs = await self._queue.read_partition(self.consumer, partition, READER_BLOCK_MS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the store is away: the worker's loop reports it
                logger.debug("reading partition %s failed (%s)", partition, type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            for run in runs:
                self._ready.put_nowait(run)
                self._wanted -= 1
            if self._closed():  # asked to stop while reading: what it read is kept in buffered()
                return
            if self._wanted <= 0:
                # (Never after close(): clearing its wake-up would leave this reader waiting for demand
                # until close() gives up on it, 2 s later, on every close of a cluster store.)
                self._demand.clear()
            if me.cancelling():
                # The cluster client can swallow a cancellation that lands while a blocking read times
                # out (it returns the empty reply instead); honour it here, or shutdown waits forever.
                raise asyncio.CancelledError

    def _closed(self) -> bool:
        return self._closing

    async def close(self) -> None:
        """Stop reading: a read in progress may still deliver (within its block time); it is kept in
        :meth:`buffered` for the caller to give back. Cancelling it instead would lose its reply, and
        the run would wait for a reclaim."""
        self._closing = True
        self._demand.set()  # wake the idle readers: they see the flag and return
        _, late = await asyncio.wait(self._readers, timeout=READER_BLOCK_MS / 1000 + 1.0)
        for reader in late:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
