"""Unit tests run on asyncio only: the engine and the HTTP app are built on asyncio primitives."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
