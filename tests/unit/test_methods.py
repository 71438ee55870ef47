"""The core method handlers (``ext_tasks.methods``) through the engine: ``server/discover``, the lists,
``tools/call`` (results, invalid calls, a tool's own failures), ``prompts/get``, ``resources/read``
and ``completion/complete``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from ext_tasks import ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.protocol.errors import INVALID_PARAMS
from tests.unit.engine_support import (
    SERVER_INFO,
    VERSION,
    call_tool,
    error,
    error_of,
    request,
    result,
    result_of,
    text_of,
)

pytestmark = pytest.mark.anyio


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
    err = await error_of(engine, "tools/call", {"name": "nope", "arguments": {}}, status=None, code=INVALID_PARAMS)

    assert "nope" in err["message"]


@pytest.mark.parametrize(
    "arguments",
    [{"a": "one", "b": 2}, {"a": 1}, {}],
    ids=["wrong-type", "missing-b", "missing-both"],
)
async def test_invalid_arguments_are_invalid_params(engine: Engine, arguments: dict[str, Any]) -> None:
    reply = await call_tool(engine, "add", arguments)

    assert error(reply)["code"] == INVALID_PARAMS


@pytest.mark.parametrize("name", [["add"], {"tool": "add"}, 7, None], ids=["list", "object", "number", "null"])
async def test_tool_name_that_is_not_a_string_is_invalid_params(engine: Engine, name: object) -> None:
    reply = await request(engine, "tools/call", {"name": name, "arguments": {}})

    assert error(reply)["code"] == INVALID_PARAMS


async def test_arguments_that_are_not_an_object_are_invalid_params(engine: Engine) -> None:
    reply = await request(engine, "tools/call", {"name": "add", "arguments": [1, 2]})

    assert error(reply)["code"] == INVALID_PARAMS


async def test_unknown_resource_is_invalid_params_naming_the_uri(engine: Engine) -> None:
    err = await error_of(engine, "resources/read", {"uri": "file:///missing.md"}, status=None, code=INVALID_PARAMS)

    assert err["data"] == {"uri": "file:///missing.md"}


async def test_unknown_prompt_is_invalid_params(engine: Engine) -> None:
    await error_of(engine, "prompts/get", {"name": "nope"}, status=None, code=INVALID_PARAMS)


async def test_list_with_a_cursor_this_server_never_issued_is_invalid_params(engine: Engine) -> None:
    await error_of(engine, "tools/list", {"cursor": "page-2"}, status=None, code=INVALID_PARAMS)


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
    assert "secret-path" not in json.dumps(reply.wire)
    assert "/srv/keys" not in text_of(found)
    assert any("crash" in record.getMessage() for record in caplog.records)


# --- completion -------------------------------------------------------------------------------------


async def test_completion_asks_the_registered_completer_and_caps_its_values_at_100(
    engine: Engine, registry: ToolRegistry
) -> None:
    asked: list[tuple[str, str, dict[str, str]]] = []

    @registry.completion("ref/prompt", "greeting")
    async def names(argument: str, value: str, context: Mapping[str, str]) -> list[str]:
        asked.append((argument, value, dict(context)))
        return [f"{value}{n}" for n in range(150)]

    found = await result_of(
        engine,
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "greeting"},
            "argument": {"name": "name", "value": "A"},
            "context": {"arguments": {"title": "Dr"}},
        },
    )

    assert asked == [("name", "A", {"title": "Dr"})]
    assert found["completion"] == {"values": [f"A{n}" for n in range(100)], "total": 150, "hasMore": True}


async def test_completion_without_a_completer_offers_no_values(engine: Engine) -> None:
    found = await result_of(
        engine,
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "file:///notes/{slug}.txt"},
            "argument": {"name": "slug", "value": "t"},
        },
    )

    assert found["completion"] == {"values": [], "total": 0, "hasMore": False}


async def test_completion_for_an_unknown_prompt_is_invalid_params(engine: Engine) -> None:
    err = await error_of(
        engine,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "name", "value": ""}},
        status=None,
        code=INVALID_PARAMS,
    )

    assert "nope" in err["message"]
