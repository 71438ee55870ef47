"""The admin listener (issue 28, "an operator's view"), on real server processes, on the in-memory
store, one Valkey and the session's Valkey Cluster (every partition):

- its API refuses anything but one of its own tokens (never a ``/mcp`` principal's), and is not on
  ``/mcp`` (nor ``/mcp`` on it); ``/mcp`` answers as before;
- filters (status, tool, principal, age, attempts, stuck) and totals by status, tool and principal; a
  running task shows its lease holder and last heartbeat, a failed one its last error;
- ``ext-tasks admin`` lists, cancels (the running tool stops: the task ends ``cancelled`` on ``/mcp``
  too) and purges finished tasks (gone on ``/mcp`` afterwards), leaving unfinished ones;
- a task whose worker process is SIGKILLed mid-run is found stuck once its lease lapses;
- listing costs the hot path nothing: a task's lifecycle stays within its Valkey command budget.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from valkey import Valkey

from tests.support.admin import (
    ADMIN_TOKEN,
    AdminServer,
    admin_env,
    running_admin_server,
    sigkill,
)
from tests.support.cluster import keygen, running_worker, wait_for
from tests.support.command_counts import commands, wait_until_quiet
from tests.support.valkey import running_valkey
from tests.support.valkey_cluster import ValkeyCluster

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.admin_tools"
STORES = ("memory", "valkey", "valkey-cluster")
#: The Valkey commands one task lifecycle may cost (create, run, complete, one poll): the budget of the
#: benchmark's report ("Valkey commands per `lifecycle` (one Valkey) ≤ 20", bench/results/2026-12-02-*).
LIFECYCLE_BUDGET = 20
LIFECYCLES = 20
#: What the byte budget (EXT_TASKS_MAX_STORED_BYTES, on by default, added after that budget was set)
#: adds to it, by ext_tasks/store/valkey/places.py's own count: taking a place 8 commands instead of 4,
#: settling it 4 instead of 2.
BYTE_BUDGET_COST = 6
WAIT_S = 30.0


def _prefix() -> str:
    return f"admin-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", params=STORES)
def admin_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminServer]:
    """One server per store with its admin listener; ``input_required`` counts as stuck after 1 s."""
    directory = tmp_path_factory.mktemp(f"admin-{request.param}")
    env = admin_env(_prefix(), {"EXT_TASKS_ADMIN_STUCK_INPUT_S": "1", "EXT_TASKS_STATE_KEYS": keygen()})
    if request.param == "memory":
        with running_admin_server(directory, tools=TOOLS, valkey_url=None, env=env) as server:
            yield server
    elif request.param == "valkey":
        with (
            running_valkey(directory / "valkey") as valkey,
            running_admin_server(directory, tools=TOOLS, valkey_url=valkey.url, env=env) as server,
        ):
            yield server
    else:
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        with running_admin_server(directory, tools=TOOLS, valkey_url=cluster.url, env=env) as server:
            yield server


def test_the_admin_api_takes_only_its_own_tokens_and_mcp_is_unaffected(admin_server: AdminServer) -> None:
    assert admin_server.admin("GET", "/api/tasks", token=None).status_code == 401
    assert admin_server.admin("GET", "/api/tasks", token="tok-alice").status_code == 401  # a /mcp principal's
    assert admin_server.admin("GET", "/api/tasks", token=ADMIN_TOKEN + "x").status_code == 401
    assert admin_server.admin("POST", "/api/purge", token=None).status_code == 401
    assert admin_server.admin("GET", "/api/tasks", token="another-admin-token").status_code == 200
    page = admin_server.admin("GET", "/", token=None)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    # Neither listener serves the other's paths.
    assert admin_server.admin("POST", "/mcp", token=ADMIN_TOKEN).status_code == 404
    assert admin_server.http.get(admin_server.mcp_url.replace("/mcp", "/api/tasks")).status_code == 404
    # /mcp: as before, with its own principals (an admin token is nobody there).
    task_id = admin_server.call("sleepy", {"seconds": 0})
    assert admin_server.get(task_id)["result"]["taskId"] == task_id
    refused = admin_server.get(task_id, as_token=ADMIN_TOKEN)
    assert "error" in refused or refused.get("result") is None
    assert ADMIN_TOKEN not in admin_server.server.log()


def test_filters_totals_leases_and_errors(admin_server: AdminServer) -> None:
    """bob's tasks only (no other test uses bob): one running, one asking, one failed, one completed."""
    bob = "tok-bob"
    running = admin_server.call("sleepy", {"seconds": 60}, as_token=bob)
    asking = admin_server.call("asks", {}, as_token=bob)
    broken = admin_server.call("breaks", {"reason": "disk full"}, as_token=bob)
    done = admin_server.call("sleepy", {"seconds": 0}, as_token=bob)
    admin_server.wait_row(running, lambda row: row["lease"] is not None and row["statusMessage"] is not None)
    admin_server.wait_row(asking, lambda row: row["status"] == "input_required")
    admin_server.wait_row(broken, lambda row: row["status"] == "failed")
    admin_server.wait_row(done, lambda row: row["status"] == "completed")
    try:
        listing = admin_server.tasks(principal="bob")
        assert {task["taskId"] for task in listing["tasks"]} == {running, asking, broken, done}
        totals = listing["totals"]
        assert totals["all"] == 4
        assert totals["byPrincipal"] == {"bob": 4}
        assert totals["byStatus"] == {"working": 1, "input_required": 1, "completed": 1, "failed": 1, "cancelled": 0}
        assert totals["byTool"] == {"sleepy": 2, "asks": 1, "breaks": 1}

        def ids(**filters: Any) -> set[str]:
            return {task["taskId"] for task in admin_server.tasks(principal="bob", **filters)["tasks"]}

        assert ids(status="working") == {running}
        assert ids(status="completed,failed") == {broken, done}
        assert ids(tool="sleepy") == {running, done}
        assert ids(tool="breaks", status="failed") == {broken}
        # A run's attempt is written with the run's first commit (a status, a question, an outcome).
        assert broken in ids(min_attempts=1)
        assert ids(min_attempts=2) == set()  # nothing ran twice
        assert ids(newer_than_s=3600) == {running, asking, broken, done}
        assert ids(older_than_s=3600) == set()
        admin_server.wait_row(asking, lambda row: row["stuck"] is not None, timeout_s=10)  # the 1 s limit
        assert ids(stuck="true") == {asking}  # the running one is alive: not stuck

        row = admin_server.row(running)
        assert row is not None
        lease = row["lease"]
        assert lease["holder"] and lease["attempt"] == 1
        assert 0 <= time.time() * 1000 - lease["lastHeartbeat"] < 15_000
        assert row["stuck"] is None and row["traceId"] is None
        failed = admin_server.row(broken)
        assert failed is not None and "disk full" in failed["lastError"]["message"]
        asked = admin_server.row(asking)
        assert asked is not None and "input_required" in asked["stuck"]

        detail = admin_server.admin("GET", f"/api/tasks/{running}").json()
        assert detail["arguments"] == {"seconds": 60} and detail["principal"] == "bob"
        assert detail["lease"]["holder"] == lease["holder"]
        assert admin_server.admin("GET", "/api/tasks/bd.nosuchtask").status_code == 404
        assert admin_server.admin("GET", "/api/tasks", status="nonsense").status_code == 400
    finally:
        for task_id in (running, asking):
            admin_server.admin("POST", f"/api/tasks/{task_id}/cancel")


def test_cli_lists_cancels_and_purges(admin_server: AdminServer) -> None:
    tool_run = admin_server.call("sleepy", {"seconds": 120})
    finished = admin_server.call("sleepy", {"seconds": 0})
    admin_server.wait_row(tool_run, lambda row: row["lease"] is not None)
    admin_server.wait_row(finished, lambda row: row["status"] == "completed")

    listed = admin_server.cli("tasks", "--status", "working", "--principal", "alice")
    assert listed.returncode == 0, listed.stderr
    assert tool_run in listed.stdout and finished not in listed.stdout
    assert "working" in listed.stdout.splitlines()[-1]
    totals = admin_server.cli("totals", "--principal", "alice")
    assert totals.returncode == 0 and json.loads(totals.stdout)["byStatus"]["completed"] >= 1

    cancelled = admin_server.cli("cancel", tool_run)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout) == {"taskId": tool_run, "status": "cancelled", "cancelled": True}
    assert admin_server.get(tool_run)["result"]["status"] == "cancelled"  # the client sees it on /mcp
    # The tool stops: its run is acknowledged, so no worker holds it any more.
    admin_server.wait_row(tool_run, lambda row: row["lease"] is None)
    assert json.loads(admin_server.cli("cancel", tool_run).stdout)["cancelled"] is False  # already finished

    still_running = admin_server.call("sleepy", {"seconds": 120})
    try:
        admin_server.wait_row(still_running, lambda row: row["status"] == "working")
        purged = admin_server.cli("purge", "--principal", "alice", "--tool", "sleepy")
        assert purged.returncode == 0, purged.stderr
        outcome = json.loads(purged.stdout)
        assert {tool_run, finished} <= set(outcome["taskIds"])
        assert still_running not in outcome["taskIds"] and outcome["kept"] >= 1
        assert admin_server.row(finished) is None and admin_server.row(still_running) is not None
        assert "error" in admin_server.get(finished)  # gone on /mcp too
    finally:
        admin_server.admin("POST", f"/api/tasks/{still_running}/cancel")
    no_token = admin_server.cli("--token", "wrong", "tasks")
    assert no_token.returncode == 1 and "401" in no_token.stderr


@pytest.mark.parametrize("store", ["valkey", "valkey-cluster"])
def test_a_task_whose_worker_is_killed_is_found_stuck(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Requests on a server without workers, the run on an ``ext-tasks worker`` that is SIGKILLed: the
    task stays ``working``, its run held by a dead worker; past the lease the admin API says stuck."""
    lease_s = 2
    env = admin_env(_prefix(), {"EXT_TASKS_LEASE_S": str(lease_s), "EXT_TASKS_STATE_KEYS": keygen()})
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(store_url_of(store, request, tmp_path))
        no_workers = ("--no-task-workers",)
        server = stack.enter_context(
            running_admin_server(tmp_path, tools=TOOLS, valkey_url=url, env=env, extra_args=no_workers)
        )
        worker = stack.enter_context(running_worker(tmp_path, tools=TOOLS, valkey=url, env=env))
        task_id = server.call("sleepy", {"seconds": 300})
        held = server.wait_row(task_id, lambda row: row["lease"] is not None)
        assert held["stuck"] is None
        assert server.tasks(stuck="true")["totals"]["all"] == 0
        sigkill(worker.process)
        killed_at = time.monotonic()
        stuck = server.wait_row(task_id, lambda row: row["stuck"] is not None, timeout_s=lease_s + 20)
        waited = time.monotonic() - killed_at
        print(f"\n[{store}] stuck after {waited:.1f} s: {stuck['stuck']}")
        # Heartbeats come every third of the lease: at the kill, up to a third of it may have gone already.
        assert waited >= lease_s * 2 / 3 - 0.2
        assert stuck["status"] == "working" and stuck["lease"]["holder"] == held["lease"]["holder"]
        assert held["lease"]["holder"] in stuck["stuck"]
        assert [task["taskId"] for task in server.tasks(stuck="true")["tasks"]] == [task_id]
        # What the operator does about it: cancel it (or start a worker, which reclaims the run).
        assert server.admin("POST", f"/api/tasks/{task_id}/cancel").json()["cancelled"] is True
        assert server.tasks(stuck="true")["totals"]["all"] == 0


@pytest.mark.parametrize(
    ("settings", "budget"),
    [
        pytest.param({"EXT_TASKS_MAX_STORED_BYTES": "0"}, LIFECYCLE_BUDGET, id="count-caps"),
        pytest.param({}, LIFECYCLE_BUDGET + BYTE_BUDGET_COST, id="defaults"),
    ],
)
def test_a_lifecycle_stays_within_its_valkey_command_budget(
    settings: dict[str, str], budget: int, tmp_path: Path
) -> None:
    """``INFO commandstats`` over sequential lifecycles (create, run, complete, then ``tasks/get`` until
    completed) with the admin listener on, counted with one poll each as the budget is (a poll is one
    ``HGETALL``). Listing reads what is kept: the hot path runs none of its commands, and the budget
    holds. One listing is counted apart. The workers' background (a reclaim pass every half lease, the
    benchmark measures it apart) is kept out of the window by a long lease."""
    env = admin_env(_prefix(), {"EXT_TASKS_STATE_KEYS": keygen(), "EXT_TASKS_LEASE_S": "600", **settings})
    with (
        running_valkey(tmp_path / "valkey") as valkey,
        running_admin_server(tmp_path, tools=TOOLS, valkey_url=valkey.url, env=env) as server,
    ):
        server.tasks()  # the scripts loaded, the connections open
        warm = server.call("instant", {})
        wait_for(lambda: server.get(warm)["result"]["status"] == "completed", WAIT_S)
        counter = Valkey(host="127.0.0.1", port=valkey.port, decode_responses=True)
        wait_until_quiet(counter, WAIT_S)  # the warm-up task's last step (its place settled) is not counted
        counter.config_resetstat()
        polls = 0
        for _ in range(LIFECYCLES):
            task_id = server.call("instant", {})
            deadline = time.monotonic() + WAIT_S
            while True:
                polls += 1
                if server.get(task_id)["result"]["status"] == "completed":
                    break
                assert time.monotonic() < deadline, f"{task_id} not completed"
                time.sleep(0.001)
        hot = commands(counter)
        counter.config_resetstat()
        listing = server.tasks()
        per_listing = sum(commands(counter).values())
        counter.close()  # type: ignore[no-untyped-call]
    per_lifecycle = (sum(hot.values()) - (polls - LIFECYCLES)) / LIFECYCLES
    print(f"\nValkey commands per lifecycle, one poll included: {per_lifecycle:.2f} (budget {budget}; "
          f"{polls / LIFECYCLES:.2f} polls made); one listing of {listing['totals']['all']} tasks: {per_listing}; "
          f"{dict(hot)}")  # fmt: skip
    assert not {"scan", "xpending", "xrange"} & set(hot)
    assert per_lifecycle <= budget
    assert listing["totals"]["all"] == LIFECYCLES + 1


def store_url_of(store: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A Valkey URL for ``store``: a valkey-server of this test's own, or the session's cluster."""
    if store == "valkey-cluster":
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        return contextlib.nullcontext(cluster.url)

    @contextlib.contextmanager
    def own() -> Iterator[str]:
        with running_valkey(tmp_path / "valkey") as valkey:
            yield valkey.url

    return own()


def test_several_server_processes_share_one_admin_listener(tmp_path: Path) -> None:
    """``--workers 2``: the child processes serve ``/mcp``, the parent the admin listener, once, over the
    shared Valkey: a task created through either child is listed and cancelled there."""
    env = admin_env(_prefix(), {"EXT_TASKS_STATE_KEYS": keygen()})
    with (
        running_valkey(tmp_path / "valkey") as valkey,
        running_admin_server(
            tmp_path, tools=TOOLS, valkey_url=valkey.url, env=env, extra_args=("--workers", "2")
        ) as server,
    ):
        task_id = server.call("sleepy", {"seconds": 120})
        server.wait_row(task_id, lambda row: row["lease"] is not None)
        assert server.admin("POST", f"/api/tasks/{task_id}/cancel").json()["cancelled"] is True
        assert server.get(task_id)["result"]["status"] == "cancelled"
        assert server.server.log().count("admin listener on") == 1
