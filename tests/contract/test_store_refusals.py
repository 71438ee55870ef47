"""Valkey refusing commands for now: at ``maxmemory`` under ``noeviction`` (OOM), busy running a script,
loading its data set, a replica without its primary (MASTERDOWN), too few replicas (NOREPLICAS).

Each is answered "store unavailable, retry later" (:class:`TaskStoreUnavailable`: HTTP 503 with
``Retry-After`` at the edge) and counted by reason in ``ext_tasks_store_write_refusals_total``, never
passed through as a raw Valkey error (HTTP 500): whether the refusal came from a plain command, a
command inside a Lua script, or a pipeline. A worker whose outcome meets a refusal keeps the run,
unacknowledged and heartbeated, until the outcome is stored; a run that fails unexpectedly is never
acknowledged either, and ends within the attempt limit.

Real valkey-server processes: one of this module's own (its settings are changed and restored), a
replica of nothing, one loading a slowed-down data set, and the session's cluster (each setting
changed is restored in a ``finally``). Metrics are read from the process's registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import valkey
from valkey.asyncio import Valkey as AsyncValkey

from ext_tasks import ToolRegistry
from ext_tasks.metrics import REGISTRY
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.store.base import TaskStoreUnavailable
from ext_tasks.store.connection.refusals import unavailable_on_connection_errors
from ext_tasks.store.ids import partition_of
from ext_tasks.store.valkey import ValkeyTaskStore
from ext_tasks.store.valkey.keys import KeySchema
from ext_tasks.worker import Worker
from migration.valkey_sessions import ValkeySessionStore
from tests.contract.test_store import make_record
from tests.support.processes import free_port, stop
from tests.support.valkey import ValkeyServer, running_valkey, start_valkey
from tests.support.valkey_cluster import ValkeyCluster

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
#: The worker tests' lease: far shorter than the outage they go through.
LEASE_S = 1.0
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def own_valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(Path(tmp_path_factory.mktemp("valkey-refusals"))) as server:
        yield server


def refusals(reason: str) -> float:
    return REGISTRY.get_sample_value("ext_tasks_store_write_refusals_total", {"reason": reason}) or 0.0


def prefix() -> str:
    return f"refusals-{next(_prefixes)}"


@contextlib.contextmanager
def configured(port: int, **settings: Any) -> Iterator[Any]:
    """``CONFIG SET`` each of ``settings`` on the Valkey at ``port`` for the block (an admin client of it
    is yielded); the old values come back afterwards, whatever happened."""
    admin: Any = valkey.Valkey(port=port, decode_responses=True)
    names = [name.replace("_", "-") for name in settings]
    before = {name: admin.config_get(name)[name] for name in names}
    try:
        for name, value in zip(names, settings.values(), strict=True):
            admin.config_set(name, value)
        yield admin
    finally:
        for name, value in before.items():
            admin.config_set(name, value)
        admin.close()


@contextlib.asynccontextmanager
async def opened_store(url: str) -> AsyncIterator[ValkeyTaskStore]:
    store = ValkeyTaskStore(url, prefix=prefix())
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def store_with_a_task(url: str) -> AsyncIterator[tuple[ValkeyTaskStore, TaskRecord]]:
    """An opened store (a key prefix of its own) holding one working task, created before any refusal."""
    async with opened_store(url) as store:
        kept = make_record()
        await store.create(kept)
        yield store, kept


async def test_a_valkey_at_maxmemory_refuses_every_kind_of_write_as_unavailable_and_still_answers_reads(
    own_valkey: ValkeyServer,
) -> None:
    async with store_with_a_task(own_valkey.url) as (store, kept):
        sessions = ValkeySessionStore(own_valkey.url, prefix=store.keys.prefix)
        raw: Any = AsyncValkey(port=own_valkey.port, decode_responses=True)
        counted = refusals("oom")
        try:
            with configured(own_valkey.port, maxmemory=1):
                with pytest.raises(TaskStoreUnavailable):  # a script whose first write is refused
                    await store.create(make_record())
                with pytest.raises(TaskStoreUnavailable):  # the outcome's compare-and-set (a script too)
                    await store.commit(kept, msgspec.structs.replace(kept, version=2, status_message="done"))
                with pytest.raises(TaskStoreUnavailable):  # XGROUP CREATE of a store opened now
                    await ValkeyTaskStore(own_valkey.url, prefix=prefix()).open()
                with pytest.raises(TaskStoreUnavailable):  # the legacy session store
                    await sessions.save_task({"taskId": "t-1"}, 60_000)
                with pytest.raises(TaskStoreUnavailable), unavailable_on_connection_errors():  # inside a pipeline
                    async with raw.pipeline(transaction=False) as pipe:
                        await pipe.get("a").set("b", "1").execute()
                assert await store.lookup(kept.task_id) == kept  # reads pass
            assert refusals("oom") - counted == 5
            # Memory back: the same objects write again.
            assert await store.commit(kept, msgspec.structs.replace(kept, version=2, status_message="done"))
            await sessions.save_task({"taskId": "t-1"}, 60_000)
        finally:
            await raw.aclose()
            await sessions.close()


async def test_too_few_replicas_is_a_refusal_not_an_error(own_valkey: ValkeyServer) -> None:
    async with opened_store(own_valkey.url) as store:
        counted = refusals("noreplicas")
        with configured(own_valkey.port, min_replicas_to_write=1), pytest.raises(TaskStoreUnavailable):
            await store.create(make_record())
        assert refusals("noreplicas") - counted == 1
        await store.create(make_record())


async def test_a_valkey_busy_running_a_script_answers_unavailable_until_the_script_ends(
    own_valkey: ValkeyServer,
) -> None:
    async with store_with_a_task(own_valkey.url) as (store, kept):
        counted = refusals("busy")
        blocker: Any = valkey.Valkey(port=own_valkey.port)
        loop_forever = threading.Thread(target=_run_until_killed, args=(blocker,), daemon=True)
        with configured(own_valkey.port, busy_reply_threshold=50) as admin:
            loop_forever.start()
            try:
                with anyio.fail_after(WAIT_S):
                    while True:
                        try:
                            await store.lookup(kept.task_id)
                        except TaskStoreUnavailable:
                            break
                        await anyio.sleep(0.02)
            finally:
                _kill_script(admin)
                loop_forever.join(WAIT_S)
                blocker.close()
        assert not loop_forever.is_alive()
        assert refusals("busy") - counted >= 1
        assert await store.lookup(kept.task_id) == kept


def _run_until_killed(client: Any) -> None:
    with contextlib.suppress(valkey.ResponseError):  # "Script killed by user with SCRIPT KILL"
        client.eval("local i = 0 while true do i = i + 1 end", 0)


def _kill_script(admin: Any) -> None:
    """SCRIPT KILL once the script runs (it answers NOTBUSY before), within a bound."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            admin.script_kill()
            return
        except valkey.ResponseError as exc:
            if "NOTBUSY" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


async def test_a_replica_without_its_primary_answers_unavailable(tmp_path: Path) -> None:
    # A replica of a port nobody listens on, told not to serve stale data: every command is MASTERDOWN.
    args = ("--replicaof", "127.0.0.1", str(free_port()), "--replica-serve-stale-data", "no")
    with running_valkey(tmp_path / "replica", extra_args=args) as replica:
        store = ValkeyTaskStore(replica.url, prefix=prefix())
        counted = refusals("masterdown")
        try:
            with pytest.raises(TaskStoreUnavailable):
                await store.lookup(make_record().task_id)
        finally:
            await store.close()
        assert refusals("masterdown") - counted == 1


async def test_a_valkey_loading_its_data_set_answers_unavailable_then_serves(tmp_path: Path) -> None:
    seeded = start_valkey(tmp_path / "loading")
    admin: Any
    with valkey.Valkey(port=seeded.port) as admin:
        with admin.pipeline(transaction=False) as pipe:
            for index in range(3000):
                pipe.set(f"filler-{index}", "x")
            pipe.execute()
        admin.save()
    stop(seeded.process)
    # 1 ms a key (about 3 s in all), and clients answered LOADING every kilobyte instead of waiting.
    slow = ("--dbfilename", "dump.rdb", "--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024")
    loading = start_valkey(seeded.directory, port=seeded.port, extra_args=slow)
    store = ValkeyTaskStore(loading.url, prefix=prefix())
    counted = refusals("loading")
    try:
        with pytest.raises(TaskStoreUnavailable):
            await store.lookup(make_record().task_id)
        assert refusals("loading") - counted == 1
        with anyio.fail_after(WAIT_S):
            while True:
                try:
                    assert await store.lookup(make_record().task_id) is None
                    break
                except TaskStoreUnavailable:
                    await anyio.sleep(0.1)
    finally:
        await store.close()
        stop(loading.process)


async def test_a_cluster_at_maxmemory_refuses_writes_as_unavailable(valkey_cluster: ValkeyCluster) -> None:
    async with opened_store(valkey_cluster.url) as store:
        counted = refusals("oom")
        with contextlib.ExitStack() as full:
            for primary in valkey_cluster.primaries:
                full.enter_context(configured(primary.port, maxmemory=1))
            with pytest.raises(TaskStoreUnavailable):
                await store.create(make_record())
            with pytest.raises(TaskStoreUnavailable):
                await ValkeyTaskStore(valkey_cluster.url, prefix=prefix()).open()
        assert refusals("oom") - counted >= 2
        await store.create(make_record())


# --- the worker --------------------------------------------------------------------------------------


async def until_ended(store: ValkeyTaskStore, task_id: str) -> TaskRecord:
    with anyio.fail_after(WAIT_S):
        while True:
            found = await store.lookup(task_id)
            if isinstance(found, TaskRecord) and found.terminal:
                return found
            await anyio.sleep(0.05)


def pending(server: ValkeyServer, keys: KeySchema, task_id: str) -> list[dict[str, Any]]:
    """The run queue's unacknowledged deliveries of ``task_id``'s partition."""
    with valkey.Valkey(port=server.port, decode_responses=True) as admin:
        found: list[dict[str, Any]] = admin.xpending_range(
            keys.runs(partition_of(task_id)), keys.run_group, "-", "+", 10
        )
        return found


async def test_an_outcome_the_store_refuses_is_kept_unacknowledged_until_memory_is_back(
    own_valkey: ValkeyServer,
) -> None:
    registry = ToolRegistry("refusals")
    started, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    @registry.tool(task="required")
    async def deploy(service: str, ref: str, n: int) -> str:
        calls.append(service)
        started.set()
        await release.wait()
        return f"{service} {ref}"

    async with opened_store(own_valkey.url) as store:
        record = make_record()
        await store.create(record)
        # A lease far shorter than the outage: the run must stay this worker's through heartbeats.
        worker = Worker(store, registry, WorkerOptions(lease_s=LEASE_S, block_ms=50))
        await worker.start()
        try:
            with anyio.fail_after(WAIT_S):
                await started.wait()
            with configured(own_valkey.port, maxmemory=1):
                counted = refusals("oom")
                release.set()
                refused_from = time.monotonic()

                def outlasted_two_leases() -> bool:  # refused, and tried again (with pauses) meanwhile
                    return refusals("oom") - counted >= 3 and time.monotonic() - refused_from > 2.5 * LEASE_S

                with anyio.fail_after(WAIT_S):
                    while not outlasted_two_leases():  # noqa: ASYNC110 - a counter and a clock, no event
                        await anyio.sleep(0.05)
                held = pending(own_valkey, store.keys, record.task_id)
                # Unacknowledged, still this worker's, delivered once: heartbeated, never reclaimed.
                assert [(entry["consumer"], entry["times_delivered"]) for entry in held] == [(worker.consumer, 1)]
                found = await store.lookup(record.task_id)
                assert isinstance(found, TaskRecord)
                assert found.status is TaskStatus.WORKING
            found = await until_ended(store, record.task_id)
        finally:
            await worker.stop(1.0)
        assert found.status is TaskStatus.COMPLETED
        assert found.attempts == 1
        assert calls == ["billing"]  # run once: the outage cost a pause, not an attempt
        assert pending(own_valkey, store.keys, record.task_id) == []


async def test_a_run_that_fails_unexpectedly_is_reclaimed_and_ends_within_the_attempt_limit(
    own_valkey: ValkeyServer,
) -> None:
    registry = ToolRegistry("refusals")
    calls: list[int] = []

    @registry.tool(task="required")
    async def deploy(service: str, ref: str, n: int) -> dict[str, Any]:
        calls.append(n)
        return {"handle": object()}  # cannot be encoded: the worker fails after the tool ran

    async with opened_store(own_valkey.url) as store:
        record = make_record()
        await store.create(record)
        options = WorkerOptions(lease_s=0.3, block_ms=50, max_attempts=3)
        worker = Worker(store, registry, options)
        await worker.start()
        try:
            found = await until_ended(store, record.task_id)
        finally:
            await worker.stop(1.0)
        assert found.status is TaskStatus.FAILED
        assert found.error is not None
        assert "giving up" in found.error["message"]
        assert len(calls) == options.max_attempts
        assert pending(own_valkey, store.keys, record.task_id) == []


async def until_refused(counted: float, times: int = 2) -> None:
    """Until ``times`` more OOM refusals were counted (a write tried, refused and tried again)."""
    with anyio.fail_after(WAIT_S):
        while refusals("oom") - counted < times:  # noqa: ASYNC110 - a counter, no event to wait on
            await anyio.sleep(0.05)


async def test_a_run_reclaimed_while_the_store_is_full_is_stored_once_memory_is_back(
    own_valkey: ValkeyServer,
) -> None:
    registry = ToolRegistry("refusals")

    @registry.tool(task="required")
    async def deploy(service: str, ref: str, n: int) -> str:
        return f"{service} {ref}"

    async with store_with_a_task(own_valkey.url) as (store, kept):
        [taken] = await store.next_runs("a-worker-that-died", 1, 50)
        assert taken.task_id == kept.task_id
        worker = Worker(store, registry, WorkerOptions(lease_s=0.5, block_ms=50))
        try:
            with configured(own_valkey.port, maxmemory=1):
                counted = refusals("oom")
                await worker.start()  # it reclaims the dead worker's run, runs it, and cannot store the outcome
                await until_refused(counted)
                held = pending(own_valkey, store.keys, kept.task_id)
                assert [entry["consumer"] for entry in held] == [worker.consumer]
                assert await store.lookup(kept.task_id) == kept
            found = await until_ended(store, kept.task_id)
        finally:
            await worker.stop(1.0)
        assert found.status is TaskStatus.COMPLETED
        assert found.attempts == 2  # the dead worker's delivery, and this one
        assert pending(own_valkey, store.keys, kept.task_id) == []


async def test_the_attempt_limits_failure_is_stored_once_memory_is_back(own_valkey: ValkeyServer) -> None:
    options = WorkerOptions(max_attempts=3)
    async with store_with_a_task(own_valkey.url) as (store, kept):
        worker = Worker(store, ToolRegistry("refusals"), options)
        with configured(own_valkey.port, maxmemory=1):
            counted = refusals("oom")
            # A run delivered once more than the limit: the task ends failed, a write the store refuses.
            ending = asyncio.ensure_future(worker.execute(kept.task_id, attempt=options.max_attempts + 1))
            await until_refused(counted)
            assert not ending.done()
        with anyio.fail_after(WAIT_S):
            stored = await ending
    assert stored is not None
    assert stored.status is TaskStatus.FAILED
    assert await store.lookup(kept.task_id) == stored
