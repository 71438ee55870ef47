"""Nothing a client does makes the server keep more than a bound: the memory stores are swept, sessions
keep only what the shim uses, and listens, stored tasks, sessions and results are capped.

In process, with controlled clocks; the Valkey side of the same caps is in ``tests/contract``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from ext_tasks import Context, Principal, ToolRegistry, elicit
from ext_tasks.auth import Caller
from ext_tasks.engine import Engine
from ext_tasks.options import LegacyOptions, TaskOptions, WorkerOptions
from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, LIMIT_EXCEEDED
from ext_tasks.protocol.jsonrpc import encode
from ext_tasks.protocol.params import MAX_LISTEN_TASK_IDS, MAX_WATCHED_ID_CHARS
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.replies import JsonReply, StreamReply
from ext_tasks.store.base import TOMBSTONE_MS, IdempotencyClaim
from ext_tasks.store.ceilings import within_ceiling
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from migration.sessions import LegacySession, MemorySessionStore
from migration.shim import LegacyShim, ShimOptions
from migration.upstream import EngineUpstream
from tests.support.mcp_http import modern_request

pytestmark = pytest.mark.anyio

DECLARING: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
ALICE = Principal("alice")
KEY = b"bounds-test-key".ljust(32, b"!")


class Clock:
    def __init__(self, start: float = 1_800_000_000_000) -> None:
        self.now = start

    def ms(self) -> int:
        return int(self.now)

    def s(self) -> float:
        return self.now / 1000


def registry() -> ToolRegistry:
    tools = ToolRegistry("bounds", version="1.0.0")

    @tools.tool(task="required")
    async def job() -> str:
        return "done"

    @tools.tool(task="required")
    async def huge(size: int) -> str:
        return "x" * size

    @tools.tool(task="required")
    async def ask(ctx: Context) -> str:
        answer = ctx.ask({"name": elicit("Name?", {"type": "object", "properties": {"name": {"type": "string"}}})})
        return str((answer["name"].content or {}).get("name"))

    return tools


def engine_over(store: MemoryTaskStore, clock: Clock, **options: Any) -> Engine:
    tasks = TaskMethods(store, TaskOptions(**options), clock_ms=clock.ms)
    return Engine(registry(), ResumeCodec([KEY], audience="bounds"), tasks=tasks)


async def send(engine: Engine, method: str, params: dict[str, Any]) -> JsonReply | StreamReply:
    headers, body = modern_request(method, params, capabilities=DECLARING)
    lowered = {name.lower(): [value] for name, value in headers.items()}
    with anyio.fail_after(5):
        return await engine.handle(json.dumps(body).encode(), lowered, ALICE)


def record(task_id: str, now_ms: int, ttl_ms: int = 60_000) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        owner="alice",
        tool="job",
        arguments={},
        status=TaskStatus.WORKING,
        version=1,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        ttl_ms=ttl_ms,
        poll_interval_ms=250,
    )


# --- the memory task store is swept -------------------------------------------------------------------


async def test_the_memory_task_store_forgets_everything_that_lapsed() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock_ms=clock.ms)
    for n in range(200):
        claim = IdempotencyClaim(key=f"idem-{n}", fingerprint="f", window_ms=30_000)
        await store.create(record(f"t-{n}", clock.ms()), claim)
        assert await store.claim(f"state:{n}", 10_000)
    assert store.sizes()["records"] == 200
    clock.now += 61_000  # every task has expired, no one has looked them up since
    store.sweep()
    sizes = store.sizes()
    assert (sizes["records"], sizes["tombstones"], sizes["idempotency"], sizes["claims"]) == (0, 200, 0, 0)
    assert (await store.lookup("t-7")).__class__.__name__ == "Expired"  # still told "expired", not "not found"
    clock.now += TOMBSTONE_MS
    store.sweep()
    assert store.sizes() == dict.fromkeys(sizes, 0)
    assert await store.lookup("t-7") is None


def test_a_ceiling_keeps_the_entries_that_lapse_last() -> None:
    entries = {f"k{n}": (f"value {n}", float(n)) for n in range(10)}
    kept = within_ceiling(entries, 3)
    assert sorted(kept) == ["k7", "k8", "k9"]
    assert within_ceiling(entries, 10) is entries


# --- legacy sessions: swept, trimmed, capped -------------------------------------------------------------


def make_shim(sessions: MemorySessionStore, max_sessions: int = 100) -> LegacyShim:
    engine = Engine(registry(), ResumeCodec([KEY], audience="bounds"))
    options = ShimOptions(
        server_info={"name": "bounds", "version": "1"}, legacy=LegacyOptions(max_sessions=max_sessions)
    )
    return LegacyShim(EngineUpstream(engine), sessions, engine.core.codec, options)


async def initialize(shim: LegacyShim, capabilities: Any, principal: str = "alice") -> tuple[int, dict[str, Any]]:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": capabilities,
        "clientInfo": {"name": "c", "version": "1"},
    }
    body = encode({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    reply = await shim.post(body, {}, Caller(Principal(principal)))
    assert isinstance(reply, JsonReply) and reply.message is not None
    return reply.status, {**reply.wire, "headers": reply.headers}


async def test_a_session_keeps_only_the_capabilities_the_shim_uses() -> None:
    sessions = MemorySessionStore()
    shim = make_shim(sessions)
    junk = {f"x-{n}": {"blob": "y" * 1_000} for n in range(500)}  # half a megabyte the shim has no use for
    status, reply = await initialize(shim, {"elicitation": {"form": {}}, "sampling": {}, **junk})
    assert status == 200
    session = await sessions.load(reply["headers"]["Mcp-Session-Id"])
    assert session is not None
    assert session.capabilities == {"elicitation": {"form": {}}, "sampling": {}}
    assert session.client_info == {"name": "c", "version": "1"}
    # What it keeps is bounded too.
    status, refused = await initialize(shim, {"elicitation": {"form": {"note": "z" * 20_000}}})
    assert (status, refused["error"]["code"]) == (200, INVALID_PARAMS)


async def test_sessions_per_principal_are_capped_and_a_deleted_one_frees_its_place() -> None:
    sessions = MemorySessionStore()
    shim = make_shim(sessions, max_sessions=2)
    ids = []
    for _ in range(2):
        status, reply = await initialize(shim, {})
        assert status == 200
        ids.append(reply["headers"]["Mcp-Session-Id"])
    status, refused = await initialize(shim, {})
    assert status == 429
    assert refused["headers"]["Retry-After"] == "60"
    assert (refused["error"]["code"], refused["error"]["data"]["limit"]) == (LIMIT_EXCEEDED, "max_sessions")
    assert (await initialize(shim, {}, principal="bob"))[0] == 200  # another principal has its own count
    deleted = await shim.delete({"mcp-session-id": [ids[0]]}, Caller(ALICE))
    assert isinstance(deleted, JsonReply) and deleted.status == 204
    assert (await initialize(shim, {}))[0] == 200


async def test_the_memory_session_store_forgets_everything_that_lapsed() -> None:
    clock = Clock(start=1_000.0)
    sessions = MemorySessionStore(ttl_s=3600.0, clock=lambda: clock.now)
    for n in range(50):
        session = LegacySession(f"s-{n}", "2025-11-25", {}, "alice")
        await sessions.create(session, cap=0)
        await sessions.index_task(session.task_scope, f"task-{n}", n)
        await sessions.mark_cancelled(f"task-{n}", 60_000)
        await sessions.save_task({"taskId": f"shim-{n}"}, 60_000)
        assert await sessions.hold(f"s-{n}:task-{n}:k", "holder", 30_000)
    assert set(sessions.sizes().values()) == {50}
    clock.now += 3_601  # sessions, marks, shim tasks and holds have lapsed; the task index lives a week
    sessions.sweep()
    assert sessions.sizes() == {"sessions": 0, "index": 50, "cancelled": 0, "tasks": 0, "held": 0}
    clock.now += 7 * 86_400
    sessions.sweep()
    assert set(sessions.sizes().values()) == {0}


# --- listen: a bounded number of ids, checked in one round trip ----------------------------------------------


class CountingStore(MemoryTaskStore):
    """Counts the store calls a listen makes (on Valkey, ``owners`` is one pipelined round trip)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock_ms=clock.ms)
        self.owner_calls = 0
        self.lookups = 0
        self._inside_owners = False

    async def owners(self, task_ids: Sequence[str]) -> dict[str, str]:
        self.owner_calls += 1
        self._inside_owners = True
        try:
            return await super().owners(task_ids)
        finally:
            self._inside_owners = False

    async def lookup(self, task_id: str) -> Any:
        self.lookups += 0 if self._inside_owners else 1
        return await super().lookup(task_id)


async def test_listen_checks_every_id_in_one_store_call_and_refuses_too_many_or_too_long() -> None:
    clock = Clock()
    store = CountingStore(clock)
    engine = engine_over(store, clock)
    created = await send(engine, "tools/call", {"name": "job", "arguments": {}})
    assert isinstance(created, JsonReply) and created.message is not None
    mine = created.wire["result"]["taskId"]
    store.lookups = 0
    ids = [mine, *(f"unknown-{n}" for n in range(MAX_LISTEN_TASK_IDS - 1))]
    reply = await send(engine, "subscriptions/listen", {"notifications": {"taskIds": ids}})
    assert isinstance(reply, StreamReply)
    ack = await anext(reply.items)
    assert ack is not None and ack["params"]["notifications"]["taskIds"] == [mine]
    assert (store.owner_calls, store.lookups) == (1, 0)
    await reply.items.aclose()  # type: ignore[attr-defined]
    for notifications in (
        {"taskIds": [*ids, "one-too-many"]},
        {"taskIds": ["x" * (MAX_WATCHED_ID_CHARS + 1)]},
        {"resourceSubscriptions": [f"test://r/{n}" for n in range(1_001)]},
    ):
        refused = await send(engine, "subscriptions/listen", {"notifications": notifications})
        assert isinstance(refused, JsonReply) and refused.message is not None
        assert refused.wire["error"]["code"] == INVALID_PARAMS, refused.message
    assert store.owner_calls == 1  # refused before any store work
    engine.close()


# --- what one task may keep ----------------------------------------------------------------------------------


async def test_a_result_larger_than_the_limit_ends_the_task_failed_with_a_clear_message() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock_ms=clock.ms)
    engine = engine_over(store, clock)
    worker = Worker(store, engine.registry, WorkerOptions(max_result_bytes=2_048), clock_ms=clock.ms)
    outcomes = {}
    for size in (1_000, 4_000):
        created = await send(engine, "tools/call", {"name": "huge", "arguments": {"size": size}})
        assert isinstance(created, JsonReply) and created.message is not None
        task_id = created.wire["result"]["taskId"]
        done = await worker.execute(task_id)
        assert done is not None
        outcomes[size] = done
    assert outcomes[1_000].status is TaskStatus.COMPLETED
    failed = outcomes[4_000]
    assert failed.status is TaskStatus.FAILED and failed.result is None
    assert failed.error is not None and failed.error["code"] == INTERNAL_ERROR
    assert "too large to keep" in failed.error["message"] and "the limit is 2048" in failed.error["message"]
    engine.close()


async def test_stored_tasks_per_principal_are_capped_in_any_status() -> None:
    clock = Clock()
    store = MemoryTaskStore(clock_ms=clock.ms)
    engine = engine_over(store, clock, max_stored_tasks=2, max_active_tasks=0)
    worker = Worker(store, engine.registry, clock_ms=clock.ms)
    for _ in range(2):
        created = await send(engine, "tools/call", {"name": "job", "arguments": {}})
        assert isinstance(created, JsonReply) and created.message is not None
        await worker.execute(created.wire["result"]["taskId"])  # finished, and still kept
    refused = await send(engine, "tools/call", {"name": "job", "arguments": {}})
    assert isinstance(refused, JsonReply) and refused.message is not None
    assert refused.status == 429 and refused.headers == {"Retry-After": "60"}
    assert refused.wire["error"]["data"]["limit"] == "max_stored_tasks"
    engine.close()
