"""What the engine tests share: a registry of small tools (the tool author's view), a hand-moved clock,
and helpers that send a conforming 2026-07-28 request in-process and read its reply.

The tools ask for input through ``ctx.elicit``, ``ctx.ask`` or ``raise InputRequired``, sample, list
roots, report progress, or fail. The ``registry``, ``clock`` and ``engine`` fixtures over them are in
``conftest.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio

from ext_tasks import (
    Context,
    Header,
    InputRequired,
    Principal,
    ToolError,
    ToolRegistry,
    elicit,
    elicit_url,
)
from ext_tasks.engine import Engine
from ext_tasks.protocol.envelope import NAME_FIELDS, encode_header_value
from ext_tasks.replies import JsonReply, StreamItem, wire_of

VERSION = "2026-07-28"
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
KEY = b"engine-test-key-".ljust(32, b"!")
T0 = 1_800_000_000.0
ALICE = Principal(id="alice")
BOB = Principal(id="bob")
ALL_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
COLOUR_SCHEMA = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
TOKEN_SCHEMA = {"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"]}


# --- the tools --------------------------------------------------------------------------------------


async def greet(ctx: Context, greeting: str = "Hello") -> str:
    """Greets after asking the caller's name (ctx.elicit)."""
    answer = await ctx.elicit("name", "Your name?", NAME_SCHEMA)
    if answer.action != "accept" or answer.content is None:
        return "No name given."
    return f"{greeting}, {answer.content['name']}!"


async def introduce(ctx: Context) -> str:
    """Asks name, then colour, in two rounds."""
    name = await ctx.elicit("name", "Your name?", NAME_SCHEMA)
    colour = await ctx.elicit("colour", "Favourite colour?", COLOUR_SCHEMA)
    assert name.content is not None and colour.content is not None
    return f"{name.content['name']} likes {colour.content['colour']}."


async def survey(ctx: Context) -> str:
    """Asks two questions in one round (ctx.ask)."""
    answers = ctx.ask({"name": elicit("Your name?", NAME_SCHEMA), "colour": elicit("Colour?", COLOUR_SCHEMA)})
    return f"{answers['name'].content['name']}/{answers['colour'].content['colour']}"


async def unlock(ctx: Context, door: str) -> str:
    """Raises InputRequired itself and keeps its own state."""
    if "token" not in ctx.answers:
        raise InputRequired({"token": elicit("Token?", TOKEN_SCHEMA)}, state={"door": door, "step": 1})
    return f"unlocked {ctx.state['door']} at step {ctx.state['step']} with {ctx.answers['token']['content']['token']}"


async def shed(ctx: Context) -> str:
    """Sheds load once: a state-only input_required, then completes."""
    if ctx.state is None:
        raise InputRequired(state={"retried": True})
    return f"retried={ctx.state['retried']}"


async def trip(ctx: Context) -> str:
    """Asks which city, then writes the prompt."""
    answer = await ctx.elicit("city", "Which city?", {"type": "object", "properties": {"city": {"type": "string"}}})
    return f"Plan a trip to {(answer.content or {}).get('city')}."


async def haiku(ctx: Context, topic: str) -> str:
    """Asks the client to sample a haiku."""
    result = await ctx.sample("haiku", f"A haiku about {topic}", max_tokens=50)
    content = result.content
    assert isinstance(content, dict)
    return str(content["text"])


async def workspace(ctx: Context) -> str:
    """Lists the client's roots."""
    roots = await ctx.list_roots("roots")
    return ",".join(root.uri for root in roots)


async def login(ctx: Context) -> str:
    """Sends the caller to a login page (URL elicitation)."""
    answers = ctx.ask({"login": elicit_url("Sign in to continue", "https://login.example.com/x")})
    return str(answers["login"].action)


async def count(ctx: Context, n: int) -> str:
    """Reports progress n times."""
    for step in range(1, n + 1):
        await ctx.report_progress(step, n, f"step {step}")
    return f"counted to {n}"


async def quota() -> str:
    """Fails the way tool authors are meant to."""
    raise ToolError("disk quota exceeded on volume 7")


async def crash() -> str:
    """Crashes with a plain exception."""
    raise RuntimeError("secret-path /srv/keys/prod.pem")


async def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def deploy(region: Annotated[str, Header("Region")]) -> str:
    """Deploys to a region mirrored in a header."""
    return f"deployed to {region}"


async def greeting(name: str) -> str:
    """A greeting prompt."""
    return f"Say hello to {name}."


async def readme() -> str:
    return "# Read me"


async def note(slug: str) -> str:
    return f"note {slug}"


def make_registry() -> ToolRegistry:
    registry = ToolRegistry("engine-test", version="9.9.9", instructions="Tools for the engine tests.")
    registry.tool()(greet)
    registry.tool()(introduce)
    registry.tool()(survey)
    registry.tool()(unlock)
    registry.tool()(shed)
    registry.tool()(haiku)
    registry.tool()(workspace)
    registry.tool()(login)
    registry.tool()(count)
    registry.tool()(quota)
    registry.tool()(crash)
    registry.tool()(add)
    registry.tool()(deploy)
    registry.prompt()(greeting)
    registry.prompt()(trip)
    registry.resource("file:///readme.md", mime_type="text/markdown")(readme)
    registry.resource_template("file:///notes/{slug}.txt")(note)
    return registry


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


# --- helpers ----------------------------------------------------------------------------------------


def meta(capabilities: dict[str, Any] | None, protocol_version: str, **extra: Any) -> dict[str, Any]:
    declared = ALL_CAPABILITIES if capabilities is None else capabilities
    return {PROTOCOL_VERSION: protocol_version, CAPABILITIES: declared, **extra}


def message(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: str | int | None = 1,
    capabilities: dict[str, Any] | None = None,
    protocol_version: str = VERSION,
    **meta_extra: Any,
) -> tuple[bytes, dict[str, list[str]]]:
    """A conforming POST: the body and the lower-cased headers a 2026-07-28 client sends with it.

    ``capabilities`` defaults to every client capability; ``meta_extra`` adds ``_meta`` keys."""
    body_params = dict(params or {})
    body_params.setdefault("_meta", meta(capabilities, protocol_version, **meta_extra))
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": body_params}
    if request_id is not None:
        body["id"] = request_id
    headers = {"mcp-protocol-version": [protocol_version], "mcp-method": [method]}
    name_field = NAME_FIELDS.get(method)
    if name_field is not None and isinstance(body_params.get(name_field), str):
        headers["mcp-name"] = [encode_header_value(body_params[name_field])]
    return json.dumps(body).encode(), headers


async def json_reply(
    engine: Engine, body: bytes, headers: dict[str, list[str]], principal: Principal = ALICE
) -> JsonReply:
    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, principal)
    assert isinstance(reply, JsonReply), reply
    return reply


async def request(
    engine: Engine,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    principal: Principal = ALICE,
    request_id: str | int = 1,
    capabilities: dict[str, Any] | None = None,
    **meta_extra: Any,
) -> JsonReply:
    body, headers = message(method, params, request_id=request_id, capabilities=capabilities, **meta_extra)
    return await json_reply(engine, body, headers, principal)


async def result_of(engine: Engine, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    reply = await request(engine, method, params, **kwargs)
    assert reply.status == 200
    assert reply.message is not None
    assert "error" not in reply.message, reply.message
    result: dict[str, Any] = reply.wire["result"]
    return result


async def error_of(
    engine: Engine,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    status: int | None,
    code: int,
    **kwargs: Any,
) -> dict[str, Any]:
    """The JSON-RPC error of a request, checking its code, the echoed id and (unless None) the HTTP status.

    The spec leaves the HTTP status of most -32602 errors open, so those pass ``status=None``."""
    reply = await request(engine, method, params, **kwargs)
    assert reply.message is not None
    assert "error" in reply.message, reply.message
    assert reply.message["id"] == kwargs.get("request_id", 1)
    error: dict[str, Any] = reply.wire["error"]
    assert error["code"] == code, reply.message
    if status is not None:
        assert reply.status == status, reply.message
    return error


def text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    assert len(content) == 1
    assert content[0]["type"] == "text"
    text: str = content[0]["text"]
    return text


async def collect(items: AsyncIterator[StreamItem]) -> list[StreamItem]:
    """Every item of a stream, each message as the JSON object it is sent as."""
    with anyio.fail_after(5):
        return [None if item is None else wire_of(item) async for item in items]


async def next_item(items: AsyncIterator[StreamItem]) -> StreamItem:
    """The next item of a stream, a message as the JSON object it is sent as."""
    with anyio.fail_after(5):
        item = await anext(items)
    return None if item is None else wire_of(item)


async def call_tool(engine: Engine, name: str, arguments: dict[str, Any] | None = None, **extra: Any) -> JsonReply:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    for key in ("inputResponses", "requestState"):
        if key in extra:
            params[key] = extra.pop(key)
    return await request(engine, "tools/call", params, **extra)


def result(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "result" in reply.message, reply.message
    found: dict[str, Any] = reply.wire["result"]
    return found


def error(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "error" in reply.message, reply.message
    found: dict[str, Any] = reply.wire["error"]
    return found


NAME_ANSWER = {"name": {"action": "accept", "content": {"name": "Ada"}}}
