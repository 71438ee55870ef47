"""Unit tests run on asyncio only: the engine and the HTTP app are built on asyncio primitives.

The ``registry``, ``clock`` and ``engine`` fixtures are the engine suite's (``engine_support``): the
registry of small tools, a clock moved by hand, and an engine over both. A module that defines a
fixture of the same name uses its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ext_tasks import ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.protocol.resume import ResumeCodec
from tests.unit.engine_support import KEY, FakeClock, make_registry


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(registry: ToolRegistry, clock: FakeClock) -> Iterator[Engine]:
    codec = ResumeCodec([KEY], audience="engine-test", ttl_s=600, clock=clock)
    engine = Engine(registry, codec)
    yield engine
    engine.close()
