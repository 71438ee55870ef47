"""Soak: a mixed load (MRTR round trips, tasks polled to completion, tasks answered through
``tasks/update``, tasks cancelled) against two instances sharing one Valkey.

It passes when every operation ends the way the load asked (no other error response), and the
resident memory of each server process stays within the documented bound: at most
``RSS_GROWTH_LIMIT_MIB`` above what it was after warm-up, and under ``RSS_LIMIT_MIB`` overall.

CI runs it for 24 s (the default). On demand: ``EXT_TASKS_SOAK_SECONDS=600 bash scripts/soak.sh``.
The same load with hostile clients beside it: ``test_hostile_soak.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from tests.soak.support import CONCURRENCY, Load, rss_mib, rss_problems, running_pair, warmup_s
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("EXT_TASKS_SOAK_SECONDS", "24"))
WARMUP_S = warmup_s(SECONDS)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    with running_pair(tmp_path_factory.mktemp("soak")) as (_, servers):
        yield servers


def test_mixed_load_on_two_instances_keeps_memory_bounded_and_answers_as_asked(pair: list[ServerProcess]) -> None:
    load = Load(pair)
    asyncio.run(load.run(WARMUP_S))
    start = {server.process.pid: rss_mib(server.process.pid) for server in pair}
    asyncio.run(load.run(SECONDS - WARMUP_S))
    end = {server.process.pid: rss_mib(server.process.pid) for server in pair}
    report = {pid: f"{start[pid]:.1f} -> {end[pid]:.1f} MiB" for pid in start}
    summary = f"soak {SECONDS:.0f}s, {CONCURRENCY} clients: {dict(load.done)}"
    print(f"{summary}; RSS {report}; unexpected {len(load.unexpected)}")
    assert load.unexpected == []
    assert sum(load.done.values()) > 0
    assert rss_problems(start, end) == [], report
