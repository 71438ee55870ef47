from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from ext_tasks.store.base import TaskStore
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.support.valkey import ValkeyServer, running_valkey
from tests.support.valkey_cluster import ValkeyCluster

_prefixes = itertools.count()
S = TypeVar("S", bound=TaskStore)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(Path(tmp_path_factory.mktemp("valkey"))) as server:
        yield server


def shared_url(request: pytest.FixtureRequest) -> str:
    """The URL of the session's one Valkey or of its one cluster (asked for only when needed, so
    ``-k memory`` starts neither)."""
    if request.param == "cluster":
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        return cluster.url
    server: ValkeyServer = request.getfixturevalue("valkey_server")
    return server.url


@contextlib.asynccontextmanager
async def opened(instance: S) -> AsyncIterator[S]:
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


def on_shared_server(request: pytest.FixtureRequest) -> ValkeyTaskStore:
    """A Valkey store with a fresh key prefix on the session's Valkey or cluster."""
    return ValkeyTaskStore(shared_url(request), prefix=f"contract-{next(_prefixes)}")


@pytest.fixture(params=["memory", "valkey", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    """The same contract, run against every store: in memory, on one Valkey, on a Valkey Cluster (each
    test gets a fresh key prefix on a shared server)."""
    instance: TaskStore = MemoryTaskStore() if request.param == "memory" else on_shared_server(request)
    async with opened(instance):
        yield instance


@pytest.fixture(params=["valkey", "cluster"])
async def shared_store(request: pytest.FixtureRequest) -> AsyncIterator[ValkeyTaskStore]:
    """What only a store shared by processes has to show (runs outliving their worker)."""
    async with opened(on_shared_server(request)) as instance:
        yield instance
