from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ext_tasks.store.base import TaskStore
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.support.valkey import ValkeyServer, running_valkey

_prefixes = itertools.count()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(Path(tmp_path_factory.mktemp("valkey"))) as server:
        yield server


@pytest.fixture(params=["memory", "valkey"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    """The same contract, run against both stores (each test gets a fresh key prefix on Valkey).

    Only the Valkey case asks for the server, so ``-k memory`` runs without starting one."""
    instance: TaskStore
    if request.param == "memory":
        instance = MemoryTaskStore()
    else:
        server: ValkeyServer = request.getfixturevalue("valkey_server")
        instance = ValkeyTaskStore(server.url, prefix=f"contract-{next(_prefixes)}")
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()
