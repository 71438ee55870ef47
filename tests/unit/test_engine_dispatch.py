"""The engine's dispatch, driven in-process: bytes and headers in, a JSON or streamed reply out.

What every request goes through before and after its method: JSON-RPC decoding, the ``_meta`` and
SEP-2243 header checks (``Mcp-Param-*`` per the called tool), the one mapping of failures to JSON-RPC
errors with their HTTP status, and the choice between a JSON reply and an SSE stream of notifications.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from ext_tasks import Context, ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply, Reply, StreamReply
from tests.unit.engine_support import (
    ALICE,
    KEY,
    VERSION,
    FakeClock,
    call_tool,
    collect,
    error,
    error_of,
    json_reply,
    message,
    next_item,
    result,
    text_of,
)

pytestmark = pytest.mark.anyio


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
    err = await error_of(engine, method, params, status=404, code=METHOD_NOT_FOUND, request_id="req-404")

    assert method in err["message"]


async def test_request_without_meta_is_invalid_params_with_http_400(engine: Engine) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}).encode()
    headers = {"mcp-protocol-version": [VERSION], "mcp-method": ["tools/list"]}

    reply = await json_reply(engine, body, headers)

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == 3
    assert reply.wire["error"]["code"] == INVALID_PARAMS


async def test_body_that_is_not_json_is_a_parse_error_with_null_id(engine: Engine) -> None:
    reply = await json_reply(engine, b"{not json", {})

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] is None
    assert reply.wire["error"]["code"] == PARSE_ERROR


async def test_header_mismatch_answers_400_and_echoes_the_id(engine: Engine) -> None:
    body, headers = message("tools/list", request_id="h-1")
    headers["mcp-method"] = ["tools/call"]

    reply = await json_reply(engine, body, headers)

    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == "h-1"
    assert reply.wire["error"]["code"] == HEADER_MISMATCH


async def test_unsupported_version_answers_400_with_the_supported_versions(engine: Engine) -> None:
    body, headers = message("tools/list", protocol_version="1900-01-01")

    reply = await json_reply(engine, body, headers)

    assert reply.status == 400
    assert reply.message is not None
    assert reply.wire["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert reply.wire["error"]["data"] == {"supported": [VERSION], "requested": "1900-01-01"}


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
    assert reply.wire["error"]["code"] == INVALID_REQUEST


# --- Mcp-Param-* headers of a tool's arguments -------------------------------------------------------


async def test_tool_with_a_header_argument_needs_its_mcp_param_header(engine: Engine) -> None:
    await error_of(
        engine, "tools/call", {"name": "deploy", "arguments": {"region": "eu"}}, status=400, code=HEADER_MISMATCH
    )


async def test_tool_with_a_header_argument_runs_when_the_header_matches(engine: Engine) -> None:
    body, headers = message("tools/call", {"name": "deploy", "arguments": {"region": "eu-west-1"}})
    headers["mcp-param-region"] = ["eu-west-1"]

    reply = await json_reply(engine, body, headers)

    assert text_of(result(reply)) == "deployed to eu-west-1"


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
    assert error(reply)["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY


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
