"""The store's health as the process sees it (:mod:`ext_tasks.store.connection.health`), on real Valkeys.

- **Refusing writes.** While a primary is at ``maxmemory`` under ``noeviction`` a ``PING`` still
  passes; the readiness probe does not (one ``INFO memory`` per primary), and passes again once memory
  is back. A write refused moments ago (any reason) makes it fail for a few seconds too.
- **Eviction.** A ``maxmemory-policy`` other than ``noeviction`` fails the probe and is logged as an
  error, unless the deployment allows eviction (a warning then); the background check finds a policy
  changed after start within its period and logs it at every check; the start-up check refuses such a
  store (:func:`~ext_tasks.compose.check_store_settings`), lets an allowed or unreachable one pass.
- **Metrics.** Primaries that may evict, keys evicted (summed from ``INFO stats``), whether the store
  accepts writes.
- **INFO refused** (renamed by the operator): the probe falls back to ``PING`` with one warning, and
  the settings go unchecked rather than failing the start.
- **A cluster:** every primary is read; the one that may evict is named.

Settings changed on a shared server are restored in a ``finally`` (``configured``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import valkey

from ext_tasks.compose import check_store_settings
from ext_tasks.config import ConfigError, Settings
from ext_tasks.metrics import REGISTRY
from ext_tasks.store.base import TaskStoreUnavailable
from ext_tasks.store.connection.health import StoreHealth
from ext_tasks.store.connection.refusals import REFUSALS
from ext_tasks.store.connection.topology import connect
from ext_tasks.store.valkey import ValkeyTaskStore
from tests.contract.test_store import make_record
from tests.contract.test_store_refusals import configured
from tests.support.processes import free_port
from tests.support.valkey import ValkeyServer, running_valkey
from tests.support.valkey_cluster import ValkeyCluster
from tests.support.valkey_sentinel import SentinelGroup

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
CHECK_EVERY_S = 0.1


@pytest.fixture(scope="module")
def own_valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(Path(tmp_path_factory.mktemp("valkey-health"))) as server:
        yield server


@pytest.fixture(autouse=True)
def no_refusal_remembered() -> Iterator[None]:
    """Refusals are remembered process-wide: each test starts from none, with a short memory."""
    REFUSALS.last_s, kept = None, REFUSALS.remembered_s
    REFUSALS.remembered_s = 0.5
    yield
    REFUSALS.last_s, REFUSALS.remembered_s = None, kept


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


@contextlib.asynccontextmanager
async def health_of(url: str, **options: Any) -> AsyncIterator[StoreHealth]:
    topology = connect(url)
    health = StoreHealth(topology, **options)
    try:
        yield health
    finally:
        await health.close()
        await topology.close()


async def test_a_primary_at_maxmemory_passes_a_ping_but_fails_readiness_until_memory_is_back(
    own_valkey: ValkeyServer,
) -> None:
    REFUSALS.remembered_s = 60.0  # an out of memory refusal is forgotten once INFO shows room, not later
    store = ValkeyTaskStore(own_valkey.url, prefix="health-full")
    async with health_of(own_valkey.url) as health:
        try:
            await health.probe()
            assert gauge("ext_tasks_store_accepts_writes") == 1
            with configured(own_valkey.port, maxmemory=1) as admin:
                assert admin.ping()  # what readiness asked before: it passes
                with pytest.raises(TaskStoreUnavailable):
                    await store.create(make_record())
                with pytest.raises(TaskStoreUnavailable) as refused:
                    await health.probe()
                assert "maxmemory" in refused.value.detail
                assert gauge("ext_tasks_store_accepts_writes") == 0
            await health.probe()
            assert gauge("ext_tasks_store_accepts_writes") == 1
        finally:
            await store.close()


async def test_a_write_refused_moments_ago_fails_readiness_for_a_while(own_valkey: ValkeyServer) -> None:
    store = ValkeyTaskStore(own_valkey.url, prefix="health-refused")
    async with health_of(own_valkey.url) as health:
        try:
            with configured(own_valkey.port, min_replicas_to_write=1), pytest.raises(TaskStoreUnavailable):
                await store.create(make_record())  # NOREPLICAS: INFO memory does not show it
            with pytest.raises(TaskStoreUnavailable) as refused:
                await health.probe()
            assert "noreplicas" in refused.value.detail
            with anyio.fail_after(WAIT_S):
                while True:  # ready again once the refusal is old (0.5 s here, 5 s by default)
                    try:
                        await health.probe()
                        break
                    except TaskStoreUnavailable:
                        await anyio.sleep(0.1)
        finally:
            await store.close()


async def test_an_evicting_policy_fails_readiness_and_is_logged_unless_eviction_is_allowed(
    own_valkey: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ext_tasks.store")
    async with health_of(own_valkey.url) as strict, health_of(own_valkey.url, allow_eviction=True) as lenient:
        with configured(own_valkey.port, maxmemory_policy="allkeys-lru"):
            for _ in range(3):
                with pytest.raises(TaskStoreUnavailable) as refused:
                    await strict.probe()
                assert "allkeys-lru" in refused.value.detail
            await lenient.probe()
            assert gauge("ext_tasks_store_evicting_primaries") == 1
        await strict.probe()
        assert gauge("ext_tasks_store_evicting_primaries") == 0
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(errors) == 1, [record.message for record in errors]  # once when found, not at every probe
    assert f"maxmemory-policy allkeys-lru on 127.0.0.1:{own_valkey.port}" in errors[0].getMessage()
    assert any("EXT_TASKS_VALKEY_ALLOW_EVICTION" in record.getMessage() for record in warnings)


async def test_the_background_check_finds_a_policy_changed_after_start_and_logs_it_at_every_check(
    own_valkey: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ext_tasks.store")
    async with health_of(own_valkey.url, every_s=CHECK_EVERY_S) as health:
        health.start()
        with configured(own_valkey.port, maxmemory_policy="volatile-lru"), anyio.fail_after(WAIT_S):
            while len(caplog.records) < 3:  # noqa: ASYNC110 - the check logs; no event to wait on
                await anyio.sleep(CHECK_EVERY_S / 2)
            assert gauge("ext_tasks_store_evicting_primaries") == 1
        with anyio.fail_after(WAIT_S):
            while gauge("ext_tasks_store_evicting_primaries") != 0:  # noqa: ASYNC110
                await anyio.sleep(CHECK_EVERY_S / 2)
    assert all("volatile-lru" in record.getMessage() for record in caplog.records)


async def test_keys_the_store_evicted_are_exported(tmp_path: Path) -> None:
    policy = ("--maxmemory-policy", "allkeys-lru")
    with running_valkey(tmp_path / "evicting", extra_args=policy) as evicting:
        admin: Any
        with valkey.Valkey(port=evicting.port, decode_responses=True) as admin:
            admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + 200_000)
            with admin.pipeline(transaction=False) as pipe:
                for index in range(2000):
                    pipe.set(f"filler-{index}", "x" * 500)
                pipe.execute()
            evicted = int(admin.info("stats")["evicted_keys"])
        assert evicted > 0
        async with health_of(evicting.url, allow_eviction=True) as health:
            await health.check()
            await health.probe()  # at maxmemory, but making room: it accepts writes, and eviction is allowed
        assert gauge("ext_tasks_store_evicted_keys") == evicted
        assert gauge("ext_tasks_store_accepts_writes") == 1


async def test_the_start_check_refuses_an_evicting_store_unless_allowed_and_lets_an_unreachable_one_pass(
    own_valkey: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    def settings(url: str, **extra: Any) -> Settings:
        return Settings(valkey_url=url, state_keys=(b"k" * 32,), **extra)

    with configured(own_valkey.port, maxmemory_policy="allkeys-lfu"):
        with pytest.raises(ConfigError, match="maxmemory-policy allkeys-lfu") as refused:
            await check_store_settings(settings(own_valkey.url))
        assert "EXT_TASKS_VALKEY_ALLOW_EVICTION=true" in str(refused.value)
        await check_store_settings(settings(own_valkey.url, valkey_allow_eviction=True))
    await check_store_settings(settings(own_valkey.url))
    caplog.set_level(logging.WARNING, logger="ext_tasks.compose")
    with anyio.fail_after(WAIT_S):
        await check_store_settings(settings(f"valkey://127.0.0.1:{free_port()}/0"))
    assert any("could not be checked" in record.getMessage() for record in caplog.records)


async def test_a_store_that_refuses_info_is_pinged_instead_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with running_valkey(tmp_path / "no-info", extra_args=("--rename-command", "INFO", '""')) as hidden:
        async with health_of(hidden.url) as health:
            for _ in range(3):
                await health.probe()
            assert await health.check() == []
        await check_store_settings(Settings(valkey_url=hidden.url, state_keys=(b"k" * 32,)))
    refused = [record for record in caplog.records if "refuses INFO" in record.getMessage()]
    assert len(refused) == 1
    assert any("could not be checked" in record.getMessage() for record in caplog.records)


async def test_every_primary_of_a_cluster_is_read_and_the_evicting_one_named(valkey_cluster: ValkeyCluster) -> None:
    async with health_of(valkey_cluster.url) as health:
        primaries = await health.check()
        assert sorted(primary.node for primary in primaries) == sorted(
            f"127.0.0.1:{node.port}" for node in valkey_cluster.primaries
        )
        victim = valkey_cluster.primaries[1]
        with configured(victim.port, maxmemory_policy="allkeys-random"):
            with pytest.raises(TaskStoreUnavailable) as refused:
                await health.probe()
            assert [primary.node for primary in health.evicting] == [f"127.0.0.1:{victim.port}"]
            assert f"allkeys-random on 127.0.0.1:{victim.port}" in refused.value.detail
        await health.probe()


async def test_the_primary_sentinel_names_is_the_one_read(sentinel_group: SentinelGroup) -> None:
    primary = f"127.0.0.1:{sentinel_group.primary.port}"
    async with health_of(sentinel_group.url) as health:
        assert [state.node for state in await health.check()] == [primary]
        with configured(sentinel_group.primary.port, maxmemory_policy="allkeys-lru"):
            with pytest.raises(TaskStoreUnavailable) as refused:
                await health.probe()
            assert f"allkeys-lru on {primary}" in refused.value.detail
        await health.probe()
