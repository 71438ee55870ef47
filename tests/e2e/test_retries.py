"""Retries with backoff across a fleet: three ``ext-tasks serve`` processes on one store (one Valkey,
and the Valkey Cluster), nginx in front (``tests.support.cluster``). A tool that fails transiently
twice then succeeds completes on its third attempt; the delays between its attempts (noted by the tool
itself, on whichever instance ran it) follow its backoff within bounds; while it waits, ``tasks/get``
through any instance says which attempt comes when; and a retry whose scheduling instance is
SIGKILLed is run by a survivor.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from valkey import Valkey

from tests.e2e.conftest import STORES, store_url_for
from tests.e2e.retry_tools import ATTEMPTS, BACKOFF
from tests.e2e.test_balancer import TaskApi, checked_api, result_text
from tests.support.cluster import Cluster, keygen, running_cluster, wait_for
from tests.support.command_counts import commands, wait_until_quiet
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.retry_tools"
#: What the fleet may add to a delay: committing the failure, promoting, a worker's read waking, the
#: next attempt starting (loaded CI machines included). A retry is never early.
SLACK_S = 1.5
#: The lease, and so the sweep that promotes the retries of an instance that died.
LEASE_S = 2
WAIT_S = 60.0
RETRIES = "dev.ext-tasks/retries"
RUN_ATTEMPTS = "dev.ext-tasks/runAttempts"
#: What one retry may cost Valkey: the failed attempt's commit schedules it (ZADD in the script, instead
#: of nothing), its promotion (one script: ZRANGE, XADD, ZREM), then a second run as any run costs (its
#: read, the record read when it starts, the outcome's commit).
RETRY_COMMANDS = 14


@pytest.fixture(scope="module", params=STORES)
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three instances behind nginx, on one Valkey and on the Valkey Cluster."""
    env = {"EXT_TASKS_LEASE_S": str(LEASE_S)}
    url = store_url_for(request, request.param)
    with running_cluster(tmp_path_factory.mktemp("retries"), tools=TOOLS, env=env, valkey_url=url) as cluster:
        yield cluster


@pytest.fixture
def api() -> Iterator[TaskApi]:
    with checked_api() as api:
        yield api


def journal(path: Path) -> list[tuple[float, int]]:
    """The attempts the tool noted: (wall time, pid) each."""
    if not path.exists():
        return []
    return [(float(at), int(pid)) for at, pid in (line.split() for line in path.read_text().splitlines())]


def finished(api: TaskApi, cluster: Cluster, task_id: str, seen: list[str], url: str | None = None) -> dict[str, Any]:
    """Poll ``tasks/get`` through nginx (or ``url``) until the task ends, noting every statusMessage seen."""

    def ended() -> dict[str, Any] | None:
        task = api.get(url or cluster.url, task_id)
        message = task.get("statusMessage")
        if message and (not seen or seen[-1] != message):
            seen.append(message)
        return task if task["status"] in ("completed", "failed", "cancelled") else None

    return wait_for(ended, WAIT_S, interval_s=0.05, message=lambda: f"{task_id} did not end\n{cluster.logs()}")


def test_a_tool_that_fails_transiently_twice_completes_with_delays_that_follow_its_backoff(
    fleet: Cluster, api: TaskApi, tmp_path: Path
) -> None:
    notes = tmp_path / "attempts"
    created = api.create(fleet.url, "flaky_upstream", {"journal": str(notes), "failures": 2})
    seen: list[str] = []
    task = finished(api, fleet, created["taskId"], seen)
    attempts = journal(notes)
    delays = [later[0] - earlier[0] for earlier, later in itertools.pairwise(attempts)]
    print(f"\nattempts by pid: {[pid for _, pid in attempts]}; delays: {[round(d, 3) for d in delays]} s; "
          f"statusMessages seen: {seen}")  # fmt: skip
    assert task["status"] == "completed", task
    assert result_text(task).startswith("succeeded on attempt 3 "), task
    assert task["_meta"][RETRIES] == 2, task  # two retries, apart from crash re-runs (none)
    assert task["_meta"][RUN_ATTEMPTS] == 1, task
    assert len(attempts) == ATTEMPTS
    for failed, delay in enumerate(delays, start=1):
        planned = BACKOFF.delay_s(failed)
        assert planned <= delay <= planned + SLACK_S, (failed, delay, planned)
    # The wait between attempts is long enough for a poll every 50 ms to see it said (1 s before the third).
    assert "attempt 3 of 3 in 1 s: UpstreamUnavailable" in seen, seen


def test_past_the_last_attempt_the_task_fails_saying_how_many_were_made(
    fleet: Cluster, api: TaskApi, tmp_path: Path
) -> None:
    notes = tmp_path / "attempts"
    created = api.create(fleet.url, "flaky_upstream", {"journal": str(notes), "failures": 5})
    task = finished(api, fleet, created["taskId"], [])
    assert task["status"] == "failed", task
    assert task["error"]["message"] == f"Gave up after {ATTEMPTS} attempts: UpstreamUnavailable", task
    assert task["error"]["data"] == {"attempts": ATTEMPTS}, task
    assert len(journal(notes)) == ATTEMPTS


def test_a_retry_whose_instance_was_killed_while_it_waited_runs_on_a_survivor(tmp_path: Path, api: TaskApi) -> None:
    """The instance that ran the first attempt (and alone knew when the retry is due) is SIGKILLed
    while the retry waits in the store; a surviving instance's sweep (every lease) runs it."""
    env = {"EXT_TASKS_LEASE_S": str(LEASE_S)}
    with running_cluster(tmp_path / "fleet", tools=TOOLS, env=env) as cluster:
        notes = tmp_path / "attempts"
        created = api.create(cluster.url, "flaky_upstream", {"journal": str(notes), "failures": 1})
        task_id = created["taskId"]
        # The retry committed (counted in _meta), the second attempt not started: kill the first's instance.
        wait_for(lambda: api.get(cluster.url, task_id)["_meta"].get(RETRIES) == 1, WAIT_S, interval_s=0.02)
        first = journal(notes)
        os.kill(first[0][1], signal.SIGKILL)
        killed_at = time.time()
        assert len(first) == 1, "the retry ran before the kill: nothing was tested"
        survivors = wait_for(lambda: cluster.alive() if len(cluster.alive()) == 2 else None, WAIT_S)
        task = finished(api, cluster, task_id, [], survivors[0].url)
        attempts = journal(notes)
    assert task["status"] == "completed", task
    assert (task["_meta"][RUN_ATTEMPTS], task["_meta"][RETRIES]) == (1, 1), task  # a retry, not a crash re-run
    assert len(attempts) == 2 and attempts[1][1] != attempts[0][1], attempts
    # Promoted by a survivor's sweep: within a lease or so of the kill, whatever its own delay.
    assert attempts[1][0] - killed_at <= LEASE_S + SLACK_S + BACKOFF.delay_s(1), attempts


# --- what a retry costs the store ---------------------------------------------------------------------

#: Tasks measured per case; they run at once, so the idle background (a blocking read a second) is small.
MEASURED = 10


def _per_task(api: TaskApi, server: ServerProcess, counter: Valkey, tmp_path: Path, failures: int) -> float:
    """Valkey commands per task of ``MEASURED`` tasks failing ``failures`` times each (polls not counted:
    each ``tasks/get`` is one ``HGETALL``)."""
    wait_until_quiet(counter, WAIT_S)  # the tasks before these all settled
    counter.config_resetstat()
    task_ids = [
        api.create(server.url, "flaky_upstream", {"journal": str(tmp_path / f"{failures}-{n}"), "failures": failures})[
            "taskId"
        ]
        for n in range(MEASURED)
    ]
    polls = 0
    for task_id in task_ids:
        deadline = time.monotonic() + WAIT_S
        while True:
            polls += 1
            if api.get(server.url, task_id)["status"] == "completed":
                break
            assert time.monotonic() < deadline, f"{task_id} not completed\n{server.log()}"
            time.sleep(0.05)
    counted = commands(counter)
    print(f"\n{failures} retries per task: {dict(counted)}")
    return (sum(counted.values()) - polls) / MEASURED


def test_a_retry_costs_the_store_a_bounded_number_of_commands(tmp_path: Path, api: TaskApi) -> None:
    """``INFO commandstats`` over tasks that retry once against tasks that do not (the lease long, so
    no sweep falls in the window: it is measured apart, per lease, by the store's own count)."""
    env = {"EXT_TASKS_STATE_KEYS": keygen(), "EXT_TASKS_LEASE_S": "600", "EXT_TASKS_MAX_STORED_BYTES": "0"}
    with (
        running_valkey(tmp_path / "valkey") as valkey,
        running_server(tmp_path, tools=TOOLS, env=env, extra_args=("--valkey-url", valkey.url)) as server,
    ):
        counter = Valkey(host="127.0.0.1", port=valkey.port, decode_responses=True)
        _per_task(api, server, counter, tmp_path, 0)  # warm: the scripts loaded, the connections open
        plain = _per_task(api, server, counter, tmp_path, 0)
        retried = _per_task(api, server, counter, tmp_path, 1)
        counter.close()  # type: ignore[no-untyped-call]
    print(f"\nValkey commands per task, polls apart: {plain:.1f} without a retry, {retried:.1f} with one "
          f"({retried - plain:.1f} per retry)")  # fmt: skip
    assert retried - plain <= RETRY_COMMANDS
