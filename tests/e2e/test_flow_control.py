"""Flow control across a fleet: three ``ext-tasks serve`` processes on one store (one Valkey, and the
Valkey Cluster), nginx in front (``tests.support.cluster``). What a tool author and an operator rely on,
checked against what the tool itself noted on whichever instance ran it (``tests.e2e.flow_tools``):

* ``concurrency_key``: with the instances racing for runs, never two deploys of one service at once,
  every deploy done, each service's deploys in the order they were created, and a waiting deploy read
  through any instance says what it waits for;
* ``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL``: one principal's runs never past the cap over the fleet, while
  another principal's run starts at once; ``EXT_TASKS_CREATE_RATE_PER_PRINCIPAL`` / ``_BURST_``: one
  bucket for the fleet, past it 429 with ``Retry-After``, another principal unaffected;
* ``concurrency=N``: never more than N runs of the tool at once over the fleet;
* a deploy cancelled, running or waiting, through any instance: the next one goes, the cancelled waiter
  never runs;
* an instance SIGKILLed while its run holds a service's place: the place comes back with the lease, the
  run is run again by a survivor, the deploy that waited runs too, never at the same time, none lost.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks.protocol.errors import LIMIT_EXCEEDED
from tests.e2e.conftest import STORES, store_url_for
from tests.e2e.flow_tools import RENDERS
from tests.e2e.test_balancer import CAPABILITIES, TERMINAL, TaskApi
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.history import History
from tests.support.mcp_http import post

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.flow_tools"
#: The lease, and so how long a dead worker's places (and runs) stay taken.
LEASE_S = 2
WAIT_S = 30.0
RUN_ATTEMPTS = "dev.ext-tasks/runAttempts"
#: What the fleet may add to a wait: a sweep's period, a commit, a wake, a loaded CI machine.
SLACK_S = 2.0

CAP = 2
RATE_PER_S = 1
BURST = 3
TOKENS = {name: f"token-{name}-{secrets.token_hex(8)}" for name in ("alice", "bob", "carol", "dave")}


def fleet_of(request: pytest.FixtureRequest, directory: Path, env: Mapping[str, str]) -> Iterator[Cluster]:
    url = store_url_for(request, request.param)
    with running_cluster(
        directory, tools=TOOLS, env={"EXT_TASKS_LEASE_S": str(LEASE_S), **env}, valkey_url=url
    ) as fleet:
        yield fleet


@pytest.fixture(scope="module", params=STORES)
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three instances, no flow-control settings (the tools' own gates only)."""
    yield from fleet_of(request, tmp_path_factory.mktemp("flow"), {})


@pytest.fixture(scope="module", params=STORES)
def capped_fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three instances with a principal's cap and creation rate, and four principals (bearer tokens)."""
    env = {
        "EXT_TASKS_TOKENS": ",".join(f"{token}={name}" for name, token in TOKENS.items()),
        "EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL": str(CAP),
        "EXT_TASKS_CREATE_RATE_PER_PRINCIPAL": str(RATE_PER_S),
        "EXT_TASKS_CREATE_BURST_PER_PRINCIPAL": str(BURST),
    }
    yield from fleet_of(request, tmp_path_factory.mktemp("flow-capped"), env)


@contextlib.contextmanager
def apis(*principals: str) -> Iterator[dict[str, TaskApi]]:
    """The raw task API as each principal (anonymous: ``""``), one history for all; at the end, what
    they saw must obey its rules (nothing acknowledged lost, terminal is final, attempts bounded)."""
    history = History()
    with contextlib.ExitStack() as stack:
        made = {}
        for name in principals:
            headers = {"Authorization": f"Bearer {TOKENS[name]}"} if name else {}
            client = stack.enter_context(httpx.Client(timeout=15.0, headers=headers))
            made[name] = TaskApi(client, history)
        yield made
    print(f"history: {history.summary()}")
    assert history.violations() == []


@pytest.fixture
def api() -> Iterator[TaskApi]:
    with apis("") as made:
        yield made[""]


# --- what the tool noted ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    event: str  # start | end
    key: str
    label: str
    pid: int
    at: float  # CLOCK_MONOTONIC, the machine's


def journal(path: Path) -> list[Note]:
    if not path.exists():
        return []
    notes = []
    for line in path.read_text().splitlines():
        event, key, label, pid, at = line.split()
        notes.append(Note(event, key, label, int(pid), float(at)))
    return notes


def most_at_once(notes: Sequence[Note], key: str) -> int:
    """The most runs of ``key`` between their start and end at once, in the journal's order (a run that
    never ended, its instance killed, counts until the end)."""
    running = most = 0
    for note in notes:
        if note.key == key:
            running += 1 if note.event == "start" else -1
            most = max(most, running)
    return most


def started(notes: Sequence[Note], key: str | None = None) -> list[str]:
    return [note.label for note in notes if note.event == "start" and key in (None, note.key)]


def ended_tasks(
    api: TaskApi, cluster: Cluster, task_ids: Sequence[str], url: str | None = None
) -> list[dict[str, Any]]:
    """Poll ``tasks/get`` (through nginx, or ``url``) until every task ended; their last answers."""
    last: dict[str, dict[str, Any]] = {}

    def all_ended() -> bool:
        for task_id in task_ids:
            if task_id not in last or last[task_id]["status"] not in TERMINAL:
                last[task_id] = api.get(url or cluster.url, task_id)
        return all(task["status"] in TERMINAL for task in last.values())

    wait_for(all_ended, WAIT_S, message=lambda: f"tasks not ended: {last}\n{cluster.logs()}")
    return [last[task_id] for task_id in task_ids]


def deploy_args(journal_path: Path, service: str, label: str, **more: Any) -> dict[str, Any]:
    return {"service": service, "journal": str(journal_path), "label": label, **more}


# --- 1. one deploy per service at once, the instances racing ------------------------------------------

SERVICES = ("billing", "search")
DEPLOYS_PER_SERVICE = 6


def test_deploys_of_one_service_never_overlap_and_start_in_creation_order_across_racing_instances(
    fleet: Cluster, api: TaskApi, tmp_path: Path
) -> None:
    """Two services' deploys created at once (a thread per service, through nginx), the first of each
    held until the waiting ones were read through every instance; then they run, three workers racing."""
    notes, release = tmp_path / "journal", tmp_path / "release"

    def create_all(service: str) -> list[str]:
        created = []
        for n in range(DEPLOYS_PER_SERVICE):
            hold = {"release": str(release)} if n == 0 else {"hold_s": 0.05}
            created.append(api.create(fleet.url, "deploy", deploy_args(notes, service, f"{service}-{n}", **hold)))
        return [task["taskId"] for task in created]

    with ThreadPoolExecutor(len(SERVICES)) as pool:
        task_ids = dict(zip(SERVICES, pool.map(create_all, SERVICES), strict=True))
    wait_for(lambda: len(started(journal(notes))) == len(SERVICES), WAIT_S, message=lambda: str(journal(notes)))
    for service in SERVICES:
        last = task_ids[service][-1]
        for server in fleet.servers:  # whichever instance a poll lands on says the same
            task = api.get(server.url, last)
            assert task["status"] == "working", task
            ahead = DEPLOYS_PER_SERVICE - 2
            assert task["statusMessage"] == f"waiting for another deploy of {service} ({ahead} ahead)", task
    assert sorted(started(journal(notes))) == [f"{service}-0" for service in SERVICES]  # the rest wait
    release.touch()
    tasks = ended_tasks(api, fleet, [task_id for ids in task_ids.values() for task_id in ids])
    seen = journal(notes)
    handoffs = [
        later.at - earlier.at
        for service in SERVICES
        for earlier, later in itertools.pairwise(note for note in seen if note.key == service)
        if earlier.event == "end"
    ]
    pids = {note.pid for note in seen}
    print(f"\nruns by {len(pids)} instances; end-to-next-start of one service: "
          f"max {max(handoffs):.3f} s, mean {sum(handoffs) / len(handoffs):.3f} s")  # fmt: skip
    assert [task["status"] for task in tasks] == ["completed"] * len(tasks), tasks
    for service in SERVICES:
        assert most_at_once(seen, service) == 1, seen
        # Each started once, after the one before ended, in the order created: start, end, start, end...
        runs = [(note.event, note.label) for note in seen if note.key == service]
        expected = [(event, f"{service}-{n}") for n in range(DEPLOYS_PER_SERVICE) for event in ("start", "end")]
        assert runs == expected, runs
    assert len(pids) > 1, "one instance ran every deploy: the instances did not race"


RENDER_TASKS = 8


def test_a_tools_runs_never_pass_its_concurrency_over_the_fleet(fleet: Cluster, api: TaskApi, tmp_path: Path) -> None:
    """Renders (two at once) created from several threads at once through nginx: never more than two
    running over the fleet, at times two, all done."""
    notes = tmp_path / "journal"
    labels = [f"render-{n}" for n in range(RENDER_TASKS)]

    def create(label: str) -> str:
        task_id: str = api.create(fleet.url, "render", {"journal": str(notes), "label": label, "hold_s": 0.1})["taskId"]
        return task_id

    with ThreadPoolExecutor(4) as pool:
        task_ids = list(pool.map(create, labels))
    tasks = ended_tasks(api, fleet, task_ids)
    seen = journal(notes)
    assert [task["status"] for task in tasks] == ["completed"] * RENDER_TASKS, tasks
    assert sorted(started(seen)) == sorted(labels), seen  # each ran once
    assert most_at_once(seen, "render") == RENDERS, seen


def test_a_cancelled_deploy_waiting_or_running_lets_the_next_one_go(
    fleet: Cluster, api: TaskApi, tmp_path: Path
) -> None:
    """A service's deploy running (held) and the one after it waiting are cancelled, each through
    another instance: the third starts without waiting for the first's release, and once the first
    stopped; the one cancelled while it waited never runs."""
    notes = tmp_path / "journal"
    held = {"release": str(tmp_path / "never")}
    running, waiting, last = (
        api.create(fleet.url, "deploy", deploy_args(notes, "cancelled", label, **more))["taskId"]
        for label, more in (("running", held), ("waiting", {}), ("last", {}))
    )
    wait_for(lambda: started(journal(notes)) == ["running"], WAIT_S, message=lambda: str(journal(notes)))
    assert api.get(fleet.servers[0].url, last)["statusMessage"] == "waiting for another deploy of cancelled (1 ahead)"
    for task_id, server in ((waiting, fleet.servers[1]), (running, fleet.servers[2])):
        assert "result" in api.message(server.url, "tasks/cancel", {"taskId": task_id})
    cancelled_at = time.monotonic()
    tasks = ended_tasks(api, fleet, [running, waiting, last])
    seen = journal(notes)
    print(f"\ncancelled to the next start: {seen[-2].at - cancelled_at:.3f} s")
    assert [task["status"] for task in tasks] == ["cancelled", "cancelled", "completed"], tasks
    runs = [(note.event, note.label) for note in seen]
    assert runs == [("start", "running"), ("end", "running"), ("start", "last"), ("end", "last")], runs


# --- 2. a principal's cap and creation rate ----------------------------------------------------------


def create_paced(api: TaskApi, url: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """Create a task as a well-behaved client does: past the creation rate, again after ``Retry-After``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        params = {"name": tool, "arguments": dict(arguments)}
        response, message = post(api.client, url, "tools/call", params, capabilities=CAPABILITIES)
        if response.status_code != 429:
            task_id: str = message["result"]["taskId"]
            api.history.acknowledged(task_id)
            return task_id
        assert time.monotonic() < deadline, message
        time.sleep(float(response.headers["Retry-After"]))


ALICE_TASKS = 5


def test_a_principals_runs_never_pass_its_cap_over_the_fleet_while_another_principals_run_starts_at_once(
    capped_fleet: Cluster, tmp_path: Path
) -> None:
    notes, release = tmp_path / "journal", tmp_path / "release"
    fleet = capped_fleet
    with apis("alice", "bob") as as_:
        alice, bob = as_["alice"], as_["bob"]
        held = {"journal": str(notes), "release": str(release)}
        mine = [create_paced(alice, fleet.url, "work", {**held, "label": f"alice-{n}"}) for n in range(ALICE_TASKS)]
        wait_for(lambda: len(started(journal(notes))) == CAP, WAIT_S, message=lambda: str(journal(notes)))
        tasks = [alice.get(fleet.url, task_id) for task_id in mine]
        said = f"waiting: {CAP} tasks of this caller already running"
        waiting = [task for task in tasks if task.get("statusMessage", "").startswith(said)]
        assert len(waiting) == ALICE_TASKS - CAP, tasks
        assert all(task["status"] == "working" for task in tasks), tasks
        theirs = create_paced(bob, fleet.url, "work", {**held, "label": "bob-0"})
        wait_for(lambda: "bob-0" in started(journal(notes)), WAIT_S, message=lambda: str(journal(notes)))
        # Bob's run started while Alice's runs past her cap still waited (none of hers was let go yet).
        assert len([label for label in started(journal(notes)) if label.startswith("alice")]) == CAP
        release.touch()
        tasks = ended_tasks(alice, fleet, mine) + ended_tasks(bob, fleet, [theirs])
    seen = journal(notes)
    alices = [note for note in seen if note.label.startswith("alice")]
    print(f"\nalice's runs by pid: {sorted({note.pid for note in alices})}")
    assert [task["status"] for task in tasks] == ["completed"] * len(tasks), tasks
    assert sorted(started(alices)) == [f"alice-{n}" for n in range(ALICE_TASKS)]
    assert most_at_once(alices, "work") == CAP, seen


def test_the_creation_rate_is_one_bucket_over_the_fleet_and_each_principals_own(
    capped_fleet: Cluster, tmp_path: Path
) -> None:
    """Carol's burst through each instance in turn: the one past it is refused, on whichever instance;
    Dave, at the same moment, is not; Carol is again after ``Retry-After``."""
    fleet = capped_fleet
    arguments = {"journal": str(tmp_path / "journal"), "label": "quick"}
    params = {"name": "work", "arguments": arguments}
    with apis("carol", "dave") as as_:
        carol, dave = as_["carol"], as_["dave"]
        replies = [
            post(
                carol.client, fleet.servers[n % len(fleet.servers)].url, "tools/call", params, capabilities=CAPABILITIES
            )
            for n in range(BURST + 1)
        ]
        theirs = create_paced(dave, fleet.url, "work", arguments)  # the same moment, another principal
        created = [message["result"]["taskId"] for response, message in replies if response.status_code == 200]
        for task_id in created:
            carol.history.acknowledged(task_id)
        refused, message = replies[-1]
        assert [response.status_code for response, _ in replies] == [200] * BURST + [429], replies
        assert message["error"]["code"] == LIMIT_EXCEEDED, message
        retry_after = message["error"]["data"]["retryAfterSeconds"]
        assert message["error"]["data"] == {"limit": "create_rate", "retryAfterSeconds": retry_after}, message
        assert 1 <= retry_after <= 1 / RATE_PER_S
        assert refused.headers["Retry-After"] == str(retry_after)
        time.sleep(retry_after)  # what the refusal asks of a client: then one creation more is allowed
        again, message = post(carol.client, fleet.url, "tools/call", params, capabilities=CAPABILITIES)
        assert again.status_code == 200, message
        created.append(message["result"]["taskId"])
        carol.history.acknowledged(created[-1])
        # The fleet is left idle for the tests after.
        tasks = ended_tasks(carol, fleet, created) + ended_tasks(dave, fleet, [theirs])
    assert [task["status"] for task in tasks] == ["completed"] * len(tasks), tasks


# --- 3. a worker killed while it holds a service's place ----------------------------------------------


# On the cluster only (its own fleet, ~15 s a store): the place's lapse and the take-over are the
# store's contract on every store (tests/contract/test_gates.py); the fleet adds the kill itself.
@pytest.fixture(params=("valkey-cluster",))
def store(request: pytest.FixtureRequest) -> str | None:
    return store_url_for(request, request.param)


def test_a_place_held_by_a_killed_instance_comes_back_with_the_lease_and_no_deploy_is_lost_or_overlaps(
    store: str | None, api: TaskApi, tmp_path: Path
) -> None:
    """The first deploy of a service holds its place on instance X; a second waits; X is SIGKILLed.
    Which of the two runs first after is not promised: the second, at the front of the line, enters as
    soon as the dead holder's place lapses (a lease after X's last renewal), while the first's run comes
    back only when a survivor reclaims it (its own lease), and waits its turn if the second holds the
    place by then (most often: the crash count must survive that wait). Both hold until ``release``, so
    the test sees one of them hold while the other waits, whichever it is."""
    notes, release = tmp_path / "journal", tmp_path / "release"
    env = {"EXT_TASKS_LEASE_S": str(LEASE_S)}
    (directory := tmp_path / "fleet").mkdir()
    with running_cluster(directory, tools=TOOLS, env=env, valkey_url=store) as cluster:
        first = api.create(cluster.url, "deploy", deploy_args(notes, "billing", "first", release=str(release)))
        wait_for(lambda: started(journal(notes)) == ["first"], WAIT_S, message=lambda: str(journal(notes)))
        holder = journal(notes)[0].pid
        second = api.create(cluster.url, "deploy", deploy_args(notes, "billing", "second", release=str(release)))
        for server in cluster.servers:
            task = api.get(server.url, second["taskId"])
            assert task["statusMessage"] == "waiting for another deploy of billing", task
        os.kill(holder, signal.SIGKILL)
        killed_at = time.monotonic()
        survivors = wait_for(lambda: cluster.alive() if len(cluster.alive()) == 2 else None, WAIT_S)
        task_ids = {"first": first["taskId"], "second": second["taskId"]}

        def one_holds_and_the_other_waits() -> str | None:
            holding = started(journal(notes)[1:])
            if not holding:
                return None
            other = api.get(survivors[0].url, task_ids["second" if holding[0] == "first" else "first"])
            return holding[0] if other.get("statusMessage") == "waiting for another deploy of billing" else None

        went_first = wait_for(one_holds_and_the_other_waits, WAIT_S, message=lambda: str(journal(notes)))
        assert len(started(journal(notes)[1:])) == 1, journal(notes)  # the other still waits
        release.touch()
        tasks = ended_tasks(api, cluster, list(task_ids.values()), survivors[0].url)
    seen = journal(notes)
    after_kill = seen[1:]
    print(f"\n{went_first} went first after the kill: "
          f"{[(n.event, n.label, n.pid, round(n.at - killed_at, 3)) for n in after_kill]}")  # fmt: skip
    assert [task["status"] for task in tasks] == ["completed", "completed"], tasks  # nothing lost
    # Run again, its first run counted as interrupted (also when its second run waited in line first).
    assert tasks[0]["_meta"][RUN_ATTEMPTS] == 2, tasks[0]
    assert seen[0].label == "first" and seen[0].event == "start"
    assert sorted(started(after_kill)) == ["first", "second"], seen  # each run once more, no more
    assert all(note.pid != holder for note in after_kill), seen  # by survivors
    # Never at the same time: nothing started before the holder died, and the runs after took turns.
    assert all(note.at > killed_at for note in after_kill), seen
    assert most_at_once(after_kill, "billing") == 1, seen
    assert [note.event for note in after_kill] == ["start", "end", "start", "end"], seen
    # The place came back with the lease: not before (the holder renewed it every third of a lease until
    # it died), and soon after (the waiting run tries again every second at the front; a survivor looks
    # for runs to reclaim about as often).
    assert LEASE_S * 2 / 3 - 0.1 <= after_kill[0].at - killed_at <= LEASE_S + 1 + SLACK_S, seen
