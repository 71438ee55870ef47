"""Replica acknowledgement and Sentinel, at the store: what a write that the replicas could not confirm
leaves behind, and a store that follows a promotion by itself.

(The whole store contract also runs through Sentinel and on the cluster with acknowledgement on: the
``-acked`` stores of ``conftest.py``.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest
import valkey

from ext_tasks.metrics import STORE_ACK_TIMEOUTS, STORE_FAILOVERS
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.store.base import ExistingTask, IdempotencyClaim, TaskStoreUnavailable
from ext_tasks.store.connection.acks import ReplicaAcks, ReplicasBehind
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.contract.conftest import once_available, opened
from tests.contract.test_store import make_record, under
from tests.support.valkey import ValkeyServer
from tests.support.valkey_sentinel import SentinelGroup, running_sentinel_group

pytestmark = pytest.mark.anyio

PROMOTION_S = 30.0


@pytest.fixture
def own_sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    """A group of its own: the test kills its primary."""
    with running_sentinel_group(tmp_path) as group:
        yield group


def _records(server: ValkeyServer, prefix: str) -> list[str]:
    with valkey.Valkey(port=server.port, decode_responses=True) as client:
        return [key for key in client.scan_iter(f"{prefix}:*") if ":task:" in key]


async def test_without_enough_replicas_a_write_is_refused_as_retry_later_and_a_resend_creates_nothing_more(
    valkey_server: ValkeyServer,
) -> None:
    """One Valkey has no replica: asked for one, every creation and transition times out. The write is
    on the primary all the same (WAIT cannot undo it), so a resend under the same idempotency key names
    the same task and creates nothing; it is refused again until a replica confirms it."""
    acks = ReplicaAcks(replicas=1, timeout_ms=50)
    prefix = f"acks-{time.monotonic_ns()}"
    before = STORE_ACK_TIMEOUTS._value.get()
    async with opened(ValkeyTaskStore(valkey_server.url, prefix=prefix, acks=acks)) as store:
        claim = IdempotencyClaim(key="resent", fingerprint="f", window_ms=60_000)
        record = under(claim)
        started = time.monotonic()
        with pytest.raises(ReplicasBehind) as refused:
            await store.create(record, claim)
        assert time.monotonic() - started < 2.0  # bounded by the timeout, not hanging
        assert isinstance(refused.value, TaskStoreUnavailable)  # answered 503 "retry later" at the edge
        with pytest.raises(ReplicasBehind):
            await store.create(under(claim), claim)  # the resend: a new id, the same key
        assert _records(valkey_server, prefix) == [store.keys.task(record.task_id)]
        assert await store.lookup(record.task_id) == record

        done = msgspec.structs.replace(record, status=TaskStatus.COMPLETED, version=2)
        with pytest.raises(ReplicasBehind):
            await store.commit(record, done)
        assert STORE_ACK_TIMEOUTS._value.get() - before == 3

    async with opened(ValkeyTaskStore(valkey_server.url, prefix=prefix)) as plain:
        assert await plain.create(under(claim), claim) == ExistingTask(record.task_id, "f")


async def test_a_store_behind_sentinel_follows_a_promotion_by_itself(own_sentinel_group: SentinelGroup) -> None:
    group = own_sentinel_group
    failovers = STORE_FAILOVERS._value.get()
    store = ValkeyTaskStore(group.url, prefix="follow", acks=ReplicaAcks(replicas=1, timeout_ms=2000))
    async with opened(store):
        record = make_record()
        await store.create(record)  # confirmed by the replica: it survives the primary
        old = await store.topology.endpoint_for("any")
        assert old.port == group.primary.port
        group.kill_primary()

        with anyio.fail_after(5.0), pytest.raises(TaskStoreUnavailable):
            await store.lookup(record.task_id)  # until the promotion: "retry later", never a wrong answer

        found = await once_available(lambda: store.lookup(record.task_id), PROMOTION_S, pause_s=0.1)
        assert found == record  # on the promoted replica, because the replica confirmed it
        new = await store.topology.endpoint_for("any")
        assert new.port == group.replica.port  # the replica the sentinels promoted
        assert STORE_FAILOVERS._value.get() > failovers

        # The new primary has no replica until the old one comes back (the sentinels make it one):
        # until then a creation is stored but not confirmed; afterwards it is confirmed again.
        await anyio.to_thread.run_sync(group.wait_for_promotion)
        await anyio.to_thread.run_sync(group.restart_killed)
        fresh = make_record()
        assert await once_available(lambda: store.create(fresh), PROMOTION_S) is None
        assert await store.lookup(fresh.task_id) == fresh
