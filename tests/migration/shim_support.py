"""The migration shim in process, as composed for ``ext-tasks serve``: the era router over the real
engine and the legacy shim, with the memory task and session stores, and a hand-driven 2025-11-25
client of it.

::

    legacy = Legacy()                                  # the composition (the ``legacy`` fixture)
    client = await legacy.initialize()                 # a session; client.initialized is the result
    message = await client.call("tools/call", {...})   # one JSON reply (asserts it is not a stream)
    reply = await client.post("tasks/result", {...})   # any reply; stream items via next_item()
    await client.respond(request["id"], {...})         # answer a relayed server→client request

Tasks run only when a test says so (``await legacy.worker.execute(task_id)``), and a test waits for a
status without sleeping (``await legacy.store.wait_for(task_id, TaskStatus.WORKING)``). The shim polls
its tasks every 50 ms (the server's poll interval here).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio

from ext_tasks import Context, Principal, ProtocolError, ToolError, ToolRegistry, elicit
from ext_tasks.auth import Caller
from ext_tasks.engine import Engine
from ext_tasks.options import EngineOptions, TaskOptions, WorkerOptions
from ext_tasks.protocol.envelope import NAME_FIELDS, encode_header_value
from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.replies import JsonReply, Reply, StreamItem, StreamReply, wire_of
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from migration.router import EraRouter
from migration.sessions import MemorySessionStore
from migration.shim import LegacyShim, ShimOptions
from migration.upstream import EngineUpstream, ModernUpstream

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
KEY = b"shim-test-key".ljust(32, b"!")
WAIT_S = 5
ALICE = Principal("alice")
BOB = Principal("bob")
ANONYMOUS = Principal("anonymous")
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ADA = {"action": "accept", "content": {"name": "Ada"}}

_ids = itertools.count(1)


class RateLimited(ProtocolError):
    """A JSON-RPC failure a tool raises: its task ends ``failed`` with this error."""

    code = INTERNAL_ERROR


def make_registry() -> ToolRegistry:
    registry = ToolRegistry("shim-test", version="2.0.0", instructions="Tools for the shim tests.")

    @registry.tool()
    async def add(a: int, b: int) -> int:
        """Never a task."""
        return a + b

    @registry.tool()
    async def greet(ctx: Context) -> str:
        """Asks the caller's name (MRTR, inline)."""
        answer = await ctx.elicit("name", "Your name?", NAME_SCHEMA)
        return f"Hello, {answer.content['name']}!" if answer.content else "No name given."

    @registry.tool()
    async def haiku(ctx: Context) -> str:
        """Asks the client to sample (inline)."""
        sampled = await ctx.sample("haiku", "A haiku", max_tokens=20)
        return str(sampled.model)

    @registry.tool()
    async def chatty(ctx: Context) -> str:
        """Logs while it works."""
        await ctx.log("info", "working on it")
        return "done"

    @registry.tool(task="optional")
    async def job(n: int = 1, note: str = "") -> str:
        """A task when the client asks for one (``note`` only makes its arguments as large as a test needs)."""
        return f"job {n}"

    @registry.tool(task="required")
    async def required_job() -> str:
        return "required"

    @registry.tool(task="required")
    async def interview(ctx: Context) -> str:
        """Asks a name inside the task."""
        answer = ctx.ask({"name": elicit("Your name?", NAME_SCHEMA)})
        return f"Interviewed {answer['name'].content['name']}"

    @registry.tool(task="required")
    async def sampled_task(ctx: Context) -> str:
        """Asks the client to sample, inside the task."""
        result = await ctx.sample("haiku", "A haiku", max_tokens=20)
        return str(result.model)

    @registry.tool(task="required")
    async def broken() -> str:
        raise ToolError("disk quota exceeded")

    @registry.tool(task="required")
    async def limited() -> str:
        raise RateLimited("rate limited upstream")

    @registry.tool(task="optional", preflight=True)
    async def quick(ctx: Context) -> str:
        """Would continue as a task, but finishes before it gets there."""
        return "quick answer"

    return registry


class WatchedStore(MemoryTaskStore):
    """The memory task store, and ways to wait (without sleeping) until a task reaches a status, or until
    a task was read (a waiting ``tasks/result`` reads its task once per poll)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}
        self._committed = asyncio.Event()
        self._read = asyncio.Event()

    async def commit(self, *args: Any, **kwargs: Any) -> bool:
        committed = await super().commit(*args, **kwargs)
        if committed:
            self._committed.set()
        return committed

    async def lookup(self, task_id: str) -> Any:
        self.reads[task_id] = self.reads.get(task_id, 0) + 1
        self._read.set()
        return await super().lookup(task_id)

    async def wait_read(self, task_id: str, count: int) -> None:
        """Until ``task_id`` was looked up ``count`` times in all."""
        with anyio.fail_after(WAIT_S):
            while self.reads.get(task_id, 0) < count:
                self._read.clear()
                await self._read.wait()

    async def wait_for(self, task_id: str, status: TaskStatus) -> TaskRecord:
        with anyio.fail_after(WAIT_S):
            while True:
                self._committed.clear()
                found = await super().lookup(task_id)
                if isinstance(found, TaskRecord) and found.status is status:
                    return found
                await self._committed.wait()


class Legacy:
    """Engine, worker, shim and era router over the memory stores, as ``compose.Runtime`` wires them."""

    def __init__(
        self,
        *,
        max_waits: int = 256,
        worker: WorkerOptions | None = None,
        own_places: bool = False,
        upstream: Callable[[Engine], ModernUpstream] = EngineUpstream,
        **policy: Any,
    ) -> None:
        """``policy``: task options beyond the fast polling here; ``own_places``: the shim counts its own
        tasks in the session store's places, as behind ``ext-tasks proxy`` (else in the task store's,
        as ``ext-tasks serve`` composes it); ``upstream``: what the shim sends its modern calls to."""
        self.registry = make_registry()
        self.store = WatchedStore()
        options = TaskOptions(**{"poll_interval_ms": 50, "poll_interval_max_ms": 50, **policy})
        tasks = TaskMethods(self.store, options)
        codec = ResumeCodec([KEY], audience="shim-test")
        self.engine = Engine(self.registry, codec, EngineOptions(max_waits=max_waits), tasks=tasks)
        self.worker = Worker(self.store, self.registry, worker)
        self.sessions = MemorySessionStore()
        info = {"name": self.registry.name, "version": self.registry.version}
        shim_options = ShimOptions(
            server_info=info,
            instructions=self.registry.instructions,
            input_timeout_s=WAIT_S,
            tasks=options,
            worker=worker or WorkerOptions(),
        )
        places = None if own_places else self.store.places
        self.shim = LegacyShim(
            upstream(self.engine), self.sessions, codec, shim_options, waits=self.engine.waits, places=places
        )
        self.router = EraRouter(self.engine, self.shim)

    async def close(self) -> None:
        self.router.close()
        await self.sessions.close()
        await self.store.close()

    async def post(self, body: Mapping[str, Any] | bytes, headers: Mapping[str, str], principal: Principal) -> Reply:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        lowered = {name.lower(): [value] for name, value in headers.items()}
        with anyio.fail_after(WAIT_S):
            return await self.router.post(raw, lowered, Caller(principal))

    async def initialize(
        self, principal: Principal = ALICE, capabilities: Mapping[str, Any] | None = None
    ) -> LegacyClient:
        params = {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {"elicitation": {}, "sampling": {}} if capabilities is None else dict(capabilities),
            "clientInfo": {"name": "shim-test-client", "version": "1"},
        }
        reply = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, {}, principal)
        assert isinstance(reply, JsonReply) and reply.status == 200, reply
        assert reply.message is not None and "result" in reply.message, reply.message
        return LegacyClient(self, reply.headers["Mcp-Session-Id"], principal, reply.wire["result"])

    async def modern_reply(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        principal: Principal = ALICE,
        capabilities: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """A 2026-07-28 request on the same endpoint, declaring the tasks extension unless ``capabilities``
        say otherwise; ``headers`` are sent besides its own."""
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": (
                {"extensions": {EXTENSION: {}}} if capabilities is None else dict(capabilities)
            ),
        }
        body_params = {**(params or {}), "_meta": meta}
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": body_params}
        sent = {**(headers or {}), "MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": method}
        name_field = NAME_FIELDS.get(method)
        if name_field is not None and isinstance(body_params.get(name_field), str):
            sent["Mcp-Name"] = encode_header_value(body_params[name_field])
        return await self.post(body, sent, principal)

    async def modern(self, method: str, params: Mapping[str, Any], principal: Principal = ALICE) -> dict[str, Any]:
        """The JSON-RPC message of a 2026-07-28 request answered as JSON."""
        _, message = json_of(await self.modern_reply(method, params, principal=principal))
        return message


class LegacyClient:
    """One 2025-11-25 session of :class:`Legacy`."""

    def __init__(self, legacy: Legacy, session_id: str, principal: Principal, initialized: dict[str, Any]) -> None:
        self.legacy = legacy
        self.session_id = session_id
        self.principal = principal
        self.initialized = initialized
        self.headers = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": LEGACY_VERSION}

    async def post(self, method: str, params: Mapping[str, Any], *, request_id: int | str | None = None) -> Reply:
        body = {"jsonrpc": "2.0", "id": next(_ids) if request_id is None else request_id, "method": method}
        return await self.legacy.post({**body, "params": dict(params)}, self.headers, self.principal)

    async def call(self, method: str, params: Mapping[str, Any], *, status: int = 200) -> dict[str, Any]:
        """The one JSON-RPC message of a reply sent as JSON, checking its HTTP status."""
        got, message = json_of(await self.post(method, params))
        assert got == status, (got, message)
        return message

    async def result(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        message = await self.call(method, params)
        assert "result" in message, message
        found: dict[str, Any] = message["result"]
        return found

    async def start_task(self, tool: str, arguments: Mapping[str, Any] | None = None, **task: Any) -> str:
        """``tools/call`` with ``params.task``: the new task's id."""
        created = await self.result("tools/call", {"name": tool, "arguments": dict(arguments or {}), "task": task})
        task_id: str = created["task"]["taskId"]
        return task_id

    async def respond(
        self, request_id: str, result: Mapping[str, Any] | None = None, *, error: Mapping[str, Any] | None = None
    ) -> None:
        """The client's JSON-RPC response to a relayed server→client request (accepted with 202)."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            body["error"] = dict(error)
        else:
            body["result"] = dict(result or {})
        reply = await self.legacy.post(body, self.headers, self.principal)
        assert reply == JsonReply(202, None), reply

    async def get_stream(self) -> AsyncIterator[StreamItem]:
        """The session's GET stream (its items)."""
        lowered = {name.lower(): [value] for name, value in self.headers.items()}
        with anyio.fail_after(WAIT_S):
            return stream_of(await self.legacy.router.get(lowered, Caller(self.principal)))

    async def delete(self) -> Reply:
        lowered = {name.lower(): [value] for name, value in self.headers.items()}
        with anyio.fail_after(WAIT_S):
            return await self.legacy.router.delete(lowered, Caller(self.principal))


def json_of(reply: Reply) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the JSON-RPC message of a reply sent as JSON."""
    assert isinstance(reply, JsonReply) and reply.message is not None, reply
    return reply.status, reply.wire


def stream_of(reply: Reply) -> AsyncIterator[StreamItem]:
    assert isinstance(reply, StreamReply), reply
    return reply.items


async def next_item(items: AsyncIterator[StreamItem]) -> dict[str, Any]:
    """The next message of a stream (keep-alives skipped)."""
    with anyio.fail_after(WAIT_S):
        while True:
            item = await anext(items)
            if item is not None:
                return wire_of(item)


async def rest_of(items: AsyncIterator[StreamItem]) -> list[dict[str, Any]]:
    """Every remaining message of a stream, to its end."""
    with anyio.fail_after(WAIT_S):
        return [wire_of(item) async for item in items if item is not None]


#: A modern ``Task`` as a 2026-07-28 server sends it (the shim's input in the translation tests).
MODERN_TASK: dict[str, Any] = {
    "taskId": "t1",
    "status": "working",
    "createdAt": "2026-11-29T10:00:00.000Z",
    "lastUpdatedAt": "2026-11-29T10:00:01.000Z",
    "ttlMs": 60_000,
    "pollIntervalMs": 250,
}
