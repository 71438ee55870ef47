from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from ext_tasks.store.base import TaskStore, TaskStoreUnavailable
from ext_tasks.store.connection.acks import ReplicaAcks
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.support.valkey import ValkeyServer, running_valkey
from tests.support.valkey_cluster import ValkeyCluster
from tests.support.valkey_sentinel import SentinelGroup, running_sentinel_group

_prefixes = itertools.count()
S = TypeVar("S", bound=TaskStore)
T = TypeVar("T")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(Path(tmp_path_factory.mktemp("valkey"))) as server:
        yield server


@pytest.fixture(scope="session")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    with running_sentinel_group(Path(tmp_path_factory.mktemp("sentinel"))) as group:
        yield group


def shared_url(request: pytest.FixtureRequest) -> str:
    """The URL of the session's one Valkey, its one cluster or its one Sentinel group (each started
    only when asked for, so ``-k memory`` starts none)."""
    if request.param.startswith("cluster"):
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        return cluster.url
    if request.param.startswith(("sentinel", "replica")):
        group: SentinelGroup = request.getfixturevalue("sentinel_group")
        # The group's URL, or its primary named directly: one Valkey with a replica (valkey://).
        return group.url if request.param.startswith("sentinel") else group.primary.url
    server: ValkeyServer = request.getfixturevalue("valkey_server")
    return server.url


async def once_available(operation: Callable[[], Awaitable[T]], timeout_s: float, pause_s: float = 0.2) -> T:
    """``operation()`` as soon as the store answers it (a node or primary coming back), within
    ``timeout_s``; until then it answers "unavailable", and any other outcome is the test's business."""
    with anyio.fail_after(timeout_s):
        while True:
            try:
                return await operation()
            except TaskStoreUnavailable:
                await anyio.sleep(pause_s)


@contextlib.asynccontextmanager
async def opened(instance: S) -> AsyncIterator[S]:
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


def on_shared_server(request: pytest.FixtureRequest) -> ValkeyTaskStore:
    """A Valkey store with a fresh key prefix on the session's Valkey, cluster or Sentinel group; a
    ``-acked`` variant has every creation and transition confirmed by a replica."""
    acks = ReplicaAcks(replicas=1, timeout_ms=5000) if request.param.endswith("-acked") else None
    return ValkeyTaskStore(shared_url(request), prefix=f"contract-{next(_prefixes)}", acks=acks)


@pytest.fixture(params=["memory", "valkey", "cluster", "sentinel-acked", "replica-acked", "cluster-acked"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    """The same contract, run against every store: in memory, on one Valkey, on a Valkey Cluster, and
    with replica acknowledgement through Sentinel, on one primary with a replica and on the cluster
    (each test gets a fresh key prefix on a shared server)."""
    instance: TaskStore = MemoryTaskStore() if request.param == "memory" else on_shared_server(request)
    async with opened(instance):
        yield instance


@pytest.fixture(params=["valkey", "cluster", "sentinel-acked"])
async def shared_store(request: pytest.FixtureRequest) -> AsyncIterator[ValkeyTaskStore]:
    """What only a store shared by processes has to show (runs outliving their worker)."""
    async with opened(on_shared_server(request)) as instance:
        yield instance
