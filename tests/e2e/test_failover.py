"""Failover without loss: the primary dies under load and is replaced by its replica, promoted by
Sentinel (``valkey+sentinel://``) or by the cluster itself, while three instances behind nginx create
tasks, answer their input, cancel and poll them.

The client is a careful one (:mod:`tests.e2e.failover_load`): it resends what was answered "retry
later", creations with their idempotency key. With ``EXT_TASKS_VALKEY_MIN_REPLICA_ACKS=1`` a creation or
a change is answered only once the replica has it, so **no acknowledged task may be lost** and every
task ends as it should. Without acknowledgement, replication is asynchronous: what the primary had not
yet passed on when it died is gone; the test reports that count (docs/deploy.md quotes it).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import valkey

from ext_tasks.protocol.errors import INTERNAL_ERROR
from tests.e2e.failover_load import CAPABILITIES, FailoverLoad
from tests.e2e.task_tools import JOURNAL_VARIABLE
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.mcp_http import post
from tests.support.processes import ServerProcess
from tests.support.valkey_cluster import ValkeyCluster
from tests.support.valkey_sentinel import SentinelGroup, running_sentinel_group

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.task_tools"
#: The load (more of both, e.g. E2E_FAILOVER_CLIENTS=16 E2E_FAILOVER_TASKS=400, measures losses under a
#: heavier write rate than CI's).
TASKS = int(os.environ.get("E2E_FAILOVER_TASKS", "40"))
CLIENTS = int(os.environ.get("E2E_FAILOVER_CLIENTS", "4"))
FLEET_ENV = {"EXT_TASKS_LEASE_S": "2", "EXT_TASKS_SHUTDOWN_GRACE_S": "1"}


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    with running_sentinel_group(tmp_path / "sentinel") as group:
        yield group


def _fleet(tmp_path: Path, url: str, acks: int) -> contextlib.AbstractContextManager[Cluster]:
    env = {**FLEET_ENV, "EXT_TASKS_VALKEY_MIN_REPLICA_ACKS": str(acks), JOURNAL_VARIABLE: str(tmp_path / "journal")}
    return running_cluster(tmp_path, tools=TOOLS, env=env, valkey_url=url)


def _ready(fleet: Cluster) -> bool:
    with httpx.Client(timeout=5.0) as client:
        return all(client.get(_readyz(server)).status_code == 200 for server in fleet.servers)


def _readyz(server: ServerProcess) -> str:
    return server.url.removesuffix("/mcp") + "/readyz"


def test_sentinel_promotion_with_replica_acks_loses_no_acknowledged_task(
    tmp_path: Path, sentinel_group: SentinelGroup
) -> None:
    """With one replica and one acknowledgement required, the promoted replica has nobody to confirm its
    writes until the old primary is back (its supervisor restarts it; the sentinels make it a replica):
    meanwhile writes are "retry later", then they resume, with no restart of any instance."""
    with _fleet(tmp_path, sentinel_group.url, acks=1) as fleet:
        load = FailoverLoad(fleet.url)
        group = sentinel_group
        comeback = Comeback(group.kill_primary, group.wait_for_promotion, group.restart_killed)
        comeback.watch_readiness(
            _readyz(fleet.servers[0]), until=lambda: group.sentinels[0].primary_port() != group.primary.port
        )
        load.run(CLIENTS, TASKS, halfway=comeback.start)
        comeback.join()
        assert 503 in comeback.readiness  # /readyz said so while there was no primary
        print(f"\nsentinel, acks 1, primary killed halfway, back as a replica: {load.summary()}")
        assert load.errors == [], load.errors[:5]
        assert len(load.acknowledged) == TASKS  # creation resumed by itself after the promotion
        assert load.lost == []
        assert all(status == "expected" for status in load.outcomes.values()), load.summary()
        assert len(load.outcomes) == TASKS
        assert load.history.violations() == []
        assert FailoverLoad.overlapping_runs(tmp_path / "journal") == []  # no task ever ran twice at once
        wait_for(lambda: _ready(fleet), 30, message=lambda: "every instance ready on the new primary")
        assert _failovers_seen(fleet) >= 1


class Comeback:
    """``kill()`` the primary; in the background, once ``promoted()`` returns, ``bring_back()`` the old
    one (as its supervisor would): it comes back as the new primary's replica, so writes that need a
    replica's acknowledgement can be confirmed again."""

    def __init__(
        self, kill: Callable[[], object], promoted: Callable[[], object], bring_back: Callable[[], object]
    ) -> None:
        self.kill, self.promoted, self.bring_back = kill, promoted, bring_back
        self.readiness: list[int] = []  # what /readyz of one instance answered until the switch
        self._readyz: tuple[str, Callable[[], bool]] | None = None
        self.thread = threading.Thread(target=self._follow, name="comeback")
        self.failure: BaseException | None = None

    def watch_readiness(self, readyz: str, until: Callable[[], bool]) -> None:
        self._readyz = (readyz, until)

    def start(self) -> None:
        self.kill()
        self.thread.start()

    def _follow(self) -> None:
        try:
            if self._readyz is not None:
                url, switched = self._readyz
                with httpx.Client(timeout=5.0) as client:
                    while not switched():
                        self.readiness.append(client.get(url).status_code)
                        time.sleep(0.05)
            self.promoted()
            self.bring_back()
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.failure = exc

    def join(self) -> None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        assert self.failure is None, self.failure


def test_sentinel_promotion_without_acks_reports_what_was_lost(tmp_path: Path, sentinel_group: SentinelGroup) -> None:
    """Without acknowledgement the server still follows the promotion and serves on; what it loses is
    what the replica had not received (often nothing on loopback, where replication lags by
    microseconds). The figure is printed for docs/deploy.md; no loss is asserted either way."""
    with _fleet(tmp_path, sentinel_group.url, acks=0) as fleet:
        load = FailoverLoad(fleet.url)
        load.run(CLIENTS, TASKS, halfway=sentinel_group.kill_primary)
        print(f"\nsentinel, acks 0, primary killed halfway: {load.summary()}")
        assert load.errors == [], load.errors[:5]
        assert len(load.acknowledged) == TASKS
        assert len(load.lost) + len(load.outcomes) == TASKS  # every task either lost or followed to its end
        assert all(status == "expected" for status in load.outcomes.values()), load.summary()


def test_cluster_primary_failover_with_replica_acks_loses_no_acknowledged_task(
    tmp_path: Path, valkey_cluster: ValkeyCluster
) -> None:
    victim = valkey_cluster.primaries[1]
    with _fleet(tmp_path, valkey_cluster.url, acks=1) as fleet:
        load = FailoverLoad(fleet.url)
        comeback = Comeback(lambda: valkey_cluster.kill(victim), lambda: None, lambda: valkey_cluster.rejoin(victim))
        try:
            load.run(CLIENTS, TASKS, halfway=comeback.start)
            comeback.join()
            print(f"\ncluster, acks 1, primary :{victim.port} killed halfway: {load.summary()}")
            assert load.errors == [], load.errors[:5]
            assert len(load.acknowledged) == TASKS
            assert load.lost == []
            assert all(status == "expected" for status in load.outcomes.values()), load.summary()
            assert len(load.outcomes) == TASKS
            assert load.history.violations() == []
            assert FailoverLoad.overlapping_runs(tmp_path / "journal") == []  # no task ever ran twice at once
            assert _failovers_seen(fleet) >= 1  # some instance saw the replica take over
            assert _metric(fleet, "ext_tasks_store_retries_total") > 0
        finally:
            valkey_cluster.recover(victim)  # back as a primary: the session's other tests expect the layout


def test_too_few_replicas_answers_retry_later_and_the_resend_finds_the_task(tmp_path: Path) -> None:
    """One Valkey without replicas asked for one acknowledgement: the creation is stored but cannot be
    confirmed, so the client is told to retry; the resend with the same idempotency key names the same
    task (nothing duplicated) and is again "retry later" until a replica confirms it."""
    with (
        running_cluster(
            tmp_path,
            tools=TOOLS,
            size=1,
            env={"EXT_TASKS_VALKEY_MIN_REPLICA_ACKS": "1", "EXT_TASKS_VALKEY_ACK_TIMEOUT_MS": "100"},
        ) as fleet,
        httpx.Client(timeout=10.0) as client,
    ):
        meta = {"dev.ext-tasks/idempotencyKey": "one-key"}
        params = {"name": "sleepy", "arguments": {"seconds": 0.1}}
        first, body = post(client, fleet.url, "tools/call", params, capabilities=CAPABILITIES, extra_meta=meta)
        assert first.status_code == 503, body
        assert first.headers.get("Retry-After")
        assert body["error"]["code"] == INTERNAL_ERROR
        second, _ = post(client, fleet.url, "tools/call", params, capabilities=CAPABILITIES, extra_meta=meta)
        assert second.status_code == 503
        assert fleet.valkey is not None
        with valkey.Valkey(port=fleet.valkey.port, decode_responses=True) as store:
            records = [key for key in store.scan_iter("*") if ":task:" in key]
        assert len(records) == 1, records  # the resend did not create a second task
        assert _metric(fleet, "ext_tasks_store_ack_timeouts_total") >= 2


def _metric(fleet: Cluster, name: str) -> float:
    total = 0.0
    with httpx.Client(timeout=5.0) as client:
        for server in fleet.servers:
            for line in client.get(server.url.removesuffix("/mcp") + "/metrics").text.splitlines():
                if line.startswith((name + " ", name + "{")):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def _failovers_seen(fleet: Cluster) -> float:
    return _metric(fleet, "ext_tasks_store_failovers_total")
