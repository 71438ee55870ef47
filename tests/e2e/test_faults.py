"""Faults, with real processes on loopback and a real Valkey (issue 6, part 1).

- **Valkey restart** (AOF, ``appendfsync always``) while tasks run: every task a client got a
  ``CreateTaskResult`` for reaches a terminal state and stays readable; none is lost.
- **Valkey unreachable**: requests that need the store fail fast with a well-formed JSON-RPC -32603
  (HTTP 503, no traceback in the body); requests that do not need it still succeed; when Valkey is
  back, service resumes by itself, without restarting the server (``/readyz`` says 503, then 200).
- **Cancellation after a Valkey restart**: ``tasks/cancel`` still stops the running coroutine (the
  worker's cancellation subscription survives the restart).
- **SIGTERM**: a server with a short ``EXT_TASKS_SHUTDOWN_GRACE_S`` exits within grace + a margin;
  a short run finishes on it within the grace; its unfinished runs are handed back to the queue at
  once (not left for the lease to lapse), so a worker started afterwards finishes them; it takes no new
  run while stopping; no run is stranded.

Every test prints its figures (with or without ``-s``). Every process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from valkey import Valkey

from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.store.ids import PARTITION_TAGS
from ext_tasks.store.valkey.keys import KeySchema
from tests.support.cluster import fleet_env, keygen, running_servers, running_worker, wait_for
from tests.support.mcp_http import modern_request, parse_reply
from tests.support.processes import ServerProcess, stop
from tests.support.valkey import ValkeyServer, start_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.fault_tools"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CAPABILITIES: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
TERMINAL = frozenset({"completed", "failed", "cancelled"})
PID = re.compile(r"\bpid (\d+)\b")
#: AOF on, fsync'd on every write: what the deployment guide recommends for the task store.
AOF_ARGS = ("--appendfsync", "always")

# Valkey restart
RESTART_TASKS = 30
RESTART_DOWNTIME_S = 1.5
RESTART_TIMEOUT_S = 60.0

# Valkey unreachable
FAIL_FAST_S = 3.0
OUTAGE_PROBES = 3
RECOVERY_TIMEOUT_S = 15.0

# Cancellation after a restart
CANCEL_LONG_S = 20.0
CANCEL_STOPS_WITHIN_S = 5.0

# SIGTERM
GRACE_S = 2.0
SHUTDOWN_MARGIN_S = 3.0
LONG_TASKS = 6
LONG_SLEEP_S = 8.0
SHORT_SLEEP_S = 1.2
#: Long enough that only a hand-back (not a lapsed lease) can explain a quick takeover.
SIGTERM_LEASE_S = 60


@dataclass
class Reply:
    """One HTTP exchange: status, elapsed time, raw body and the JSON-RPC message (``None`` if none)."""

    status: int
    elapsed_s: float
    body: str
    message: dict[str, Any] | None

    @property
    def result(self) -> dict[str, Any] | None:
        if self.message is None or "result" not in self.message:
            return None
        result: dict[str, Any] = self.message["result"]
        return result


class Api:
    """Raw 2026-07-28 requests declaring the tasks extension (``tests.support.mcp_http``)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def send(self, url: str, method: str, params: Mapping[str, Any]) -> Reply:
        headers, body = modern_request(method, params, capabilities=CAPABILITIES)
        started = time.monotonic()
        response = self.client.post(url, headers=headers, json=body)
        elapsed = time.monotonic() - started
        try:
            message: dict[str, Any] | None = parse_reply(response)
        except (ValueError, AssertionError):
            message = None
        return Reply(response.status_code, elapsed, response.text, message)

    def create(self, url: str, seconds: float) -> Reply:
        return self.send(url, "tools/call", {"name": "sleepy", "arguments": {"seconds": seconds}})

    def get(self, url: str, task_id: str) -> dict[str, Any]:
        """The ``DetailedTask`` of ``tasks/get`` (asserted to succeed)."""
        reply = self.send(url, "tasks/get", {"taskId": task_id})
        assert reply.status == 200, f"tasks/get {task_id}: HTTP {reply.status} {reply.body}"
        task = reply.result
        assert task is not None, f"tasks/get {task_id}: {reply.body}"
        assert task["taskId"] == task_id, task
        return task


def task_id_of(reply: Reply) -> str | None:
    """The task id of a ``CreateTaskResult``, or ``None`` if the reply is anything else."""
    result = reply.result
    if reply.status != 200 or result is None or result.get("resultType") != "task":
        return None
    task_id = result.get("taskId")
    return task_id if isinstance(task_id, str) and task_id else None


def result_text(task: Mapping[str, Any]) -> str:
    content = task["result"]["content"]
    assert isinstance(content, list), task
    assert content, task
    text: str = content[0]["text"]
    return text


def pid_in(text: object) -> int | None:
    match = PID.search(text) if isinstance(text, str) else None
    return int(match[1]) if match else None


def assert_store_error(reply: Reply, what: str) -> None:
    """A well-formed, clear JSON-RPC -32603, fast, with no traceback text, as HTTP 503."""
    assert reply.elapsed_s < FAIL_FAST_S, f"{what}: took {reply.elapsed_s:.2f}s (limit {FAIL_FAST_S}s)"
    assert reply.status == 503, f"{what}: HTTP {reply.status} {reply.body}"
    assert reply.message is not None, f"{what}: not JSON-RPC: {reply.body!r}"
    assert reply.message.get("jsonrpc") == "2.0", reply.body
    assert "id" in reply.message, reply.body
    error = reply.message.get("error")
    assert isinstance(error, dict), reply.body
    assert error.get("code") == INTERNAL_ERROR, reply.body
    message = error.get("message")
    assert isinstance(message, str), reply.body
    assert "store" in message.lower(), f"{what}: the message does not say what is wrong: {reply.body}"
    for leak in ("Traceback", 'File "', "valkey.exceptions", "ConnectionError", "Errno"):
        assert leak not in reply.body, f"{what}: internal detail {leak!r} in the body: {reply.body}"


@contextlib.contextmanager
def aof_valkey(directory: Path) -> Iterator[list[ValkeyServer]]:
    """A persistent Valkey; the list holds the current process (a test may replace it after a restart).
    Whatever process is current at the end is stopped by PID."""
    current = [start_valkey(directory, appendonly=True, extra_args=AOF_ARGS)]
    try:
        yield current
    finally:
        stop(current[0].process)


def restart_in_place(current: list[ValkeyServer], downtime_s: float) -> tuple[float, float]:
    """SIGTERM Valkey (a clean shutdown: the AOF is flushed), wait ``downtime_s``, start it again on the
    same port and directory. Returns (seconds to stop, seconds down in total)."""
    old = current[0]
    down_at = time.monotonic()
    stop(old.process)
    stopped_in = time.monotonic() - down_at
    assert old.process.returncode == 0, f"valkey-server exited with {old.process.returncode} on SIGTERM"
    time.sleep(downtime_s)
    current[0] = start_valkey(old.directory, port=old.port, appendonly=True, extra_args=AOF_ARGS)
    return stopped_in, time.monotonic() - down_at


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Print a test's figures so that CI logs show them, with or without ``-s``."""
    with capsys.disabled():
        print(text)


def server_logs(*servers: ServerProcess) -> str:
    return "\n".join(f"--- server pid {server.process.pid}\n{server.log()[-5000:]}" for server in servers)


# --- Valkey restart while tasks run ------------------------------------------------------------------


@dataclass
class Creator:
    """Creates a sleepy task every ``interval_s`` in a thread, recording which ones were acknowledged."""

    api: Api
    url: str
    interval_s: float = 0.05
    acknowledged: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        index = 0
        while not self._stop.is_set():
            index += 1
            try:
                reply = self.api.create(self.url, 1.0 + (index % 4) * 0.5)
            except httpx.TransportError as exc:
                self.refused[f"transport {type(exc).__name__}"] += 1
            else:
                task_id = task_id_of(reply)
                if task_id is not None:
                    self.acknowledged.append(task_id)
                else:
                    code = (reply.message or {}).get("error", {}).get("code")
                    self.refused[f"HTTP {reply.status} {code}"] += 1
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()


def test_valkey_restart_loses_no_acknowledged_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = fleet_env(keygen(), {"EXT_TASKS_LEASE_S": "2"})
    with (
        aof_valkey(tmp_path / "valkey") as valkey,
        running_servers(tmp_path, count=1, tools=TOOLS, valkey=valkey[0], env=env) as (server,),
        httpx.Client(timeout=10.0) as client,
    ):
        api = Api(client)
        # A first batch, running (1 to 4 s) when Valkey goes down ...
        batch = [api.create(server.url, 1.0 + (index % 7) * 0.5) for index in range(RESTART_TASKS)]
        first = [task_id for task_id in map(task_id_of, batch) if task_id is not None]
        assert len(first) == RESTART_TASKS, [reply.body for reply in batch if task_id_of(reply) is None]
        # ... and a stream of creations before, during and after the restart.
        with httpx.Client(timeout=10.0) as creator_client:
            creator = Creator(Api(creator_client), server.url)
            thread = threading.Thread(target=creator.run, name="creator", daemon=True)
            thread.start()
            time.sleep(0.5)
            before = [api.get(server.url, task_id)["status"] for task_id in [*first, *creator.acknowledged]]
            in_flight = sum(status not in TERMINAL for status in before)
            stopped_in, downtime = restart_in_place(valkey, RESTART_DOWNTIME_S)
            back_at = time.monotonic()
            time.sleep(2.0)
            creator.stop()
            thread.join(timeout=30)
            assert not thread.is_alive()
        acknowledged = first + creator.acknowledged
        assert len(set(acknowledged)) == len(acknowledged), "a task id was acknowledged twice"

        outcomes: dict[str, dict[str, Any]] = {}

        def all_terminal() -> bool:
            for task_id in acknowledged:
                if task_id in outcomes:
                    continue
                reply = api.send(server.url, "tasks/get", {"taskId": task_id})
                task = reply.result
                if task is not None and task.get("status") in TERMINAL:
                    outcomes[task_id] = task
            return len(outcomes) == len(acknowledged)

        def missing() -> str:
            lines = []
            for task_id in acknowledged:
                if task_id not in outcomes:
                    lines.append(f"{task_id}: {api.send(server.url, 'tasks/get', {'taskId': task_id}).body}")
            return "\n".join(lines[:20]) + "\n" + server_logs(server)

        wait_for(all_terminal, RESTART_TIMEOUT_S, interval_s=0.25, message=missing)
        settled_in = time.monotonic() - back_at
        statuses = Counter(task["status"] for task in outcomes.values())
        report(
            capsys,
            f"\nValkey restart (AOF, appendfsync always): stopped by SIGTERM in {stopped_in:.2f}s, down "
            f"{downtime:.2f}s; tasks acknowledged {len(acknowledged)} ({len(first)} in a first batch, "
            f"{len(creator.acknowledged)} by a stream of creations around the restart), {in_flight} of them "
            f"unfinished when Valkey stopped; creations refused during the outage {sum(creator.refused.values())} "
            f"{dict(creator.refused)}; terminal {len(outcomes)}, lost {len(acknowledged) - len(outcomes)}; "
            f"statuses {dict(statuses)}; all terminal {settled_in:.1f}s after Valkey was back",
        )
        # Refusals during the outage are well-formed 503s, never anything else.
        assert set(creator.refused) <= {f"HTTP 503 {INTERNAL_ERROR}"}, dict(creator.refused)
        assert statuses == Counter({"completed": len(acknowledged)}), (statuses, missing())
        for task_id, task in outcomes.items():
            assert result_text(task).startswith("slept "), (task_id, task)
        # Readable again after the fact (the record is durable, not only a cached answer).
        for task_id in acknowledged[:: max(1, len(acknowledged) // 10)]:
            assert api.get(server.url, task_id)["status"] == "completed"


# --- Valkey unreachable --------------------------------------------------------------------------------


def test_valkey_unreachable_fails_fast_and_service_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = fleet_env(keygen(), {"EXT_TASKS_LEASE_S": "2"})
    with (
        aof_valkey(tmp_path / "valkey") as valkey,
        running_servers(tmp_path, count=1, tools=TOOLS, valkey=valkey[0], env=env) as (server,),
        httpx.Client(timeout=30.0) as client,
    ):
        api = Api(client)
        done_id = task_id_of(api.create(server.url, 0.1))
        assert done_id is not None
        wait_for(lambda: api.get(server.url, done_id)["status"] == "completed", 10.0, message="first task done")
        running_id = task_id_of(api.create(server.url, 2.0))
        assert running_id is not None

        old = valkey[0]
        stop(old.process)
        down_at = time.monotonic()
        timings: dict[str, list[float]] = {}
        store_requests: list[tuple[str, str, dict[str, Any]]] = [
            ("tools/call (task)", "tools/call", {"name": "sleepy", "arguments": {"seconds": 0.1}}),
            ("tasks/get", "tasks/get", {"taskId": done_id}),
            ("tasks/update", "tasks/update", {"taskId": running_id, "inputResponses": {}}),
            ("tasks/cancel", "tasks/cancel", {"taskId": running_id}),
        ]
        storeless_requests: list[tuple[str, str, dict[str, Any]]] = [
            ("server/discover", "server/discover", {}),
            ("tools/list", "tools/list", {}),
            ("tools/call (inline)", "tools/call", {"name": "echo", "arguments": {"text": "still here"}}),
        ]
        for probe in range(OUTAGE_PROBES):
            for label, method, params in store_requests:
                reply = api.send(server.url, method, params)
                timings.setdefault(label, []).append(reply.elapsed_s)
                assert_store_error(reply, f"{label} #{probe + 1} with Valkey down")
            for label, method, params in storeless_requests:
                reply = api.send(server.url, method, params)
                timings.setdefault(label, []).append(reply.elapsed_s)
                assert reply.status == 200, f"{label} with Valkey down: HTTP {reply.status} {reply.body}"
                assert reply.result is not None, reply.body
                assert reply.result["resultType"] == "complete", reply.body
            time.sleep(1.0)  # let the worker loops meet the outage too
        assert server.process.poll() is None, "the server died while Valkey was down\n" + server_logs(server)
        readyz = server.url.removesuffix("/mcp") + "/readyz"
        assert client.get(readyz).status_code == 503, "readiness must fail while the task store is unreachable"

        valkey[0] = start_valkey(old.directory, port=old.port, appendonly=True, extra_args=AOF_ARGS)
        back_at = time.monotonic()

        def created() -> str | None:
            return task_id_of(api.create(server.url, 0.2))

        new_id = wait_for(created, RECOVERY_TIMEOUT_S, interval_s=0.2, message=lambda: server_logs(server))
        accepting_after = time.monotonic() - back_at

        def completed(task_id: str) -> bool:
            return bool(api.get(server.url, task_id)["status"] == "completed")

        wait_for(lambda: completed(new_id), RECOVERY_TIMEOUT_S, interval_s=0.2, message=lambda: server_logs(server))
        new_done_after = time.monotonic() - back_at
        # The task that was running through the outage, and the one finished before it, are fine too.
        wait_for(lambda: completed(running_id), RECOVERY_TIMEOUT_S, interval_s=0.2, message=lambda: server_logs(server))
        assert api.get(server.url, done_id)["status"] == "completed"
        assert client.get(readyz).status_code == 200
        worst = {label: f"{max(values) * 1000:.0f}ms" for label, values in timings.items()}
        report(
            capsys,
            f"\nValkey unreachable for {back_at - down_at:.1f}s: worst latency per request {worst}; after Valkey "
            f"returned: a task was accepted in {accepting_after:.2f}s and completed in {new_done_after:.2f}s, "
            f"with the same server process (pid {server.process.pid})",
        )


def test_cancel_still_stops_a_run_after_a_valkey_restart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``tasks/cancel`` stops the running coroutine on whichever instance runs it, also once Valkey was
    restarted under that instance. With one run slot, a cancelled run that kept running would hold the
    slot: the next task would wait for it instead of starting at once."""
    env = fleet_env(keygen(), {"EXT_TASKS_LEASE_S": "2", "EXT_TASKS_RUN_CONCURRENCY": "1"})
    with (
        aof_valkey(tmp_path / "valkey") as valkey,
        running_servers(tmp_path, count=1, tools=TOOLS, valkey=valkey[0], env=env) as (server,),
        httpx.Client(timeout=10.0) as client,
    ):
        api = Api(client)

        def slot_freed_by_cancel() -> float:
            long_id = task_id_of(api.create(server.url, CANCEL_LONG_S))
            assert long_id is not None
            wait_for(lambda: api.get(server.url, long_id).get("statusMessage"), 10.0, message="long run started")
            cancelled = api.send(server.url, "tasks/cancel", {"taskId": long_id})
            assert cancelled.result is not None, cancelled.body
            started = time.monotonic()
            short_id = task_id_of(api.create(server.url, 0.1))
            assert short_id is not None
            wait_for(
                lambda: api.get(server.url, short_id)["status"] == "completed",
                CANCEL_LONG_S + 10.0,
                interval_s=0.1,
                message=lambda: server_logs(server),
            )
            assert api.get(server.url, long_id)["status"] == "cancelled"
            return time.monotonic() - started

        before = slot_freed_by_cancel()
        restart_in_place(valkey, 1.0)
        # Let the server's connections meet the restart (its worker polls the queue every second).
        wait_for(lambda: task_id_of(api.create(server.url, 0.1)), 10.0, interval_s=0.2, message="store back")
        time.sleep(2.0)
        after = slot_freed_by_cancel()
        report(
            capsys,
            f"\ncancel frees the run slot in {before:.2f}s before a Valkey restart and {after:.2f}s after it "
            f"(a cancelled run left running would hold it {CANCEL_LONG_S:g}s)",
        )
        assert before < CANCEL_STOPS_WITHIN_S, before
        assert after < CANCEL_STOPS_WITHIN_S, (
            f"after a Valkey restart the cancelled run kept its slot for {after:.1f}s: cancellations no longer "
            f"reach the running coroutine\n{server_logs(server)}"
        )


# --- SIGTERM -------------------------------------------------------------------------------------------


def test_sigterm_finishes_short_runs_and_hands_back_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = fleet_env(keygen(), {"EXT_TASKS_SHUTDOWN_GRACE_S": f"{GRACE_S:g}", "EXT_TASKS_LEASE_S": str(SIGTERM_LEASE_S)})
    frontend_env = {**env, "EXT_TASKS_NO_WORKERS": "true"}
    with (
        aof_valkey(tmp_path / "valkey") as valkey,
        running_servers(tmp_path, count=1, tools=TOOLS, valkey=valkey[0], env=env) as (victim,),
        running_servers(tmp_path, count=1, tools=TOOLS, valkey=valkey[0], env=frontend_env) as (front,),
    ):
        victim_pid = victim.process.pid
        with httpx.Client(timeout=10.0) as client:
            api = Api(client)
            long_ids = [task_id_of(api.create(victim.url, LONG_SLEEP_S)) for _ in range(LONG_TASKS)]
            assert all(long_ids), long_ids
            long_tasks = [task_id for task_id in long_ids if task_id is not None]
            short_id = task_id_of(api.create(victim.url, SHORT_SLEEP_S))
            assert short_id is not None

            def running_on_victim() -> bool:
                return all(
                    pid_in(api.get(front.url, task_id).get("statusMessage")) == victim_pid
                    for task_id in [*long_tasks, short_id]
                )

            wait_for(running_on_victim, 10.0, message=lambda: server_logs(victim))

        # No client connection stays open to the victim: its shutdown waits for nothing but the runs.
        signalled_at = time.monotonic()
        os.kill(victim_pid, signal.SIGTERM)
        with httpx.Client(timeout=10.0) as client:
            api = Api(client)
            # A run queued while the victim stops must not be taken by it.
            during_grace = task_id_of(api.create(front.url, 0.5))
            assert during_grace is not None
            try:
                victim.process.wait(timeout=GRACE_S + SHUTDOWN_MARGIN_S + 10)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the server did not exit after SIGTERM\n{server_logs(victim)}")
            exited_in = time.monotonic() - signalled_at
            assert exited_in <= GRACE_S + SHUTDOWN_MARGIN_S, (
                f"exit took {exited_in:.2f}s, grace {GRACE_S}s\n{server_logs(victim)}"
            )
            assert victim.process.returncode == 0, server_logs(victim)

            short = api.get(front.url, short_id)
            assert short["status"] == "completed", (short, server_logs(victim))
            assert pid_in(result_text(short)) == victim_pid, short
            for task_id in long_tasks:
                task = api.get(front.url, task_id)
                assert task["status"] == "working", task
            assert api.get(front.url, during_grace)["status"] == "working"

            # Nothing is held by the dead consumer: every unfinished run is back in the queue.
            prefix = env["EXT_TASKS_VALKEY_PREFIX"]
            keys = KeySchema(prefix)
            pending = 0
            queued: list[dict[str, str]] = []
            with Valkey(host="127.0.0.1", port=valkey[0].port, decode_responses=True) as inspect:
                for partition in PARTITION_TAGS:
                    stream = keys.runs(partition)
                    pending += inspect.xpending(stream, keys.run_group)["pending"]
                    # Waiting for a worker: the entries after the last one the group delivered.
                    (group,) = inspect.xinfo_groups(stream)
                    queued += [fields for _, fields in inspect.xrange(stream, min=f"({group['last-delivered-id']}")]
            assert pending == 0, pending
            queued_ids = sorted(fields["task"] for fields in queued)
            assert queued_ids == sorted([*long_tasks, during_grace]), queued

            worker_started = time.monotonic()
            with running_worker(tmp_path, tools=TOOLS, valkey=valkey[0], env=env) as worker:
                outcomes: dict[str, dict[str, Any]] = {}

                def all_done() -> bool:
                    for task_id in [*long_tasks, during_grace]:
                        task = api.get(front.url, task_id)
                        if task["status"] in TERMINAL:
                            outcomes[task_id] = task
                    return len(outcomes) == LONG_TASKS + 1

                wait_for(
                    all_done,
                    LONG_SLEEP_S + 15.0,
                    interval_s=0.25,
                    message=lambda: f"{outcomes}\n{worker.log()[-4000:]}",
                )
                finished_in = time.monotonic() - worker_started
                worker_pid = worker.process.pid
        for task_id, task in outcomes.items():
            assert task["status"] == "completed", task
            assert pid_in(result_text(task)) == worker_pid, (task_id, task)
        # Taken over at once, not after the lease (60 s) would have let a worker reclaim them.
        assert finished_in < SIGTERM_LEASE_S / 2, finished_in
        report(
            capsys,
            f"\nSIGTERM with EXT_TASKS_SHUTDOWN_GRACE_S={GRACE_S:g}: exited in {exited_in:.2f}s; the short run "
            f"({SHORT_SLEEP_S:g}s) completed on the same pid; {LONG_TASKS} long runs ({LONG_SLEEP_S:g}s) handed "
            f"back (0 pending on the dead consumer), plus 1 run queued during the grace left untouched; a worker "
            f"started afterwards finished all {len(outcomes)} in {finished_in:.1f}s (lease {SIGTERM_LEASE_S}s); "
            f"stranded 0",
        )
