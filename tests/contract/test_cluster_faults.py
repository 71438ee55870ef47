"""A Valkey Cluster node that goes away: requests for its slots answer "unavailable" (HTTP 503 at the
edge) within a bound instead of hanging, and the same store object serves again once the node is back,
with no restart of the process.

A cluster of its own (three primaries, no replicas: nobody takes over, so the outage is real).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from valkey.crc import key_slot

from ext_tasks.store.base import TaskStoreUnavailable
from ext_tasks.store.connection.pool import PoolSettings
from ext_tasks.store.ids import PARTITION_TAGS, new_task_id
from ext_tasks.store.valkey import ValkeyTaskStore
from ext_tasks.store.valkey.keys import KeySchema
from tests.contract.conftest import once_available
from tests.contract.test_store import make_record
from tests.support.processes import stop
from tests.support.valkey_cluster import ValkeyCluster, running_valkey_cluster

pytestmark = pytest.mark.anyio

#: How long one request may take to say "unavailable" while a node is down (the client retries with a
#: backoff first).
UNAVAILABLE_WITHIN_S = 10.0
RECOVERY_S = 30.0


@pytest.fixture
def small_cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    with running_valkey_cluster(tmp_path, primaries=3, replicas_each=0) as cluster:
        yield cluster


async def test_a_node_that_goes_away_answers_unavailable_and_service_resumes_when_it_returns(
    small_cluster: ValkeyCluster,
) -> None:
    keys = KeySchema("faults")
    # Few connections per node: commands sent while the node is down must give theirs back, or the node
    # would answer "too many connections" once it has returned.
    store = ValkeyTaskStore(small_cluster.url, prefix="faults", pool=PoolSettings(max_connections=4))
    await store.open()
    try:
        victim = small_cluster.primaries[1]
        # A partition whose slot the victim serves.
        tag = next(tag for tag in PARTITION_TAGS if small_cluster.owner_of(key_slot(keys.runs(tag).encode())) is victim)
        record = make_record(new_task_id(tag))
        await store.create(record)
        stop(victim.server.process)

        durations = []
        for _ in range(3):
            started = time.monotonic()
            with anyio.fail_after(UNAVAILABLE_WITHIN_S), pytest.raises(TaskStoreUnavailable):
                await store.lookup(record.task_id)
            durations.append(time.monotonic() - started)
        print(f"\nnode down: lookups answered unavailable in {[f'{d:.2f}s' for d in durations]}")

        small_cluster.restart(victim)
        fresh = make_record(new_task_id(tag))
        assert await once_available(lambda: store.create(fresh), RECOVERY_S) is None
        assert await store.lookup(fresh.task_id) == fresh
    finally:
        await store.close()
