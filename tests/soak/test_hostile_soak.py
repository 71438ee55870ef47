"""Soak with hostile clients: the well-behaved mixed load of ``test_soak`` (``tests.soak.support.Load``)
on two instances sharing one Valkey, and beside it, for the whole run:

- **dropped legacy waits**: a 2025-11-25 session keeps one long task (``slow_compute``, 600 s, renewed
  every ``ROTATE_S``: tasks live 60 s here) while raw connections send a complete ``tasks/result`` for
  it and go away without reading, and GET streams of the session are opened and dropped (every other
  one after reading its head, which must be 200 ``text/event-stream``);
- **stalled bodies**: ``STALLED_AT_ONCE`` raw connections at any time announce ``Content-Length: 1000``,
  send 10 bytes and stall; each must be answered 408 and closed once ``EXT_TASKS_BODY_TIMEOUT_S``
  (2 s here) has passed;
- **oversized listens**: ``subscriptions/listen`` (well formed, tasks extension declared) with 1001 ids,
  or about 1 MB of ids (4000 ids; 1000 ids of 1000 characters), refused with -32602 (HTTP 200); bodies
  over ``EXT_TASKS_MAX_BODY_BYTES`` (sent chunked up to just past the limit, or only announced by
  ``Content-Length``), refused with 413 and the connection closed;
- **what a request may make a server hold** (:mod:`tests.soak.bounded_attacks`): inline streams left
  unread, task arguments and answers over their bounds, a 1,000,000-character status message, a legacy
  task's ``ttl`` of 10**15, and costly listens from another principal flooding past its budget.

It passes when the well-behaved clients see nothing but the answers they asked for; every hostile
request got its expected refusal, and every kind was exercised; each server's resident memory stays
within the bound of the first soak (sampled through the run); once the hostile clients stop, every wait
has ended (``ext_tasks_open_waits`` back to 0 on both instances) and Valkey holds as many client
connections as after warm-up, give or take ``VALKEY_CLIENTS_SLACK`` (and never more than the bound
docs/deploy.md gives).

Every client but the listen flooder sends one token, so all share one principal; the hostile load stays
well under the per-principal caps, which keep their defaults: one legacy session
(``EXT_TASKS_MAX_SESSIONS`` 100), and dropped waits end with their connection (``EXT_TASKS_MAX_WAITS``
256 per process; the peak is printed). The flooder is a principal of its own, so its paced refusals say
nothing about the oversized listens of the shared one, which must still be refused for what they are.

CI runs it for 30 s (the default). On demand: ``EXT_TASKS_HOSTILE_SOAK_SECONDS=600 bash scripts/soak.sh``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from valkey.asyncio import Valkey

from ext_tasks.protocol.errors import INVALID_PARAMS, INVALID_REQUEST
from tests.soak.bounded_attacks import AUTH, TOKENS, BoundedAttacks
from tests.soak.support import CAPS, CONCURRENCY, Load, rss_mib, rss_problems, running_pair, warmup_s
from tests.support.mcp_http import modern_request, parse_reply
from tests.support.processes import ServerProcess
from tests.support.valkey import ValkeyServer

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("EXT_TASKS_HOSTILE_SOAK_SECONDS", "30"))
WARMUP_S = warmup_s(SECONDS)
BODY_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 4 * 1024 * 1024  # the default, set explicitly so the over-limit bodies stay over it
STALLED_AT_ONCE = 20
STALLED_PREFIX = b'{"jsonrpc"'  # 10 of the 1000 bytes announced
WAIT_DROPPERS = 2
ROTATE_S = 15.0
LISTEN_PAUSE_S = 0.1
VALKEY_CLIENTS_SLACK = 10
# docs/deploy.md: per process, at most EXT_TASKS_VALKEY_MAX_CONNECTIONS (64) per store (tasks, legacy
# sessions) and one pub/sub connection per store; two processes, plus this test's own connection.
VALKEY_DOCUMENTED_BOUND = 2 * 2 * (64 + 1) + 1
SETTLE_TIMEOUT_S = 30.0
REFUSAL_LIMIT_S = 5.0  # a listen refused, or a stalled body answered past its timeout, within this
ANSWER_TIMEOUT_S = 30.0
LEGACY = "2025-11-25"
ENV = {
    "EXT_TASKS_BODY_TIMEOUT_S": f"{BODY_TIMEOUT_S:g}",
    "EXT_TASKS_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
    "EXT_TASKS_TOKENS": TOKENS,
}
TOOLS = "tests.soak.soak_tools"

_ids = itertools.count(1_000_000)


def request_head(method: str, port: int, headers: Mapping[str, str], length: int | None = None) -> bytes:
    lines = [f"{method} /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def status_of(answer: bytes) -> int:
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def error_code_of(answer: bytes) -> object:
    """The JSON-RPC error code in a raw HTTP answer with a JSON body (``None`` if there is none)."""
    _, _, body = answer.partition(b"\r\n\r\n")
    try:
        return json.loads(body).get("error", {}).get("code")
    except (ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class ListenKind:
    name: str
    body: bytes
    refusal: str  # the outcome expected: "HTTP <status> <JSON-RPC error code>"
    chunked: bool = False
    announce_only: int = 0  # > 0: only headers announcing this Content-Length are sent (raw socket)


def listen_body(task_ids: list[str]) -> tuple[dict[str, str], bytes]:
    headers, body = modern_request("subscriptions/listen", {"notifications": {"taskIds": task_ids}}, capabilities=CAPS)
    return {**headers, **AUTH}, json.dumps(body).encode()


def listen_kinds() -> tuple[dict[str, str], list[ListenKind]]:
    headers, over_1000 = listen_body([f"t{index}" for index in range(1001)])
    _, many = listen_body([f"{index:04d}" + "m" * 246 for index in range(4000)])
    _, long_ids = listen_body([f"{index:04d}" + "l" * 996 for index in range(1000)])
    _, over_limit = listen_body([f"{index:06d}" + "o" * 194 for index in range(MAX_BODY_BYTES // 200 + 100)])
    assert len(over_limit) > MAX_BODY_BYTES and 1_000_000 < len(many) < MAX_BODY_BYTES > len(long_ids) > 1_000_000
    return headers, [
        ListenKind("1001 ids", over_1000, f"HTTP 200 {INVALID_PARAMS}"),
        ListenKind(f"{len(many) / 1e6:.1f} MB, 4000 ids", many, f"HTTP 200 {INVALID_PARAMS}"),
        ListenKind(f"{len(long_ids) / 1e6:.1f} MB, 1000 ids of 1000 chars", long_ids, f"HTTP 200 {INVALID_PARAMS}"),
        ListenKind(f"{len(over_limit) / 1e6:.1f} MB chunked", over_limit, f"HTTP 413 {INVALID_REQUEST}", chunked=True),
        ListenKind("Content-Length 5 MiB announced", b"", f"HTTP 413 {INVALID_REQUEST}", announce_only=5 * 1024 * 1024),
    ]


def open_waits(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("ext_tasks_open_waits "):
            return float(line.split()[1])
    raise AssertionError("no ext_tasks_open_waits in /metrics")


async def valkey_clients(store: Valkey) -> tuple[int, dict[str, int]]:
    """How many connections Valkey has (this test's own among them), and how many by last command."""
    connections = await store.client_list()
    return len(connections), dict(Counter(str(each.get("cmd")) for each in connections))


@dataclass
class Hostile:
    servers: list[ServerProcess]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    outcomes: Counter[str] = field(default_factory=Counter)
    listens: dict[str, Counter[str]] = field(default_factory=dict)
    surprises: list[str] = field(default_factory=list)
    stall_s: list[float] = field(default_factory=list)
    refusal_s: list[float] = field(default_factory=list)
    session: str = ""
    long_task: str = ""
    stalled_now: int = 0
    stalled_peak: int = 0

    def __post_init__(self) -> None:
        self._turn = itertools.cycle(range(len(self.servers)))

    def server(self) -> ServerProcess:
        return self.servers[next(self._turn)]

    def surprise(self, kind: str, detail: object) -> None:
        self.surprises.append(f"{kind}: {str(detail)[:400]}")

    def clients(self) -> list[Coroutine[Any, Any, None]]:
        return [
            self.legacy(),
            *(self.drop_results() for _ in range(WAIT_DROPPERS)),
            self.drop_streams(),
            *(self.stall(index) for index in range(STALLED_AT_ONCE)),
            self.oversized_listens(),
        ]

    # --- the legacy session and its long task ----------------------------------------------------

    async def legacy_call(self, client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
        headers = {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": LEGACY}
        try:
            response = await client.post(self.server().url, headers=headers, json=body)
        except httpx.HTTPError as exc:
            self.surprise(f"legacy {method}", repr(exc))
            return {}
        try:
            message = parse_reply(response)
        except (ValueError, AssertionError):
            self.surprise(f"legacy {method}", f"HTTP {response.status_code} {response.text[:300]!r}")
            return {}
        if "result" not in message:
            self.surprise(f"legacy {method}", f"HTTP {response.status_code} {message}")
            return {}
        result: dict[str, Any] = message["result"]
        return result

    async def legacy(self) -> None:
        headers = {"Accept": "application/json, text/event-stream", **AUTH}
        try:
            async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S, headers=headers) as client:
                params = {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "hostile", "version": "0"},
                }
                init = await client.post(
                    self.servers[0].url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
                )
                self.session = init.headers.get("mcp-session-id", "")
                if init.status_code != 200 or not self.session:
                    self.surprise("legacy initialize", f"HTTP {init.status_code} {init.text[:300]}")
                    return
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                note = await client.post(
                    self.servers[1].url,
                    json=initialized,
                    headers={"Mcp-Session-Id": self.session, "MCP-Protocol-Version": LEGACY},
                )
                if note.status_code != 202:
                    self.surprise("legacy notifications/initialized", f"HTTP {note.status_code} {note.text[:300]}")
                await self.keep_long_task(client)
        finally:
            self.ready.set()

    async def keep_long_task(self, client: httpx.AsyncClient) -> None:
        """One long task at a time for the dropped waits; a new one every ``ROTATE_S`` (the old one
        cancelled), since a task lives 60 s here; each is checked still ``working`` before it goes."""
        long_call = {"name": "slow_compute", "arguments": {"seconds": 600}, "task": {}}
        while True:
            created = await self.legacy_call(client, "tools/call", long_call)
            new = str(created.get("task", {}).get("taskId", ""))
            if not new:
                self.surprise("legacy long task", created)
                self.stop.set()
                return
            self.outcomes["long tasks created"] += 1
            old, self.long_task = self.long_task, new
            self.ready.set()
            if old:
                await self.cancel(client, old)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), ROTATE_S)
            task = await self.legacy_call(client, "tasks/get", {"taskId": self.long_task})
            if task.get("status") != "working":
                self.surprise("legacy tasks/get of the long task", task)
            if self.stop.is_set():
                await self.cancel(client, self.long_task)
                return

    async def cancel(self, client: httpx.AsyncClient, task_id: str) -> None:
        cancelled = await self.legacy_call(client, "tasks/cancel", {"taskId": task_id})
        if cancelled.get("status") == "cancelled":
            self.outcomes["long tasks cancelled"] += 1
        else:
            self.surprise("legacy tasks/cancel of the long task", cancelled)

    # --- dropped waits ---------------------------------------------------------------------------

    async def send_and_drop(
        self, kind: str, port: int, data: bytes, delay_s: float, *, read_head: bool = False
    ) -> bytes | None:
        """Send ``data`` on a new connection, optionally read the response head, wait ``delay_s`` and
        close it, never reading the rest. ``None`` (and a surprise) if that could not be done."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), ANSWER_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            self.surprise(kind, f"connect: {exc!r}")
            return None
        try:
            writer.write(data)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_TIMEOUT_S) if read_head else b""
            if delay_s:
                await asyncio.sleep(delay_s)
            return head
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            self.surprise(kind, repr(exc))
            return None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def legacy_headers(self) -> dict[str, str]:
        return {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Session-Id": self.session,
            "MCP-Protocol-Version": LEGACY,
            **AUTH,
        }

    async def drop_results(self) -> None:
        await self.ready.wait()
        delays = itertools.cycle([0.0, 0.0, 0.05, 0.3])
        while not self.stop.is_set() and self.long_task:
            port = self.server().port
            request = {
                "jsonrpc": "2.0",
                "id": next(_ids),
                "method": "tasks/result",
                "params": {"taskId": self.long_task},
            }
            body = json.dumps(request).encode()
            data = request_head("POST", port, self.legacy_headers(), len(body)) + body
            if await self.send_and_drop("tasks/result", port, data, next(delays)) is not None:
                self.outcomes["tasks/result waits dropped"] += 1
            await asyncio.sleep(0.02)

    async def drop_streams(self) -> None:
        await self.ready.wait()
        reading = itertools.cycle([True, False])
        headers = {**self.legacy_headers(), "Accept": "text/event-stream"}
        del headers["Content-Type"]
        while not self.stop.is_set() and self.session:
            port = self.server().port
            read_head = next(reading)
            head = await self.send_and_drop(
                "GET stream", port, request_head("GET", port, headers), 0.05, read_head=read_head
            )
            if head is not None and not read_head:
                self.outcomes["GET streams dropped unread"] += 1
            elif head is not None and status_of(head) == 200 and b"text/event-stream" in head.lower():
                self.outcomes["GET streams dropped after a 200 head"] += 1
            elif head is not None:
                self.surprise("GET stream", head)
            await asyncio.sleep(0.05)

    # --- stalled bodies --------------------------------------------------------------------------

    async def stall(self, index: int) -> None:
        await asyncio.sleep(index * BODY_TIMEOUT_S / STALLED_AT_ONCE)  # spread, so some stall at any moment
        headers, _ = modern_request("ping")
        headers.update(AUTH)
        while not self.stop.is_set():
            port = self.server().port
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), ANSWER_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                self.surprise("stalled body", f"connect: {exc!r}")
                await asyncio.sleep(1)
                continue
            self.stalled_now += 1
            self.stalled_peak = max(self.stalled_peak, self.stalled_now)
            try:
                writer.write(request_head("POST", port, headers, 1000) + STALLED_PREFIX)
                await writer.drain()
                started = time.monotonic()
                answer = await asyncio.wait_for(reader.read(), BODY_TIMEOUT_S + ANSWER_TIMEOUT_S)  # up to EOF
                elapsed = time.monotonic() - started
            except (OSError, TimeoutError) as exc:
                self.surprise("stalled body", repr(exc))
                continue
            finally:
                self.stalled_now -= 1
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            if status_of(answer) == 408 and error_code_of(answer) == INVALID_REQUEST:
                self.outcomes["stalled bodies answered 408 and closed"] += 1
                self.stall_s.append(elapsed)
            else:
                self.surprise("stalled body", f"after {elapsed:.2f}s: {answer[:300]!r}")

    # --- oversized listens -----------------------------------------------------------------------

    async def oversized_listens(self) -> None:
        headers, kinds = listen_kinds()
        async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S) as client:
            for kind in itertools.cycle(kinds):
                if self.stop.is_set():
                    return
                started = time.monotonic()
                outcome = await self.listen(client, headers, kind)
                elapsed = time.monotonic() - started
                self.listens.setdefault(kind.name, Counter())[outcome] += 1
                if outcome == kind.refusal:
                    self.refusal_s.append(elapsed)
                else:
                    self.surprise(f"listen {kind.name}", f"{outcome} (expected {kind.refusal})")
                await asyncio.sleep(LISTEN_PAUSE_S)

    async def listen(self, client: httpx.AsyncClient, headers: dict[str, str], kind: ListenKind) -> str:
        """``"HTTP <status> <JSON-RPC code>"``, or what went wrong instead."""
        port = self.server().port
        if kind.announce_only or kind.chunked:
            if kind.chunked:
                head = request_head("POST", port, {**headers, "Transfer-Encoding": "chunked"})
                pieces = [head, *chunked_past(kind.body, MAX_BODY_BYTES)]
            else:
                pieces = [request_head("POST", port, headers, kind.announce_only)]
            try:
                answer = await exchange(port, pieces)
            except (OSError, TimeoutError) as exc:
                return repr(exc)
            return f"HTTP {status_of(answer)} {error_code_of(answer)}"
        try:
            response = await client.post(f"http://127.0.0.1:{port}/mcp", headers=headers, content=kind.body)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            code = parse_reply(response).get("error", {}).get("code")
        except (ValueError, AssertionError):
            code = f"non-JSON {response.text[:100]!r}"
        return f"HTTP {response.status_code} {code}"


def chunked_past(body: bytes, limit: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """``body`` as HTTP/1.1 chunks, only until just past ``limit`` bytes: the server must refuse it
    from what it read. (Sending on after that races the server's close: the reset can take the 413
    with it, so a raw client stops there and reads.)"""
    for offset in range(0, min(len(body), limit + 1), size):
        piece = body[offset : offset + size]
        yield b"%x\r\n" % len(piece) + piece + b"\r\n"


async def exchange(port: int, pieces: Iterable[bytes]) -> bytes:
    """Send ``pieces`` on a new connection, then read until the server closes it."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), ANSWER_TIMEOUT_S)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
        return await asyncio.wait_for(reader.read(), ANSWER_TIMEOUT_S)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@dataclass
class Figures:
    rss_start: dict[int, float] = field(default_factory=dict)
    rss_peak: dict[int, float] = field(default_factory=dict)
    rss_end: dict[int, float] = field(default_factory=dict)
    waits_peak: dict[int, float] = field(default_factory=dict)
    waits_end: dict[int, float] = field(default_factory=dict)
    valkey_start: int = 0
    valkey_peak: int = 0
    valkey_end: int = 0
    valkey_series: list[tuple[float, int]] = field(default_factory=list)  # (seconds into the run, connections)
    valkey_start_detail: dict[str, int] = field(default_factory=dict)  # connections by last command
    valkey_end_detail: dict[str, int] = field(default_factory=dict)
    settle_s: float = 0.0
    settled: bool = False
    began: float = field(default_factory=time.monotonic)


async def sample(
    client: httpx.AsyncClient, servers: list[ServerProcess], store: Valkey, figures: Figures
) -> dict[int, float]:
    """One look at each server's RSS and open waits and Valkey's client count (peaks kept); the open waits."""
    waits = {}
    for server in servers:
        pid = server.process.pid
        figures.rss_peak[pid] = max(figures.rss_peak.get(pid, 0.0), rss_mib(pid))
        metrics = await client.get(server.url.removesuffix("/mcp") + "/metrics")
        waits[server.port] = open_waits(metrics.text)
        figures.waits_peak[server.port] = max(figures.waits_peak.get(server.port, 0.0), waits[server.port])
    count, figures.valkey_end_detail = await valkey_clients(store)
    figures.valkey_peak = max(figures.valkey_peak, count)
    figures.valkey_end = count
    figures.valkey_series.append((time.monotonic() - figures.began, count))
    return waits


async def soak(valkey: ValkeyServer, servers: list[ServerProcess]) -> tuple[Load, Hostile, Figures]:
    load, hostile, figures = Load(servers, AUTH), Hostile(servers), Figures()
    bounded = BoundedAttacks(servers, hostile.stop)
    store = Valkey.from_url(valkey.url)
    async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S) as client:

        async def monitor() -> None:
            while not hostile.stop.is_set():
                await sample(client, servers, store, figures)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(hostile.stop.wait(), 0.5)

        # Valkey's clients are counted idle, before the load and after it: under load the pools' count
        # swings with the bursts, and an idle pool closes what a burst opened.
        figures.valkey_start, figures.valkey_start_detail = await valkey_clients(store)
        hostile_clients = [asyncio.ensure_future(each) for each in [*hostile.clients(), *bounded.clients()]]
        watching = asyncio.ensure_future(monitor())
        await load.run(WARMUP_S)
        figures.rss_start = {server.process.pid: rss_mib(server.process.pid) for server in servers}
        await load.run(SECONDS - WARMUP_S)
        hostile.stop.set()
        await asyncio.gather(*hostile_clients, watching)
        # Settle: every wait ended and the Valkey connections back near where they were (polled).
        started = time.monotonic()
        while True:
            figures.waits_end = await sample(client, servers, store, figures)
            figures.settle_s = time.monotonic() - started
            figures.settled = not any(figures.waits_end.values()) and (
                abs(figures.valkey_end - figures.valkey_start) <= VALKEY_CLIENTS_SLACK
            )
            if figures.settled or figures.settle_s > SETTLE_TIMEOUT_S:
                break
            await asyncio.sleep(0.2)
        figures.rss_end = {server.process.pid: rss_mib(server.process.pid) for server in servers}
    await store.aclose()
    hostile.outcomes.update(bounded.outcomes)
    hostile.surprises += bounded.surprises
    return load, hostile, figures


@pytest.fixture(scope="module")
def hostile_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ValkeyServer, list[ServerProcess]]]:
    with running_pair(tmp_path_factory.mktemp("hostile-soak"), ENV, tools=TOOLS) as pair:
        yield pair


def every_tenth(series: list[tuple[float, int]]) -> str:
    picked = series[:: max(1, len(series) // 10)] + series[-1:]
    return ", ".join(f"{count} at {at:.0f}s" for at, count in picked)


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    return f"min {min(values):.2f}s, p50 {statistics.median(values):.2f}s, max {max(values):.2f}s"


def test_hostile_clients_beside_the_mixed_load_change_nothing_for_it(
    hostile_pair: tuple[ValkeyServer, list[ServerProcess]],
) -> None:
    valkey, servers = hostile_pair
    load, hostile, figures = asyncio.run(soak(valkey, servers))

    listens = {name: dict(outcomes) for name, outcomes in hostile.listens.items()}
    rss = {
        pid: f"{figures.rss_start[pid]:.1f} -> peak {figures.rss_peak[pid]:.1f} -> {figures.rss_end[pid]:.1f} MiB"
        for pid in figures.rss_start
    }
    waits = {
        port: f"peak {figures.waits_peak[port]:g}, after {figures.waits_end[port]:g}" for port in figures.waits_end
    }
    print(
        f"hostile soak {SECONDS:.0f}s, {CONCURRENCY} clients: {dict(load.done)}; "
        f"hostile: {dict(hostile.outcomes)}; open waits {waits}; "
        f"stalled bodies (<= {hostile.stalled_peak} at once) answered 408 in {spread(hostile.stall_s)}; "
        f"listens refused {listens} in {spread(hostile.refusal_s)}; "
        f"Valkey clients {figures.valkey_start} -> peak {figures.valkey_peak} -> {figures.valkey_end} "
        f"(settled in {figures.settle_s:.1f}s); RSS {rss}; "
        f"unexpected {len(load.unexpected)}, hostile surprises {len(hostile.surprises)}"
    )
    for line in [*load.unexpected[:20], *hostile.surprises[:20]]:
        print("  ", line)

    assert load.unexpected == []
    assert sum(load.done.values()) > 0
    assert hostile.surprises == []
    for kind in (
        "long tasks created",
        "long tasks cancelled",
        "tasks/result waits dropped",
        "GET streams dropped unread",
        "GET streams dropped after a 200 head",
        "stalled bodies answered 408 and closed",
        *BoundedAttacks.expected_kinds(),
    ):
        assert hostile.outcomes[kind] > 0, f"{kind}: never happened ({dict(hostile.outcomes)})"
    assert max(figures.waits_peak.values()) > 0, "no wait was ever seen open"
    assert set(listens) == {kind.name for kind in listen_kinds()[1]}, listens
    assert min(hostile.stall_s) >= BODY_TIMEOUT_S - 0.25, spread(hostile.stall_s)
    assert max(hostile.stall_s) <= BODY_TIMEOUT_S + REFUSAL_LIMIT_S, spread(hostile.stall_s)
    assert max(hostile.refusal_s) <= REFUSAL_LIMIT_S, spread(hostile.refusal_s)
    assert not any(figures.waits_end.values()), f"waits still open {SETTLE_TIMEOUT_S}s after the clients went: {waits}"
    assert rss_problems(figures.rss_start, figures.rss_peak) == [], rss
    assert figures.valkey_peak <= VALKEY_DOCUMENTED_BOUND, every_tenth(figures.valkey_series)
    assert abs(figures.valkey_end - figures.valkey_start) <= VALKEY_CLIENTS_SLACK, (
        f"Valkey clients {figures.valkey_start} before the load, {figures.valkey_end} {SETTLE_TIMEOUT_S:g}s after the "
        f"load stopped; by last command {figures.valkey_start_detail} -> {figures.valkey_end_detail}; over the run: "
        f"{every_tenth(figures.valkey_series)}"
    )
