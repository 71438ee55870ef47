"""The client's parts that need no server: the headers it mirrors, the arguments the CLI parses, how long it
waits before a resend, the capabilities its callbacks declare, and the exceptions a JSON-RPC error becomes."""

from __future__ import annotations

import email.utils
from typing import Any

import pytest

from ext_tasks.client import errors
from ext_tasks.client.commands import UsageError, parse_items
from ext_tasks.client.inputs import TASKS_EXTENSION, InputHandlers
from ext_tasks.client.transport import RetryPolicy, retry_after_seconds
from ext_tasks.protocol.envelope import check_envelope, decode_header_value
from ext_tasks.protocol.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LIMIT_EXCEEDED,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from ext_tasks.protocol.jsonrpc import Request
from ext_tasks.protocol.outbound import InvalidHeaderAnnotation, header_params_of, mirror_headers
from ext_tasks.protocol.versions import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_2026_07_28

pytestmark = pytest.mark.anyio


def _tool(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"name": "t", "inputSchema": {"type": "object", "properties": properties}}


# --- headers ----------------------------------------------------------------------------------------


def test_header_params_follow_the_annotation_not_the_property_name() -> None:
    tool = _tool(method_val={"type": "string", "x-mcp-header": "Method"}, plain={"type": "string"})
    assert header_params_of(tool) == {"Method": "method_val"}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"type": "string", "x-mcp-header": ""}, "not a header name"),
        ({"type": "string", "x-mcp-header": "My Region"}, "not a header name"),
        ({"type": "string", "x-mcp-header": "Region:Primary"}, "not a header name"),
        ({"type": "string", "x-mcp-header": "Région"}, "not a header name"),
        ({"type": "string", "x-mcp-header": "Region\t1"}, "not a header name"),
        ({"type": "object", "x-mcp-header": "Region"}, "scalar"),
        ({"type": "array", "x-mcp-header": "Region"}, "scalar"),
        ({"type": "null", "x-mcp-header": "Region"}, "scalar"),
        ({"type": "number", "x-mcp-header": "Region"}, "scalar"),
    ],
)
def test_invalid_header_annotations_are_refused(spec: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidHeaderAnnotation, match=why):
        header_params_of(_tool(arg=spec))


def test_a_header_name_used_twice_in_any_case_is_refused() -> None:
    tool = _tool(a={"type": "string", "x-mcp-header": "MyField"}, b={"type": "string", "x-mcp-header": "myfield"})
    with pytest.raises(InvalidHeaderAnnotation, match="more than one"):
        header_params_of(tool)


def test_mirrored_headers_pass_the_servers_own_check() -> None:
    """What the client sends is what this server's envelope check accepts, value encodings included."""
    tool = _tool(
        region={"type": "string", "x-mcp-header": "Region"},
        priority={"type": "integer", "x-mcp-header": "Priority"},
        verbose={"type": "boolean", "x-mcp-header": "Verbose"},
        empty={"type": "string", "x-mcp-header": "Empty"},
        padded={"type": "string", "x-mcp-header": "Padded"},
        wide={"type": "string", "x-mcp-header": "Wide"},
        gone={"type": ["string", "null"], "x-mcp-header": "Gone"},
    )
    params = {
        "name": "t",
        "arguments": {
            "region": "us-west1",
            "priority": 42,
            "verbose": False,
            "empty": "",
            "padded": " padded ",
            "wide": "Hello, 世界\r\n",
            "gone": None,
        },
        "_meta": {META_PROTOCOL_VERSION: MODERN_2026_07_28, META_CLIENT_CAPABILITIES: {}},
    }
    headers = mirror_headers(MODERN_2026_07_28, "tools/call", params, header_params_of(tool))
    assert headers["Mcp-Method"] == "tools/call" and headers["Mcp-Name"] == "t"
    assert headers["Mcp-Param-Priority"] == "42" and headers["Mcp-Param-Verbose"] == "false"
    assert headers["Mcp-Param-Empty"] == ""
    assert "Mcp-Param-Gone" not in headers
    assert headers["Mcp-Param-Wide"].startswith("=?base64?")
    assert decode_header_value(headers["Mcp-Param-Wide"]) == "Hello, 世界\r\n"
    assert decode_header_value(headers["Mcp-Param-Padded"]) == " padded "
    lowered = {name.lower(): [value] for name, value in headers.items()}
    request = Request(id=1, method="tools/call", params=params)
    check_envelope(request, lowered, header_params_of(tool))  # raises HeaderMismatch on any difference


def test_tasks_methods_name_their_task_in_mcp_name() -> None:
    headers = mirror_headers(MODERN_2026_07_28, "tasks/get", {"taskId": "ab.c"}, {})
    assert headers == {"MCP-Protocol-Version": MODERN_2026_07_28, "Mcp-Method": "tasks/get", "Mcp-Name": "ab.c"}


# --- the command line's arguments ---------------------------------------------------------------------


def test_items_follow_httpie() -> None:
    parsed = parse_items(["service=billing", "count:=3", 'tags:=["a","b"]', "note=a=b", "url=http://x:=y"])
    assert parsed == {"service": "billing", "count": 3, "tags": ["a", "b"], "note": "a=b", "url": "http://x:=y"}


@pytest.mark.parametrize("item", ["service", "=x", ":=1", "n:={not json"])
def test_bad_items_are_usage_errors(item: str) -> None:
    with pytest.raises(UsageError):
        parse_items([item])


# --- resends ------------------------------------------------------------------------------------------


def test_pauses_grow_to_a_cap_and_never_undercut_retry_after() -> None:
    policy = RetryPolicy(first_pause_s=0.25, max_pause_s=2.0)
    assert [policy.pause(n, None) for n in range(1, 6)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert policy.pause(1, 3.0) == 3.0
    assert policy.pause(4, 0.5) == 2.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    when = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert retry_after_seconds(when, now=1_000_000.0) == 30.0
    assert retry_after_seconds(when, now=2_000_000.0) == 0.0


# --- capabilities and answers -------------------------------------------------------------------------


async def _elicit(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"asked": params["message"]}}


def test_capabilities_are_what_the_callbacks_can_answer() -> None:
    assert InputHandlers().capabilities() == {"extensions": {TASKS_EXTENSION: {}}}
    assert InputHandlers(tasks=False).capabilities() == {}
    declared = InputHandlers(elicitation=_elicit, roots=[{"uri": "file:///srv"}]).capabilities()
    assert declared == {"elicitation": {}, "roots": {}, "extensions": {TASKS_EXTENSION: {}}}


async def test_answers_are_keyed_like_the_requests() -> None:
    handlers = InputHandlers(elicitation=_elicit, roots=[{"uri": "file:///srv", "name": "srv"}])
    answers = await handlers.answer({
        "who": {"method": "elicitation/create", "params": {"message": "Who?"}},
        "where": {"method": "roots/list"},
    })  # fmt: skip
    assert answers == {"who": {"action": "accept", "content": {"asked": "Who?"}},
                       "where": {"roots": [{"uri": "file:///srv", "name": "srv"}]}}  # fmt: skip


async def test_a_request_for_an_undeclared_capability_is_a_protocol_violation() -> None:
    with pytest.raises(errors.InvalidResponse, match="sampling/createMessage"):
        await InputHandlers(elicitation=_elicit).answer({"m": {"method": "sampling/createMessage", "params": {}}})


# --- errors -------------------------------------------------------------------------------------------


#: In the range MCP keeps for itself (-32020..-32099) but no code of this server: a plain RpcError.
UNASSIGNED_CODE = -32099


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (INVALID_PARAMS, errors.InvalidParams),
        (METHOD_NOT_FOUND, errors.MethodNotFound),
        (INTERNAL_ERROR, errors.InternalError),
        (HEADER_MISMATCH, errors.HeaderMismatch),
        (MISSING_REQUIRED_CLIENT_CAPABILITY, errors.MissingCapability),
        (UNSUPPORTED_PROTOCOL_VERSION, errors.UnsupportedVersion),
        (LIMIT_EXCEEDED, errors.LimitExceeded),
        (UNASSIGNED_CODE, errors.RpcError),
    ],
)
def test_json_rpc_errors_become_typed_exceptions(code: int, kind: type[errors.RpcError]) -> None:
    raised = errors.rpc_error({"code": code, "message": "m", "data": {"x": 1}}, 400)
    assert type(raised) is kind and raised.code == code and raised.data == {"x": 1} and raised.http_status == 400


def test_capability_and_version_errors_say_what_is_needed() -> None:
    missing = errors.rpc_error(
        {"code": MISSING_REQUIRED_CLIENT_CAPABILITY, "message": "m", "data": {"requiredCapabilities": {"sampling": {}}}}
    )
    assert isinstance(missing, errors.MissingCapability) and missing.required == {"sampling": {}}
    refused = errors.rpc_error(
        {"code": UNSUPPORTED_PROTOCOL_VERSION, "message": "m", "data": {"supported": ["2026-07-28"]}}
    )
    assert isinstance(refused, errors.UnsupportedVersion) and refused.supported == ["2026-07-28"]


def test_a_failed_task_carries_its_error() -> None:
    failed = errors.TaskFailed("t1", {"code": INTERNAL_ERROR, "message": "boom", "data": {"why": "x"}})
    assert (failed.task_id, failed.code, failed.message, failed.data) == ("t1", INTERNAL_ERROR, "boom", {"why": "x"})
