"""Per-tool OAuth scopes (``@registry.tool(scopes=[...])``) through the engine, in-process: who sees a
tool in ``tools/list``, the 403 step-up when a token lacks a scope, and the principal a tool sees when
it runs as a task on a worker (the same issuer, subject, client, scopes and claims as at creation)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from ext_tasks import Context, Principal, ToolRegistry
from ext_tasks.auth import MAX_GRANT_BYTES, grant_of, principal_from_grant
from ext_tasks.engine import Engine
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.errors import INVALID_REQUEST
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from tests.support.mcp_http import modern_request

pytestmark = pytest.mark.anyio

EXTENSION = "io.modelcontextprotocol/tasks"
KEY = b"tool-scopes-test-key".ljust(32, b"!")
ISSUER = "https://id.example.com"
DEPLOYER = Principal(
    id=f"{ISSUER}#u-1",
    issuer=ISSUER,
    subject="u-1",
    client_id="chat-host",
    scopes=frozenset({"mcp", "deploy:production"}),
    claims={"sub": "u-1", "email": "ada@example.com"},
)
READER = Principal(id=f"{ISSUER}#u-2", issuer=ISSUER, subject="u-2", client_id="chat-host", scopes=frozenset({"mcp"}))
STATIC = Principal(id="ops-robot")  # a static token: no scopes to check


@pytest.fixture
def seen() -> list[Principal]:
    return []


@pytest.fixture
def registry(seen: list[Principal]) -> ToolRegistry:
    registry = ToolRegistry("tool-scopes-test")

    @registry.tool(description="Anyone may read.")
    async def status() -> str:
        return "green"

    @registry.tool(task="required", scopes=["deploy:production"], description="Deploys.")
    async def deploy(ctx: Context, service: str) -> str:
        seen.append(ctx.principal)
        return f"deployed {service}"

    return registry


@pytest.fixture
def store() -> MemoryTaskStore:
    return MemoryTaskStore()


@pytest.fixture
def engine(registry: ToolRegistry, store: MemoryTaskStore) -> Iterator[Engine]:
    codec = ResumeCodec([KEY], audience="tool-scopes-test", ttl_s=600)
    engine = Engine(registry, codec, tasks=TaskMethods(store, TaskOptions()))
    yield engine
    engine.close()


async def send(engine: Engine, method: str, params: dict[str, Any], principal: Principal) -> JsonReply:
    headers, body = modern_request(method, params, capabilities={"extensions": {EXTENSION: {}}})
    lowered = {name.lower(): [value] for name, value in headers.items()}
    with anyio.fail_after(5):
        reply = await engine.handle(json.dumps(body).encode(), lowered, principal)
    assert isinstance(reply, JsonReply)
    return reply


async def listed(engine: Engine, principal: Principal) -> list[str]:
    reply = await send(engine, "tools/list", {}, principal)
    assert reply.message is not None
    return [tool["name"] for tool in reply.wire["result"]["tools"]]


async def test_tools_list_shows_a_caller_only_the_tools_its_scopes_allow(engine: Engine) -> None:
    assert await listed(engine, DEPLOYER) == ["status", "deploy"]
    assert await listed(engine, READER) == ["status"]
    assert await listed(engine, STATIC) == ["status", "deploy"]


async def test_a_token_without_the_tools_scope_gets_403_naming_it(engine: Engine, store: MemoryTaskStore) -> None:
    reply = await send(engine, "tools/call", {"name": "deploy", "arguments": {"service": "api"}}, READER)
    assert reply.status == 403
    assert reply.message is not None
    assert reply.wire["error"]["code"] == INVALID_REQUEST
    assert "insufficient_scope" in reply.headers["WWW-Authenticate"]
    assert 'scope="deploy:production"' in reply.headers["WWW-Authenticate"]


async def test_a_task_runs_with_the_principal_that_created_it(
    engine: Engine, store: MemoryTaskStore, registry: ToolRegistry, seen: list[Principal]
) -> None:
    reply = await send(engine, "tools/call", {"name": "deploy", "arguments": {"service": "api"}}, DEPLOYER)
    assert reply.message is not None
    assert reply.wire["result"]["resultType"] == "task"
    worker = Worker(store, registry)  # another process's worker: it knows the task only from the store
    with anyio.fail_after(5):
        done = await worker.execute(reply.wire["result"]["taskId"])
    assert done is not None
    assert done.result is not None
    assert seen == [DEPLOYER]
    (ran,) = seen
    assert (ran.issuer, ran.subject, ran.client_id, ran.scopes) == (
        ISSUER,
        "u-1",
        "chat-host",
        frozenset({"mcp", "deploy:production"}),
    )
    assert dict(ran.claims) == {"sub": "u-1", "email": "ada@example.com"}


def test_a_static_principal_keeps_nothing_beside_its_id() -> None:
    assert grant_of(STATIC) is None
    assert principal_from_grant("ops-robot", None) == STATIC


def test_claims_too_large_to_keep_are_left_out_but_the_scopes_stay() -> None:
    big = Principal(
        id=f"{ISSUER}#u-3", issuer=ISSUER, subject="u-3", scopes=frozenset({"mcp"}), claims={"x": "y" * MAX_GRANT_BYTES}
    )
    grant = grant_of(big)
    assert grant is not None
    assert "claims" not in json.loads(grant)
    back = principal_from_grant(big.id, grant)
    assert back.scopes == frozenset({"mcp"})
    assert dict(back.claims) == {}


@pytest.mark.parametrize("scopes", [["has space"], ['quo"te'], ["back\\slash"], [""], "deploy"])
def test_scope_names_that_cannot_go_into_a_header_are_refused(scopes: Any) -> None:
    registry = ToolRegistry("bad-scopes")
    with pytest.raises(ValueError, match="scope"):

        @registry.tool(scopes=scopes)
        async def tool() -> str:
            return ""
