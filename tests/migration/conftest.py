"""The migration tests run on asyncio (the shim and the engine are built on asyncio primitives); the
``legacy`` fixture is the in-process composition of ``shim_support``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.migration.shim_support import Legacy


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def legacy() -> AsyncIterator[Legacy]:
    composed = Legacy()
    try:
        yield composed
    finally:
        await composed.close()
