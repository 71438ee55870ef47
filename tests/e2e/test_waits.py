"""Long waits (``subscriptions/listen``, a legacy session's GET stream, a legacy ``tasks/result``) against
real servers: what each wait holds, and that it ends with its client.

* 60 legacy ``tasks/result`` waits whose clients drop the connection without reading end, and the
  server's Valkey connections come back to where they were (``ext_tasks_open_waits`` back to 0);
* 20 GET streams and 20 listens of one process share its pub/sub connections (at most 2 in pub/sub
  mode), each counts as one wait, every one of them still delivers, and all end when closed;
* ``EXT_TASKS_MAX_WAITS`` caps the waits of each principal: the 4th of any kind answers 429 +
  ``Retry-After`` + -31429 (``max_waits``), another principal is unaffected, and a closed wait frees its
  place;
* legacy ``tasks/get``/``tasks/list`` of a sensitive task read its status only: the result is still
  there after the grace period, and the sensitive lifetime starts with ``tasks/result``;
* the GET stream relays tool-list changes and updates of the resources the session subscribed to (and,
  after ``resources/unsubscribe``, no more);
* a GET stream that renews its listen while changes are in flight keeps exactly one.

Servers: one ``ext-tasks serve`` on its own valkey-server (the only client of that Valkey besides the
test's own connection, so every other entry of ``CLIENT LIST`` is that server's), and one with the
memory store, two bearer tokens and a cap of 3 waits.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import httpx
import pytest
from valkey import Valkey

from ext_tasks.protocol.errors import INVALID_PARAMS, LIMIT_EXCEEDED
from tests.e2e.waits_tools import OTHER, WATCHED
from tests.support.cluster import fleet_env, keygen, running_servers, wait_for
from tests.support.legacy import WAIT_S, Session, SseReader, Stream, close_all
from tests.support.mcp_http import modern_request
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import ValkeyServer, running_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.waits_tools"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
GRACE_MS = 1500
#: Keep-alives every half second (a reader thread the test stops sees its stop flag at once), and a short
#: shutdown grace (a test that failed may leave a task running; the server then stops quickly anyway).
QUICK = {"EXT_TASKS_KEEPALIVE_S": "0.5", "EXT_TASKS_SHUTDOWN_GRACE_S": "1"}
DROPPED_WAITS = 60
#: Extra Valkey connections the server may keep after a burst (its bounded pools may have grown a little).
CONNECTION_SLACK = 3
TOKENS = {"alice": "tokA", "bob": "tokB"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(tmp_path_factory.mktemp("waits-valkey")) as running:
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, store: ValkeyServer) -> Iterator[ServerProcess]:
    """One instance on its own Valkey; a sensitive result lives ``GRACE_MS`` once retrieved."""
    env = fleet_env(keygen(), {**QUICK, "EXT_TASKS_SENSITIVE_GRACE_MS": str(GRACE_MS)})
    tmp = tmp_path_factory.mktemp("waits-server")
    with running_servers(tmp, count=1, tools=TOOLS, valkey=store, env=env) as (instance,):
        yield instance


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The memory store, bearer tokens of alice and bob, and at most 3 open waits per principal."""
    tokens = ",".join(f"{token}={principal}" for principal, token in TOKENS.items())
    env = {**QUICK, "EXT_TASKS_MAX_WAITS": "3", "EXT_TASKS_TOKENS": tokens}
    with running_server(tmp_path_factory.mktemp("waits-capped"), tools=TOOLS, env=env) as running:
        yield running


@pytest.fixture
def valkey_client(store: ValkeyServer) -> Iterator[Valkey]:
    with Valkey(host="127.0.0.1", port=store.port, decode_responses=True) as client:
        yield client


# --- what the server shows -------------------------------------------------------------------------


def metrics(server: ServerProcess) -> str:
    return httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10.0).text


def sample(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The sum of the samples of ``name`` whose labels include ``labels`` (``None`` if there is none)."""
    found: list[float] = []
    for match in re.finditer(rf"^{re.escape(name)}(?:\{{(.*?)\}})? (\S+)$", text, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1) or ""))
        if all(have.get(key) == value for key, value in (labels or {}).items()):
            found.append(float(match.group(2)))
    return sum(found) if found else None


def open_waits(server: ServerProcess) -> float | None:
    return sample(metrics(server), "ext_tasks_open_waits")


def waits_back_to_zero(server: ServerProcess) -> None:
    seen: list[float | None] = []

    def zero() -> bool:
        seen.append(open_waits(server))
        return seen[-1] == 0

    wait_for(zero, WAIT_S, interval_s=0.1, message=lambda: f"ext_tasks_open_waits 0 (last seen: {seen[-1:]})")


def server_clients(client: Valkey) -> list[dict[str, Any]]:
    """``CLIENT LIST`` without the test's own connection: the server's connections."""
    own = client.client_id()
    entries = cast(list[dict[str, Any]], client.client_list())
    return [entry for entry in entries if str(entry["id"]) != str(own)]


def in_pubsub_mode(entry: Mapping[str, Any]) -> bool:
    channels = sum(int(entry.get(field) or 0) for field in ("sub", "psub", "ssub"))
    return "P" in str(entry.get("flags", "")) or channels > 0


# --- requests --------------------------------------------------------------------------------------


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def listen(url: str, task_ids: Sequence[str] = (), *, token: str | None = None) -> SseReader:
    """A ``subscriptions/listen`` for tool-list changes (and ``task_ids``), read in a thread."""
    wanted: dict[str, Any] = {"toolsListChanged": True}
    if task_ids:
        wanted["taskIds"] = list(task_ids)
    headers, body = modern_request(
        "subscriptions/listen", {"notifications": wanted}, capabilities={"extensions": {TASKS_EXTENSION: {}}}
    )
    return SseReader(url, "POST", {**headers, **bearer(token)}, body)


def acknowledged(stream: SseReader) -> dict[str, Any]:
    assert stream.status == 200 and stream.streaming, (stream.status, _final_or_none(stream))
    ack = stream.next_notification()
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    return ack


def tasks_result_body(task_id: str, request_id: str = "wait") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tasks/result", "params": {"taskId": task_id}}


def task_reads(server: ServerProcess) -> float:
    """How many ``tasks/get`` the server answered (a waiting legacy ``tasks/result`` reads its task
    through one before it waits, and again at each poll)."""
    return sample(metrics(server), "ext_tasks_requests_total", {"method": "tasks/get"}) or 0.0


def waiting_tasks_result(server: ServerProcess, session: Session, task_id: str) -> socket.socket:
    """A connection that sent one complete legacy ``tasks/result`` POST (and reads nothing), returned once
    the server has read the task for it: its wait has begun."""
    reads = task_reads(server)
    body = json.dumps(tasks_result_body(task_id)).encode()
    headers = {
        "Host": f"127.0.0.1:{server.port}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **session.headers,
        "Content-Length": str(len(body)),
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=10.0)
    connection.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + body)
    try:
        wait_for(lambda: task_reads(server) > reads, WAIT_S, interval_s=0.02, message="the wait reading its task")
    except BaseException:
        connection.close()
        raise
    return connection


def _final_or_none(stream: SseReader) -> dict[str, Any] | None:
    try:
        return stream.final.get_nowait()
    except queue.Empty:
        return None


def assert_wait_refused(stream: SseReader, request_id: object = None) -> int:
    """The wait was refused past the cap: HTTP 429, ``Retry-After``, -31429 with ``limit: max_waits``.
    Returns the ``Retry-After`` seconds."""
    assert stream.ready.wait(WAIT_S), "no answer"
    assert stream.status == 429, f"HTTP {stream.status}, a stream: {stream.streaming}"
    assert stream.response_headers is not None
    retry_after = int(stream.response_headers["retry-after"])
    assert retry_after >= 1
    message = stream.final.get(timeout=WAIT_S)
    error = message["error"]
    assert error["code"] == LIMIT_EXCEEDED, error
    assert error["data"]["limit"] == "max_waits", error
    assert error["data"]["retryAfterSeconds"] == retry_after
    if request_id is not None:
        assert message["id"] == request_id
    return retry_after


def refused_listen(url: str, token: str) -> int:
    stream = listen(url, token=token)
    try:
        return assert_wait_refused(stream)
    finally:
        stream.close()


def drain(stream: SseReader) -> list[dict[str, Any]]:
    seen = []
    with contextlib.suppress(queue.Empty):
        while True:
            seen.append(stream.notifications.get_nowait())
    return seen


def until_list_change(stream: SseReader) -> list[dict[str, Any]]:
    """The stream's notifications up to and including the next tool-list change."""
    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["method"] != "notifications/tools/list_changed":
        seen.append(stream.next_notification())
    return seen


def settled(stream: SseReader, quiet_s: float = 1.0) -> list[dict[str, Any]]:
    """The stream's notifications until none came for ``quiet_s``."""
    seen: list[dict[str, Any]] = []
    with contextlib.suppress(queue.Empty):
        while True:
            seen.append(stream.next_notification(quiet_s))
    return seen


def until_notified(
    streams: Sequence[SseReader],
    trigger: Callable[[], object],
    wanted: Callable[[dict[str, Any]], bool],
    *,
    seen: list[dict[str, Any]] | None = None,
    rounds_s: float = 1.0,
    timeout_s: float = WAIT_S,
) -> int:
    """Call ``trigger()`` until every stream got a notification for which ``wanted(message)`` holds (a
    stream's subscription may become live a moment after it opened); returns the number of triggers.
    The notifications read on the way are added to ``seen``."""
    seen = [] if seen is None else seen
    pending = set(range(len(streams)))
    triggers = 0
    deadline = time.monotonic() + timeout_s
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} of {len(streams)} streams never notified"
        trigger()
        triggers += 1
        round_end = time.monotonic() + rounds_s
        while pending and time.monotonic() < round_end:
            for index in list(pending):
                arrived = drain(streams[index])
                seen.extend(arrived)
                if any(wanted(message) for message in arrived):
                    pending.discard(index)
            time.sleep(0.02)
    return triggers


def listens_opened(server: ServerProcess) -> float:
    """How many ``subscriptions/listen`` the server opened, its own included: a GET stream follows what the
    session asked for through one, opened anew (the previous one cancelled) when that changes."""
    return sample(metrics(server), "ext_tasks_requests_total", {"method": "subscriptions/listen"}) or 0.0


@contextlib.contextmanager
def renewal(server: ServerProcess) -> Iterator[None]:
    """Wait, after the block, until the server opened one more listen (the GET stream's renewed one is
    live), so that nothing the test triggers next is in flight while the stream renews."""
    opened = listens_opened(server)
    yield
    wait_for(lambda: listens_opened(server) > opened, WAIT_S, message="the GET stream's listen renewed")


class Triggers:
    """What the test makes happen on the server, through tool calls of a legacy session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def toggle(self) -> None:
        assert "result" in self.session.call("tools/call", {"name": "toggle_tool", "arguments": {}})

    def touch(self, *uris: str) -> None:
        for uri in uris:
            assert "result" in self.session.call("tools/call", {"name": "touch_resource", "arguments": {"uri": uri}})


LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}


def list_changed(message: dict[str, Any]) -> bool:
    return bool(message["method"] == "notifications/tools/list_changed")


def updated(uri: str) -> Callable[[dict[str, Any]], bool]:
    return lambda message: message["method"] == "notifications/resources/updated" and message["params"] == {"uri": uri}


# --- 1. dropped legacy tasks/result waits ----------------------------------------------------------


def test_dropped_legacy_result_waits_end_and_valkey_connections_stay_bounded(
    server: ServerProcess, valkey_client: Valkey
) -> None:
    session = Session(server.url)
    task_id = session.start_task("slow", {"seconds": 600})
    try:
        wait_for(lambda: session.status(task_id) == "working", WAIT_S)
        before = len(server_clients(valkey_client))
        counts = [before]
        for _ in range(DROPPED_WAITS):
            waiting_tasks_result(server, session, task_id).close()  # gone, without reading a byte
            counts.append(len(server_clients(valkey_client)))
        most = max(counts)

        def back_to_before() -> bool:
            counts.append(len(server_clients(valkey_client)))
            return counts[-1] <= before + CONNECTION_SLACK

        try:
            wait_for(back_to_before, WAIT_S, interval_s=0.2, message="Valkey connections back to where they were")
        finally:
            print(
                f"\n{DROPPED_WAITS} dropped legacy tasks/result waits: Valkey clients before={before} "
                f"most while dropping={most} after={counts[-1]}"
            )
        waits_back_to_zero(server)
        print(f"ext_tasks_open_waits after: {open_waits(server)}")
        assert session.status(task_id) == "working"  # a client going away does not cancel the task
    finally:
        session.call("tasks/cancel", {"taskId": task_id})
        session.close()


# --- 2. one pub/sub connection for every wait ------------------------------------------------------


def test_get_streams_and_listens_share_the_processes_pubsub_connections(
    server: ServerProcess, valkey_client: Valkey
) -> None:
    sessions = [Session(server.url) for _ in range(4)]
    task_ids = [session.start_task("slow", {"seconds": 600}) for session in sessions]
    waits_before = open_waits(server)
    get_streams = [Stream(session) for session in sessions for _ in range(5)]
    listens = [listen(server.url, task_ids) for _ in range(20)]
    try:
        for stream in listens:
            assert set(acknowledged(stream)["params"]["notifications"]["taskIds"]) == set(task_ids)
        assert all(stream.status == 200 and stream.streaming for stream in get_streams)
        entries = server_clients(valkey_client)
        pubsub = [entry for entry in entries if in_pubsub_mode(entry)]
        waits = open_waits(server)
        print(
            f"\n20 GET streams + 20 listens: {len(pubsub)} Valkey connections in pub/sub mode "
            f"(of {len(entries)}), open waits {waits_before} -> {waits}"
        )
        assert len(pubsub) <= 2, [(entry["id"], entry["flags"], entry.get("sub")) for entry in pubsub]
        assert waits == (waits_before or 0) + 40  # each stream is one wait, no more

        # Sharing a connection loses nothing: every stream still hears what it follows.
        toggles = until_notified([*get_streams, *listens], Triggers(sessions[0]).toggle, list_changed)
        for session, task_id in zip(sessions, task_ids, strict=True):
            assert session.call("tasks/cancel", {"taskId": task_id})["result"]["status"] == "cancelled"
        for stream in listens:  # each listen follows all four tasks
            cancelled: set[str] = set()

            def all_cancelled(stream: SseReader = stream, cancelled: set[str] = cancelled) -> bool:
                for message in drain(stream):
                    if message["method"] == "notifications/tasks" and message["params"]["status"] == "cancelled":
                        cancelled.add(message["params"]["taskId"])
                return cancelled == set(task_ids)

            wait_for(all_cancelled, WAIT_S, message="all four cancellations on every listen")
        print(f"every stream notified ({toggles} tool-list change(s)); all 4 cancellations on all 20 listens")
    finally:
        close_all([*get_streams, *listens])
        for session, task_id in zip(sessions, task_ids, strict=True):
            session.call("tasks/cancel", {"taskId": task_id})  # (already cancelled unless the test failed)
            session.close()
    waits_back_to_zero(server)


# --- 3. a cap on the waits of each principal -------------------------------------------------------


def test_a_principal_past_its_waits_cap_is_refused_with_429_and_others_are_not(capped: ServerProcess) -> None:
    alice = Session(capped.url, token=TOKENS["alice"])
    bob = Session(capped.url, token=TOKENS["bob"])
    alice_task = alice.start_task("slow", {"seconds": 600})
    bob_task = bob.start_task("slow", {"seconds": 600})
    held: list[SseReader] = []
    waiting: socket.socket | None = None
    try:
        # Alice's three places: a listen, a GET stream and a waiting tasks/result.
        held.append(listen(capped.url, [alice_task], token=TOKENS["alice"]))
        acknowledged(held[0])
        held.append(Stream(alice))
        assert held[1].status == 200 and held[1].streaming
        waiting = waiting_tasks_result(capped, alice, alice_task)

        # The 4th, of any kind, is refused.
        retry_after = refused_listen(capped.url, TOKENS["alice"])
        refused_get = Stream(alice)
        assert_wait_refused(refused_get)
        refused_get.close()
        refused_result = Stream(alice, "POST", tasks_result_body(alice_task, "alice-4th"))
        assert_wait_refused(refused_result, "alice-4th")
        refused_result.close()
        assert open_waits(capped) == 3  # a refused wait holds nothing

        # Bob's waits are his own.
        held.append(listen(capped.url, [bob_task], token=TOKENS["bob"]))
        acknowledged(held[-1])
        held.append(Stream(bob))
        assert held[-1].status == 200 and held[-1].streaming

        # Closing one of alice's frees a place: her next wait opens, and the one after is refused again.
        waiting.close()
        waiting = None
        refusals = 0

        def reopened() -> SseReader | None:
            nonlocal refusals
            attempt = listen(capped.url, [alice_task], token=TOKENS["alice"])
            if attempt.status == 200:
                return attempt
            attempt.close()
            refusals += 1
            return None

        again = wait_for(reopened, WAIT_S, interval_s=0.1, message="alice's wait after she closed one")
        held.append(again)
        acknowledged(again)
        refused_listen(capped.url, TOKENS["alice"])
        print(
            f"\ncap 3: alice's 4th listen, GET stream and tasks/result each answered 429 (Retry-After "
            f"{retry_after}s, -31429 max_waits); bob opened 2 waits; after alice dropped her tasks/result her "
            f"next listen opened ({refusals} refusals before), and the one after was refused"
        )
    finally:
        if waiting is not None:
            waiting.close()
        close_all(held)
        for session, task_id in ((alice, alice_task), (bob, bob_task)):
            session.call("tasks/cancel", {"taskId": task_id})
            session.close()
    waits_back_to_zero(capped)


# --- 4. legacy status reads leave a sensitive result alone -----------------------------------------


def test_legacy_status_reads_do_not_use_up_a_sensitive_result(server: ServerProcess) -> None:
    session = Session(server.url)
    task_id = session.start_task("secret_report", {"label": "q3"})
    reads = 0

    def completed() -> dict[str, Any] | None:
        nonlocal reads
        reads += 1
        task: dict[str, Any] = session.call("tasks/get", {"taskId": task_id})["result"]
        return task if task["status"] == "completed" else None

    task = wait_for(completed, WAIT_S, interval_s=0.1)
    for _ in range(3):
        reads += 1
        again = session.call("tasks/get", {"taskId": task_id})["result"]
        assert again["status"] == "completed" and again["ttl"] == task["ttl"]
    listed = session.call("tasks/list", {})["result"]["tasks"]
    assert [entry["status"] for entry in listed if entry["taskId"] == task_id] == ["completed"]

    time.sleep(GRACE_MS / 1000 + 1.0)  # longer than the grace period
    delivered_at = time.monotonic()
    result = session.call("tasks/result", {"taskId": task_id})
    assert "result" in result, result
    assert result["result"]["content"][0]["text"] == "the secret of q3"
    assert result["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert task["ttl"] > 10 * GRACE_MS  # the status reads left the task its whole life

    # The real delivery starts the sensitive lifetime: the task is gone within the grace period.
    def gone() -> dict[str, Any] | None:
        answer = session.call("tasks/get", {"taskId": task_id})
        return answer.get("error")

    error = wait_for(gone, GRACE_MS / 1000 + 5.0, interval_s=0.1, message="the task gone after tasks/result")
    elapsed = time.monotonic() - delivered_at
    print(
        f"\nsensitive task: {reads} legacy tasks/get + 1 tasks/list, waited {GRACE_MS / 1000 + 1.0:g}s, "
        f"tasks/result delivered; gone {elapsed:.2f}s later ({error['message']!r})"
    )
    assert error["code"] == INVALID_PARAMS
    assert elapsed >= GRACE_MS / 1000 - 0.5
    session.close()


# --- 5. the GET stream relays list changes and resource updates ------------------------------------


def test_the_legacy_get_stream_relays_list_changes_and_resource_updates(server: ServerProcess) -> None:
    session = Session(server.url)
    capabilities = session.initialized["capabilities"]
    assert capabilities["tools"]["listChanged"] is True
    assert capabilities["resources"]["subscribe"] is True
    trigger = Triggers(session)
    stream = Stream(session)
    try:
        # (Its listen may go live a moment after the stream opened: toggle until the change is relayed.)
        toggles = until_notified([stream], trigger.toggle, list_changed)

        with renewal(server):
            assert session.call("resources/subscribe", {"uri": WATCHED})["result"] == {}
        seen: list[dict[str, Any]] = []
        touches = until_notified([stream], lambda: trigger.touch(OTHER, WATCHED), updated(WATCHED), seen=seen)
        seen.extend(drain(stream))
        assert not any(updated(OTHER)(message) for message in seen), seen  # only what the session subscribed to

        with renewal(server):
            assert session.call("resources/unsubscribe", {"uri": WATCHED})["result"] == {}
        # Rounds of "touch both resources, then change the tool list": the list change closes a round.
        for _ in range(3):
            trigger.touch(WATCHED, OTHER)
            trigger.toggle()
            assert until_list_change(stream) == [LIST_CHANGED]
        print(
            f"\nGET stream: tools/list_changed after {toggles} toggle(s); resources/updated after "
            f"{touches} touch(es); after unsubscribe, 3 rounds of touches and a list change: only the list change"
        )
    finally:
        stream.close()
    session.close()


# --- renewals while changes flow (a bug found here: wait_for swallowed the cancel on 3.11) ----------------


def test_a_get_stream_renewed_while_changes_flow_keeps_one_subscription(
    server: ServerProcess, valkey_client: Valkey
) -> None:
    session = Session(server.url)
    task_id = session.start_task("slow", {"seconds": 600})  # so the stream's listens watch a task
    trigger = Triggers(session)
    try:
        with renewal(server):
            stream = Stream(session)
        try:
            for _ in range(10):  # renewals with changes in flight, as a busy session has them
                assert session.call("resources/subscribe", {"uri": WATCHED})["result"] == {}
                trigger.touch(WATCHED)
                assert session.call("resources/unsubscribe", {"uri": WATCHED})["result"] == {}
                trigger.touch(WATCHED)
            settled(stream)
            trigger.toggle()
            told = [*until_list_change(stream), *settled(stream)]  # (a duplicate comes right behind)
            print(f"\none tool-list change after 20 renewals: {sum(map(list_changed, told))} list_changed")
            assert told == [LIST_CHANGED]
        finally:
            stream.close()

        # With no stream left, nothing of the server follows task events any more.
        def channels() -> dict[str, int]:
            names = cast(list[str], valkey_client.pubsub_channels())
            numbers = cast(list[tuple[str, int]], valkey_client.pubsub_numsub(*names)) if names else []
            return {name: count for name, count in numbers if name.endswith(":task-events") and count}

        wait_for(lambda: not channels(), 5.0, message=lambda: f"task-events still subscribed: {channels()}")
    finally:
        session.call("tasks/cancel", {"taskId": task_id})
        session.close()
