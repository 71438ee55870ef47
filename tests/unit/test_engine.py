"""The engine, driven in-process: bytes and headers in, a JSON or streamed reply out.

The registry below is the tool author's view: functions that ask for input through ``ctx.elicit``,
``ctx.ask`` or ``raise InputRequired``, sample, list roots, report progress, or fail.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Annotated, Any

import anyio
import pytest

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
from ext_tasks.engine import Engine, EngineOptions
from ext_tasks.protocol.envelope import NAME_FIELDS, encode_header_value
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply, Reply, StreamItem, StreamReply

pytestmark = pytest.mark.anyio

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


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(registry: ToolRegistry, clock: FakeClock) -> Iterator[Engine]:
    codec = ResumeCodec([KEY], audience="engine-test", ttl_s=600, clock=clock)
    engine = Engine(registry, codec)
    yield engine
    engine.close()


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
    result: dict[str, Any] = reply.message["result"]
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
    error: dict[str, Any] = reply.message["error"]
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
    with anyio.fail_after(5):
        return [item async for item in items]


async def next_item(items: AsyncIterator[StreamItem]) -> StreamItem:
    with anyio.fail_after(5):
        return await anext(items)


async def call_tool(engine: Engine, name: str, arguments: dict[str, Any] | None = None, **extra: Any) -> JsonReply:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    for key in ("inputResponses", "requestState"):
        if key in extra:
            params[key] = extra.pop(key)
    return await request(engine, "tools/call", params, **extra)


def result(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "result" in reply.message, reply.message
    found: dict[str, Any] = reply.message["result"]
    return found


def error(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "error" in reply.message, reply.message
    found: dict[str, Any] = reply.message["error"]
    return found


NAME_ANSWER = {"name": {"action": "accept", "content": {"name": "Ada"}}}


# --- methods that do not exist ----------------------------------------------------------------------

REMOVED = [
    ("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
    ("ping", {}),
    ("logging/setLevel", {"level": "info"}),
    ("resources/subscribe", {"uri": "file:///readme.md"}),
    ("resources/unsubscribe", {"uri": "file:///readme.md"}),
    ("tasks/result", {"taskId": "t-1"}),
    ("tasks/list", {}),
    ("no/such/method", {}),
    ("tools/List", {}),
]


@pytest.mark.parametrize(("method", "params"), REMOVED, ids=[item[0] for item in REMOVED])
async def test_removed_and_unknown_methods_are_not_found_with_http_404(
    engine: Engine, method: str, params: dict[str, Any]
) -> None:
    err = await error_of(engine, method, params, status=404, code=-32601, request_id="req-404")

    assert method in err["message"]


async def test_request_without_meta_is_invalid_params_with_http_400(engine: Engine) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}).encode()
    headers = {"mcp-protocol-version": [VERSION], "mcp-method": ["tools/list"]}

    reply = await json_reply(engine, body, headers)

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == 3
    assert reply.message["error"]["code"] == -32602


async def test_body_that_is_not_json_is_a_parse_error_with_null_id(engine: Engine) -> None:
    reply = await json_reply(engine, b"{not json", {})

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] is None
    assert reply.message["error"]["code"] == -32700


async def test_header_mismatch_answers_400_and_echoes_the_id(engine: Engine) -> None:
    body, headers = message("tools/list", request_id="h-1")
    headers["mcp-method"] = ["tools/call"]

    reply = await json_reply(engine, body, headers)

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == "h-1"
    assert reply.message["error"]["code"] == -32020


async def test_unsupported_version_answers_400_with_the_supported_versions(engine: Engine) -> None:
    body, headers = message("tools/list", protocol_version="1900-01-01")

    reply = await json_reply(engine, body, headers)

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["error"]["code"] == -32022
    assert reply.message["error"]["data"] == {"supported": [VERSION], "requested": "1900-01-01"}


async def test_notification_is_accepted_with_202_and_no_body(engine: Engine) -> None:
    body, headers = message("notifications/cancelled", {"requestId": 1}, request_id=None)

    reply = await json_reply(engine, body, headers)

    assert reply == JsonReply(202, None)


async def test_client_response_is_refused_as_an_invalid_request(engine: Engine) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": "resp-1", "result": {"roots": []}}).encode()

    reply = await json_reply(engine, body, {})

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == "resp-1"
    assert reply.message["error"]["code"] == -32600


# --- result shapes ----------------------------------------------------------------------------------

EVERY_METHOD = [
    ("server/discover", {}),
    ("tools/list", {}),
    ("prompts/list", {}),
    ("resources/list", {}),
    ("resources/templates/list", {}),
    ("resources/read", {"uri": "file:///readme.md"}),
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}),
    ("prompts/get", {"name": "greeting", "arguments": {"name": "Ada"}}),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "greeting"}, "argument": {"name": "name", "value": "A"}},
    ),
]
CACHEABLE = {
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
}


@pytest.mark.parametrize(("method", "params"), EVERY_METHOD, ids=[item[0] for item in EVERY_METHOD])
async def test_every_result_has_a_result_type_and_the_server_info(
    engine: Engine, method: str, params: dict[str, Any]
) -> None:
    found = await result_of(engine, method, params)

    assert found["resultType"] == "complete"
    assert found["_meta"][SERVER_INFO] == {"name": "engine-test", "version": "9.9.9"}


@pytest.mark.parametrize(
    ("method", "params"),
    [item for item in EVERY_METHOD if item[0] in CACHEABLE],
    ids=[item[0] for item in EVERY_METHOD if item[0] in CACHEABLE],
)
async def test_cacheable_results_carry_ttl_and_cache_scope(engine: Engine, method: str, params: dict[str, Any]) -> None:
    found = await result_of(engine, method, params)

    assert isinstance(found["ttlMs"], int) and found["ttlMs"] >= 0
    assert found["cacheScope"] in ("public", "private")


async def test_discover_lists_the_supported_versions_and_capabilities(engine: Engine) -> None:
    found = await result_of(engine, "server/discover")

    assert found["supportedVersions"] == [VERSION]
    assert set(found["capabilities"]) >= {"tools", "prompts", "resources"}
    assert found["instructions"] == "Tools for the engine tests."


async def test_tools_list_describes_every_tool_with_its_input_schema(engine: Engine) -> None:
    found = await result_of(engine, "tools/list")
    tools = {tool["name"]: tool for tool in found["tools"]}

    assert tools["add"]["inputSchema"]["type"] == "object"
    assert set(tools["add"]["inputSchema"]["properties"]) == {"a", "b"}
    assert "ctx" not in tools["greet"]["inputSchema"]["properties"]
    assert tools["deploy"]["inputSchema"]["properties"]["region"]["x-mcp-header"] == "Region"


async def test_tool_result_is_complete_content(engine: Engine) -> None:
    found = result(await call_tool(engine, "add", {"a": 2, "b": 3}))

    assert found["resultType"] == "complete"
    assert found["isError"] is False
    assert text_of(found) == "5"


async def test_resource_read_returns_the_contents(engine: Engine) -> None:
    found = await result_of(engine, "resources/read", {"uri": "file:///readme.md"})

    assert found["contents"] == [{"uri": "file:///readme.md", "mimeType": "text/markdown", "text": "# Read me"}]


async def test_resource_template_reads_its_variables_from_the_uri(engine: Engine) -> None:
    found = await result_of(engine, "resources/read", {"uri": "file:///notes/today.txt"})

    assert found["contents"][0]["text"] == "note today"


# --- invalid calls ----------------------------------------------------------------------------------


async def test_unknown_tool_is_invalid_params(engine: Engine) -> None:
    err = await error_of(engine, "tools/call", {"name": "nope", "arguments": {}}, status=None, code=-32602)

    assert "nope" in err["message"]


@pytest.mark.parametrize(
    "arguments",
    [{"a": "one", "b": 2}, {"a": 1}, {}],
    ids=["wrong-type", "missing-b", "missing-both"],
)
async def test_invalid_arguments_are_invalid_params(engine: Engine, arguments: dict[str, Any]) -> None:
    reply = await call_tool(engine, "add", arguments)

    assert error(reply)["code"] == -32602


@pytest.mark.parametrize("name", [["add"], {"tool": "add"}, 7, None], ids=["list", "object", "number", "null"])
async def test_tool_name_that_is_not_a_string_is_invalid_params(engine: Engine, name: object) -> None:
    reply = await request(engine, "tools/call", {"name": name, "arguments": {}})

    assert error(reply)["code"] == -32602


async def test_arguments_that_are_not_an_object_are_invalid_params(engine: Engine) -> None:
    reply = await request(engine, "tools/call", {"name": "add", "arguments": [1, 2]})

    assert error(reply)["code"] == -32602


async def test_unknown_resource_is_invalid_params_naming_the_uri(engine: Engine) -> None:
    err = await error_of(engine, "resources/read", {"uri": "file:///missing.md"}, status=None, code=-32602)

    assert err["data"] == {"uri": "file:///missing.md"}


async def test_unknown_prompt_is_invalid_params(engine: Engine) -> None:
    await error_of(engine, "prompts/get", {"name": "nope"}, status=None, code=-32602)


async def test_list_with_a_cursor_this_server_never_issued_is_invalid_params(engine: Engine) -> None:
    await error_of(engine, "tools/list", {"cursor": "page-2"}, status=None, code=-32602)


async def test_tool_with_a_header_argument_needs_its_mcp_param_header(engine: Engine) -> None:
    await error_of(engine, "tools/call", {"name": "deploy", "arguments": {"region": "eu"}}, status=400, code=-32020)


async def test_tool_with_a_header_argument_runs_when_the_header_matches(engine: Engine) -> None:
    body, headers = message("tools/call", {"name": "deploy", "arguments": {"region": "eu-west-1"}})
    headers["mcp-param-region"] = ["eu-west-1"]

    reply = await json_reply(engine, body, headers)

    assert text_of(result(reply)) == "deployed to eu-west-1"


# --- tool failures ----------------------------------------------------------------------------------


async def test_tool_error_is_an_error_result_with_its_message(engine: Engine) -> None:
    reply = await call_tool(engine, "quota")

    assert reply.status == 200
    found = result(reply)
    assert found["resultType"] == "complete"
    assert found["isError"] is True
    assert text_of(found) == "disk quota exceeded on volume 7"


async def test_plain_exception_in_a_tool_is_an_error_result_that_hides_the_exception_text(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    reply = await call_tool(engine, "crash")

    found = result(reply)
    assert found["isError"] is True
    assert found["resultType"] == "complete"
    assert "secret-path" not in json.dumps(reply.message)
    assert "/srv/keys" not in text_of(found)
    assert any("crash" in record.getMessage() for record in caplog.records)


# --- multi round-trip requests ----------------------------------------------------------------------


async def test_first_round_asks_for_input_with_a_request_state(engine: Engine) -> None:
    found = result(await call_tool(engine, "greet"))

    assert found["resultType"] == "input_required"
    assert found["inputRequests"] == {
        "name": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Your name?", "requestedSchema": NAME_SCHEMA},
        }
    }
    assert isinstance(found["requestState"], str) and found["requestState"]
    assert found["_meta"][SERVER_INFO]["name"] == "engine-test"


async def test_retry_with_the_answers_and_the_state_completes(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet", {"greeting": "Hi"}))

    final = result(
        await call_tool(
            engine,
            "greet",
            {"greeting": "Hi"},
            inputResponses=NAME_ANSWER,
            requestState=first["requestState"],
            request_id=2,
        )
    )

    assert final["resultType"] == "complete"
    assert text_of(final) == "Hi, Ada!"


async def test_declined_elicitation_reaches_the_tool(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    final = result(
        await call_tool(
            engine, "greet", inputResponses={"name": {"action": "decline"}}, requestState=first["requestState"]
        )
    )

    assert text_of(final) == "No name given."


async def test_several_questions_are_asked_in_one_round(engine: Engine) -> None:
    first = result(await call_tool(engine, "survey"))

    assert set(first["inputRequests"]) == {"name", "colour"}
    final = result(
        await call_tool(
            engine,
            "survey",
            inputResponses={**NAME_ANSWER, "colour": {"action": "accept", "content": {"colour": "green"}}},
            requestState=first["requestState"],
        )
    )
    assert text_of(final) == "Ada/green"


async def test_answering_only_some_questions_asks_again_for_the_rest(engine: Engine) -> None:
    first = result(await call_tool(engine, "survey"))

    second = result(await call_tool(engine, "survey", inputResponses=NAME_ANSWER, requestState=first["requestState"]))

    assert second["resultType"] == "input_required"
    assert set(second["inputRequests"]) == {"colour"}


async def test_multi_round_request_accumulates_earlier_answers(engine: Engine) -> None:
    first = result(await call_tool(engine, "introduce"))
    assert set(first["inputRequests"]) == {"name"}

    second = result(
        await call_tool(
            engine, "introduce", inputResponses=NAME_ANSWER, requestState=first["requestState"], request_id=2
        )
    )
    assert second["resultType"] == "input_required"
    assert set(second["inputRequests"]) == {"colour"}

    third = result(
        await call_tool(
            engine,
            "introduce",
            inputResponses={"colour": {"action": "accept", "content": {"colour": "green"}}},
            requestState=second["requestState"],
            request_id=3,
        )
    )
    assert third["resultType"] == "complete"
    assert text_of(third) == "Ada likes green."


async def test_tool_state_from_input_required_comes_back_on_the_retry(engine: Engine) -> None:
    first = result(await call_tool(engine, "unlock", {"door": "front"}))

    final = result(
        await call_tool(
            engine,
            "unlock",
            {"door": "front"},
            inputResponses={"token": {"action": "accept", "content": {"token": "t0k"}}},
            requestState=first["requestState"],
        )
    )

    assert text_of(final) == "unlocked front at step 1 with t0k"


async def test_answer_under_the_wrong_key_asks_again(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    again = result(
        await call_tool(
            engine,
            "greet",
            inputResponses={"nom": {"action": "accept", "content": {"name": "Ada"}}},
            requestState=first["requestState"],
        )
    )

    assert again["resultType"] == "input_required"
    assert again["inputRequests"] == first["inputRequests"]
    assert again["requestState"]


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "accept", "content": {"name": 42}},
        {"action": "accept", "content": {"nickname": "Ada"}},
        {"action": "accept"},
        {"action": "maybe", "content": {"name": "Ada"}},
        {"text": "Ada"},
    ],
    ids=["wrong-type", "missing-required-field", "accept-without-content", "unknown-action", "not-an-elicit-result"],
)
async def test_answer_of_the_wrong_shape_asks_again(engine: Engine, answer: dict[str, Any]) -> None:
    first = result(await call_tool(engine, "greet"))

    again = result(
        await call_tool(engine, "greet", inputResponses={"name": answer}, requestState=first["requestState"])
    )

    assert again["resultType"] == "input_required"
    assert set(again["inputRequests"]) == {"name"}


@pytest.mark.parametrize(
    "responses",
    [None, 3, "name", [NAME_ANSWER], {"name": None}, {"name": 5}, {"name": ["accept"]}, {"name": "Ada"}],
    ids=["null", "number", "string", "list", "null-value", "number-value", "list-value", "string-value"],
)
async def test_malformed_input_responses_are_invalid_params(engine: Engine, responses: object) -> None:
    first = result(await call_tool(engine, "greet"))

    reply = await call_tool(engine, "greet", inputResponses=responses, requestState=first["requestState"])

    assert error(reply)["code"] == -32602


async def test_unknown_extra_answers_are_ignored(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    final = result(
        await call_tool(
            engine,
            "greet",
            inputResponses={**NAME_ANSWER, "extra": {"action": "accept", "content": {"x": 1}}},
            requestState=first["requestState"],
        )
    )

    assert text_of(final) == "Hello, Ada!"


async def test_tampered_request_state_is_refused_with_the_fixed_message(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))
    state: str = first["requestState"]
    tampered = state[:20] + ("A" if state[20] != "A" else "B") + state[21:]

    reply = await call_tool(engine, "greet", inputResponses=NAME_ANSWER, requestState=tampered, request_id="t-1")

    assert reply.message is not None
    assert reply.message["id"] == "t-1"
    assert error(reply)["code"] == -32602
    assert error(reply)["message"] == "Invalid or expired requestState"


@pytest.mark.parametrize("state", ["", "garbage", "v1.e30.abc", 42, None, {"s": 1}])
async def test_request_state_that_was_never_issued_is_refused(engine: Engine, state: object) -> None:
    reply = await call_tool(engine, "greet", inputResponses=NAME_ANSWER, requestState=state)

    assert error(reply)["code"] == -32602


async def test_expired_request_state_is_refused(engine: Engine, clock: FakeClock) -> None:
    first = result(await call_tool(engine, "greet"))
    clock.now += 601

    reply = await call_tool(engine, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"])

    assert error(reply) == {
        "code": -32602,
        "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"},
    }


async def test_request_state_replayed_for_another_tool_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    reply = await call_tool(engine, "introduce", inputResponses=NAME_ANSWER, requestState=first["requestState"])

    assert error(reply)["code"] == -32602
    assert error(reply)["message"] == "Invalid or expired requestState"


async def test_request_state_replayed_with_other_arguments_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet", {"greeting": "Hello"}))

    reply = await call_tool(
        engine, "greet", {"greeting": "Goodbye"}, inputResponses=NAME_ANSWER, requestState=first["requestState"]
    )

    assert error(reply)["code"] == -32602


async def test_request_state_replayed_by_another_principal_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet", principal=ALICE))

    reply = await call_tool(
        engine, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"], principal=BOB
    )

    assert error(reply)["code"] == -32602


async def test_request_state_replayed_on_another_method_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    reply = await request(
        engine,
        "prompts/get",
        {"name": "greeting", "arguments": {"name": "Ada"}, "requestState": first["requestState"]},
    )

    assert error(reply)["code"] == -32602


async def test_request_state_from_a_server_with_other_keys_is_refused(registry: ToolRegistry, clock: FakeClock) -> None:
    other = Engine(make_registry(), ResumeCodec([b"z" * 32], audience="engine-test", clock=clock))
    mine = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock))
    first = result(await call_tool(other, "greet"))

    reply = await call_tool(mine, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"])

    assert error(reply)["code"] == -32602


async def test_request_state_verifies_on_another_engine_sharing_the_key(
    registry: ToolRegistry, clock: FakeClock
) -> None:
    one = Engine(make_registry(), ResumeCodec([KEY], audience="engine-test", clock=clock))
    two = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock))
    first = result(await call_tool(one, "greet"))

    final = result(await call_tool(two, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"]))

    assert text_of(final) == "Hello, Ada!"


async def test_sampling_round_trip(engine: Engine) -> None:
    first = result(await call_tool(engine, "haiku", {"topic": "rain"}))

    assert first["inputRequests"] == {
        "haiku": {
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "A haiku about rain"}}],
                "maxTokens": 50,
            },
        }
    }
    sampled = {
        "role": "assistant",
        "content": {"type": "text", "text": "drops on the window"},
        "model": "test-model",
        "stopReason": "endTurn",
    }
    final = result(
        await call_tool(
            engine, "haiku", {"topic": "rain"}, inputResponses={"haiku": sampled}, requestState=first["requestState"]
        )
    )
    assert text_of(final) == "drops on the window"


async def test_roots_round_trip(engine: Engine) -> None:
    first = result(await call_tool(engine, "workspace"))

    assert first["inputRequests"] == {"roots": {"method": "roots/list"}}
    final = result(
        await call_tool(
            engine,
            "workspace",
            inputResponses={"roots": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b", "name": "b"}]}},
            requestState=first["requestState"],
        )
    )
    assert text_of(final) == "file:///a,file:///b"


async def test_url_elicitation_round_trip(engine: Engine) -> None:
    first = result(await call_tool(engine, "login"))

    assert first["inputRequests"] == {
        "login": {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "Sign in to continue", "url": "https://login.example.com/x"},
        }
    }
    final = result(
        await call_tool(
            engine, "login", inputResponses={"login": {"action": "accept"}}, requestState=first["requestState"]
        )
    )
    assert text_of(final) == "accept"


async def test_state_only_input_required_carries_a_request_state_and_no_input_requests(engine: Engine) -> None:
    first = result(await call_tool(engine, "shed"))

    assert first["resultType"] == "input_required"
    assert "inputRequests" not in first
    assert first["requestState"]
    final = result(await call_tool(engine, "shed", requestState=first["requestState"]))
    assert text_of(final) == "retried=True"


async def test_prompt_can_ask_for_input_and_complete_on_the_retry(engine: Engine) -> None:
    first = await result_of(engine, "prompts/get", {"name": "trip"})
    assert first["resultType"] == "input_required"

    final = await result_of(
        engine,
        "prompts/get",
        {
            "name": "trip",
            "inputResponses": {"city": {"action": "accept", "content": {"city": "Lyon"}}},
            "requestState": first["requestState"],
        },
    )

    assert final["resultType"] == "complete"
    assert final["messages"] == [{"role": "user", "content": {"type": "text", "text": "Plan a trip to Lyon."}}]


# --- client capabilities ----------------------------------------------------------------------------


async def test_elicitation_for_a_client_that_declared_only_sampling_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine, "tools/call", {"name": "greet", "arguments": {}}, status=400, code=-32021, capabilities={"sampling": {}}
    )

    assert err["data"] == {"requiredCapabilities": {"elicitation": {}}}


async def test_form_elicitation_for_a_client_that_declared_only_url_mode_is_a_missing_capability(
    engine: Engine,
) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "greet", "arguments": {}},
        status=400,
        code=-32021,
        capabilities={"elicitation": {"url": {}}},
    )

    assert err["data"]["requiredCapabilities"] in ({"elicitation": {}}, {"elicitation": {"form": {}}})


async def test_url_elicitation_without_the_url_capability_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "login", "arguments": {}},
        status=400,
        code=-32021,
        capabilities={"elicitation": {}},
    )

    assert err["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_sampling_without_the_sampling_capability_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "haiku", "arguments": {"topic": "rain"}},
        status=400,
        code=-32021,
        capabilities={"elicitation": {}},
    )

    assert err["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_roots_without_the_roots_capability_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine, "tools/call", {"name": "workspace", "arguments": {}}, status=400, code=-32021, capabilities={}
    )

    assert err["data"] == {"requiredCapabilities": {"roots": {}}}


async def test_empty_elicitation_capability_means_form_mode(engine: Engine) -> None:
    found = await result_of(engine, "tools/call", {"name": "greet", "arguments": {}}, capabilities={"elicitation": {}})

    assert found["resultType"] == "input_required"


async def test_capabilities_are_read_from_each_request_never_remembered(engine: Engine) -> None:
    await result_of(engine, "tools/call", {"name": "greet", "arguments": {}}, capabilities={"elicitation": {}})

    await error_of(engine, "tools/call", {"name": "greet", "arguments": {}}, status=400, code=-32021, capabilities={})


# --- streaming ---------------------------------------------------------------------------------------


async def test_progress_reported_by_a_tool_streams_notifications_then_the_response(engine: Engine) -> None:
    body, headers = message("tools/call", {"name": "count", "arguments": {"n": 2}}, request_id=9, progressToken="p-1")

    with anyio.fail_after(5):
        reply: Reply = await engine.handle(body, headers, ALICE)

    assert isinstance(reply, StreamReply)
    items = await collect(reply.items)
    assert items[:2] == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "p-1", "progress": 1, "total": 2, "message": "step 1"},
        },
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "p-1", "progress": 2, "total": 2, "message": "step 2"},
        },
    ]
    assert len(items) == 3
    final = items[2]
    assert final is not None
    assert final["id"] == 9
    assert final["result"]["resultType"] == "complete"
    assert text_of(final["result"]) == "counted to 2"


async def test_request_with_a_progress_token_whose_tool_reports_nothing_gets_plain_json(engine: Engine) -> None:
    body, headers = message("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}, progressToken=4)

    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, ALICE)

    assert isinstance(reply, JsonReply)
    assert reply.status == 200
    assert text_of(result(reply)) == "2"


async def test_request_with_a_progress_token_that_fails_keeps_its_http_status(engine: Engine) -> None:
    body, headers = message(
        "tools/call", {"name": "greet", "arguments": {}}, capabilities={}, progressToken="p-2", request_id=5
    )

    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, ALICE)

    assert isinstance(reply, JsonReply)
    assert reply.status == 400
    assert error(reply)["code"] == -32021


async def test_closing_the_stream_cancels_the_tool(registry: ToolRegistry, clock: FakeClock) -> None:
    started = anyio.Event()
    cancelled = anyio.Event()

    @registry.tool(description="Reports progress, then works until cancelled.")
    async def forever(ctx: Context) -> str:
        await ctx.report_progress(1)
        started.set()
        try:
            await anyio.Event().wait()
        finally:
            cancelled.set()
        return "unreachable"

    engine = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock))
    body, headers = message("tools/call", {"name": "forever", "arguments": {}}, progressToken="p")
    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, ALICE)
    assert isinstance(reply, StreamReply)
    items = reply.items
    assert isinstance(items, AsyncGenerator)
    first = await next_item(items)
    assert first is not None and first["method"] == "notifications/progress"

    with anyio.fail_after(5):
        await started.wait()
        await items.aclose()
        await cancelled.wait()


async def test_progress_is_not_sent_without_a_progress_token(engine: Engine) -> None:
    reply = await call_tool(engine, "count", {"n": 3})

    assert text_of(result(reply)) == "counted to 3"


# --- subscriptions/listen ----------------------------------------------------------------------------


async def listen(engine: Engine, request_id: str, **notifications: Any) -> AsyncIterator[StreamItem]:
    body, headers = message("subscriptions/listen", {"notifications": notifications}, request_id=request_id)
    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, ALICE)
    assert isinstance(reply, StreamReply)
    return reply.items


async def test_listen_first_acknowledges_with_the_subscription_id(engine: Engine) -> None:
    items = await listen(engine, "listen-1", toolsListChanged=True, resourceSubscriptions=["file:///readme.md"])

    first = await next_item(items)

    assert first == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUBSCRIPTION_ID: "listen-1"},
            "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["file:///readme.md"]},
        },
    }


async def test_removing_a_tool_notifies_tool_listeners_and_not_prompt_listeners(
    engine: Engine, registry: ToolRegistry
) -> None:
    tools = await listen(engine, "listen-tools", toolsListChanged=True)
    prompts = await listen(engine, "listen-prompts", promptsListChanged=True)
    await next_item(tools)
    await next_item(prompts)

    registry.remove_tool("add")
    engine.close()

    assert await next_item(tools) == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUBSCRIPTION_ID: "listen-tools"}},
    }
    # The prompt listener's next message is the end of the stream: the tool change never reached it.
    after = await next_item(prompts)
    assert after is not None
    assert after["id"] == "listen-prompts"
    assert "result" in after


async def test_resource_update_reaches_only_subscribers_of_that_uri(engine: Engine, registry: ToolRegistry) -> None:
    readme = await listen(engine, "listen-readme", resourceSubscriptions=["file:///readme.md"])
    other = await listen(engine, "listen-other", resourceSubscriptions=["file:///other.md"])
    await next_item(readme)
    await next_item(other)

    registry.resource_updated("file:///readme.md")
    engine.close()

    assert await next_item(readme) == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {SUBSCRIPTION_ID: "listen-readme"}, "uri": "file:///readme.md"},
    }
    after = await next_item(other)
    assert after is not None and "result" in after


async def test_close_ends_the_stream_with_a_result_carrying_the_subscription_id(engine: Engine) -> None:
    items = await listen(engine, "listen-9", toolsListChanged=True)
    await next_item(items)

    engine.close()

    final = await next_item(items)
    assert final is not None
    assert final["id"] == "listen-9"
    assert final["result"]["resultType"] == "complete"
    assert final["result"]["_meta"][SUBSCRIPTION_ID] == "listen-9"
    with anyio.fail_after(5), pytest.raises(StopAsyncIteration):
        await anext(items)


async def test_listen_opened_after_close_ends_at_once(engine: Engine) -> None:
    engine.close()
    items = await listen(engine, "late", toolsListChanged=True)

    remaining = await collect(items)

    assert remaining[0] is not None and remaining[0]["method"] == "notifications/subscriptions/acknowledged"
    assert remaining[-1] is not None and remaining[-1]["id"] == "late"


async def test_idle_subscription_sends_keepalives(registry: ToolRegistry, clock: FakeClock) -> None:
    engine = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock), EngineOptions(keepalive_s=0.01))
    items = await listen(engine, "idle", toolsListChanged=True)
    await next_item(items)

    assert await next_item(items) is None

    engine.close()
    final = await next_item(items)
    assert final is not None and final["id"] == "idle"


async def test_listen_with_a_malformed_filter_is_invalid_params(engine: Engine) -> None:
    reply = await request(engine, "subscriptions/listen", {"notifications": {"toolsListChanged": "sometimes"}})

    assert error(reply)["code"] == -32602
