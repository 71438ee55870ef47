"""The per-request envelope of 2026-07-28: required ``_meta`` keys and the SEP-2243 headers."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ext_tasks.protocol.envelope import Envelope, check_envelope, decode_header_value, encode_header_value
from ext_tasks.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    UNSUPPORTED_PROTOCOL_VERSION,
    HeaderMismatch,
    InvalidParams,
    MissingMeta,
    UnsupportedProtocolVersion,
)
from ext_tasks.protocol.jsonrpc import Request

VERSION = "2026-07-28"
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL = "io.modelcontextprotocol/logLevel"


def request(
    method: str = "tools/list", params: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
) -> Request:
    """A request whose ``_meta`` holds the required keys, updated with ``meta``."""
    body = dict(params or {})
    body["_meta"] = {PROTOCOL_VERSION: VERSION, CAPABILITIES: {}, **(meta or {})}
    return Request(id=1, method=method, params=body)


def headers_for(req: Request, **overrides: list[str] | None) -> dict[str, list[str]]:
    """The headers a conforming client sends for ``req``; ``overrides`` replace (None removes) them."""
    headers: dict[str, list[str]] = {
        "mcp-protocol-version": [VERSION],
        "mcp-method": [req.method],
    }
    for field in ("name", "uri", "taskId"):
        value = req.params.get(field)
        if isinstance(value, str):
            headers["mcp-name"] = [encode_header_value(value)]
    for key, value in overrides.items():
        name = key.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


def check(req: Request, header_params: dict[str, str] | None = None, **overrides: list[str] | None) -> Envelope:
    return check_envelope(req, headers_for(req, **overrides), header_params)


def header_mismatch(req: Request, header_params: dict[str, str] | None = None, **overrides: list[str] | None) -> str:
    with pytest.raises(HeaderMismatch) as caught:
        check(req, header_params, **overrides)
    assert caught.value.code == HEADER_MISMATCH
    assert caught.value.http_status == 400
    return caught.value.message


# --- _meta ----------------------------------------------------------------------------------------


def test_valid_request_yields_its_envelope() -> None:
    info = {"name": "client", "version": "1.0"}
    req = request(meta={CAPABILITIES: {"sampling": {}}, CLIENT_INFO: info})

    envelope = check(req)

    assert envelope == Envelope(
        protocol_version=VERSION,
        client_capabilities={"sampling": {}},
        client_info=info,
        log_level=None,
        progress_token=None,
    )


@pytest.mark.parametrize(
    "meta_value",
    [
        None,
        "not an object",
        {},
        {CAPABILITIES: {}},
        {PROTOCOL_VERSION: VERSION},
        {PROTOCOL_VERSION: 20260728, CAPABILITIES: {}},
        {PROTOCOL_VERSION: VERSION, CAPABILITIES: None},
        {PROTOCOL_VERSION: VERSION, CAPABILITIES: ["sampling"]},
    ],
    ids=[
        "no-meta",
        "meta-not-object",
        "meta-empty",
        "no-protocol-version",
        "no-client-capabilities",
        "protocol-version-not-string",
        "capabilities-null",
        "capabilities-list",
    ],
)
def test_missing_or_malformed_required_meta_is_invalid_params_with_http_400(meta_value: object) -> None:
    params: dict[str, Any] = {} if meta_value is None else {"_meta": meta_value}
    req = Request(id=1, method="tools/list", params=params)

    with pytest.raises(MissingMeta) as caught:
        check_envelope(req, {"mcp-protocol-version": [VERSION], "mcp-method": ["tools/list"]})

    assert caught.value.code == INVALID_PARAMS
    assert caught.value.http_status == 400


def test_missing_meta_is_reported_before_the_headers_are_looked_at() -> None:
    req = Request(id=1, method="tools/list", params={})

    with pytest.raises(MissingMeta):
        check_envelope(req, {})


def test_client_info_is_optional() -> None:
    assert check(request()).client_info is None


def test_client_info_that_is_not_an_object_is_ignored() -> None:
    assert check(request(meta={CLIENT_INFO: "client/1.0"})).client_info is None


def test_empty_capabilities_mean_no_optional_capabilities() -> None:
    assert check(request()).client_capabilities == {}


# --- MCP-Protocol-Version ---------------------------------------------------------------------------


def test_missing_protocol_version_header_is_a_header_mismatch() -> None:
    message = header_mismatch(request(), mcp_protocol_version=None)

    assert "MCP-Protocol-Version" in message


def test_protocol_version_header_that_differs_from_meta_is_a_header_mismatch() -> None:
    message = header_mismatch(request(), mcp_protocol_version=["2025-11-25"])

    assert "MCP-Protocol-Version" in message


def test_unsupported_version_is_refused_with_supported_and_requested() -> None:
    req = request(meta={PROTOCOL_VERSION: "1900-01-01"})

    with pytest.raises(UnsupportedProtocolVersion) as caught:
        check(req, mcp_protocol_version=["1900-01-01"])

    assert caught.value.code == UNSUPPORTED_PROTOCOL_VERSION
    assert caught.value.http_status == 400
    assert caught.value.to_error()["data"] == {"supported": [VERSION], "requested": "1900-01-01"}


def test_version_mismatch_is_reported_before_an_unsupported_version() -> None:
    req = request(meta={PROTOCOL_VERSION: "1900-01-01"})

    header_mismatch(req, mcp_protocol_version=[VERSION])


# --- Mcp-Method -------------------------------------------------------------------------------------


def test_missing_method_header_is_a_header_mismatch() -> None:
    message = header_mismatch(request(), mcp_method=None)

    assert "Mcp-Method" in message


def test_method_header_that_differs_from_the_body_is_a_header_mismatch() -> None:
    message = header_mismatch(request("tools/list"), mcp_method=["prompts/list"])

    assert "'prompts/list'" in message
    assert "'tools/list'" in message


@pytest.mark.parametrize("value", ["TOOLS/LIST", "Tools/List", "tools/List"])
def test_method_header_value_is_case_sensitive(value: str) -> None:
    header_mismatch(request("tools/list"), mcp_method=[value])


def test_method_header_that_is_empty_counts_as_missing() -> None:
    header_mismatch(request(), mcp_method=[])


# --- Mcp-Name ---------------------------------------------------------------------------------------

NAMED = [
    ("tools/call", {"name": "get_weather", "arguments": {}}, "get_weather"),
    ("prompts/get", {"name": "greeting"}, "greeting"),
    ("resources/read", {"uri": "file:///project/readme.md"}, "file:///project/readme.md"),
    ("tasks/get", {"taskId": "786512e2-1"}, "786512e2-1"),
    ("tasks/update", {"taskId": "786512e2-1"}, "786512e2-1"),
    ("tasks/cancel", {"taskId": "786512e2-1"}, "786512e2-1"),
]


@pytest.mark.parametrize(("method", "params", "name"), NAMED, ids=[item[0] for item in NAMED])
def test_name_header_matching_the_body_is_accepted(method: str, params: dict[str, Any], name: str) -> None:
    req = request(method, params)

    check(req, mcp_name=[name])


@pytest.mark.parametrize(("method", "params", "name"), NAMED, ids=[item[0] for item in NAMED])
def test_missing_name_header_is_a_header_mismatch_in_strict_mode(
    method: str, params: dict[str, Any], name: str
) -> None:
    req = request(method, params)
    with pytest.raises(HeaderMismatch, match="required header Mcp-Name is missing"):
        check_envelope(req, headers_for(req, mcp_name=None), strict_headers=True)


@pytest.mark.parametrize(("method", "params", "name"), NAMED, ids=[item[0] for item in NAMED])
def test_missing_name_header_is_tolerated_only_on_task_methods(method: str, params: dict[str, Any], name: str) -> None:
    req = request(method, params)
    if method.startswith("tasks/"):
        assert check(req, mcp_name=None).tolerated_headers == ("Mcp-Name",)
        assert check(req).tolerated_headers == ()
    else:
        assert "Mcp-Name" in header_mismatch(req, mcp_name=None)


@pytest.mark.parametrize(("method", "params", "name"), NAMED, ids=[item[0] for item in NAMED])
def test_name_header_that_differs_from_the_body_is_a_header_mismatch(
    method: str, params: dict[str, Any], name: str
) -> None:
    message = header_mismatch(request(method, params), mcp_name=[name + "-other"])

    assert "Mcp-Name" in message


def test_name_header_is_case_sensitive() -> None:
    header_mismatch(request("tools/call", {"name": "get_weather"}), mcp_name=["GET_WEATHER"])


def test_methods_without_a_name_field_need_no_name_header() -> None:
    check(request("tools/list"), mcp_name=None)


# --- header values: trimming, base64, characters, duplicates ------------------------------------------


@pytest.mark.parametrize("padded", [" get_weather", "get_weather ", "\tget_weather\t", "  get_weather \t"])
def test_whitespace_around_a_header_value_is_trimmed(padded: str) -> None:
    check(request("tools/call", {"name": "get_weather"}), mcp_name=[padded])


def test_whitespace_inside_a_header_value_is_kept() -> None:
    header_mismatch(request("tools/call", {"name": "get_weather"}), mcp_name=["get _weather"])


@pytest.mark.parametrize("name", ["café", "天気", " padded ", "line\nbreak", "=?base64?looks-encoded?="])
def test_base64_encoded_name_header_is_decoded_before_comparing(name: str) -> None:
    encoded = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="

    check(request("tools/call", {"name": name}), mcp_name=[encoded])


def test_base64_encoded_header_that_decodes_to_another_value_is_a_header_mismatch() -> None:
    encoded = "=?base64?" + base64.b64encode(b"other").decode() + "?="

    header_mismatch(request("tools/call", {"name": "café"}), mcp_name=[encoded])


def test_base64_markers_are_case_sensitive() -> None:
    encoded = "=?BASE64?" + base64.b64encode(b"tool").decode() + "?="

    header_mismatch(request("tools/call", {"name": "tool"}), mcp_name=[encoded])


@pytest.mark.parametrize("payload", ["not base64!", "abc", "Y2Fm?"], ids=["bad-chars", "bad-length", "bad-char"])
def test_invalid_base64_in_a_header_is_a_header_mismatch(payload: str) -> None:
    message = header_mismatch(request("tools/call", {"name": "tool"}), mcp_name=[f"=?base64?{payload}?="])

    assert "base64" in message


def test_base64_header_that_is_not_utf8_is_a_header_mismatch() -> None:
    encoded = "=?base64?" + base64.b64encode(b"\xff\xfe\xfd").decode() + "?="

    header_mismatch(request("tools/call", {"name": "tool"}), mcp_name=[encoded])


@pytest.mark.parametrize("value", ["caf\u00e9", "tab\tinside", "nul\x00", "bell\x07", "del\x7f"])
def test_header_with_characters_outside_visible_ascii_is_a_header_mismatch(value: str) -> None:
    message = header_mismatch(request("tools/call", {"name": value}), mcp_name=[value])

    assert "invalid characters" in message


def test_duplicated_method_header_is_a_header_mismatch() -> None:
    message = header_mismatch(request("tools/list"), mcp_method=["tools/list", "tools/list"])

    assert "more than once" in message


def test_duplicated_name_header_is_a_header_mismatch_even_when_both_match() -> None:
    header_mismatch(request("tools/call", {"name": "tool"}), mcp_name=["tool", "tool"])


def test_duplicated_protocol_version_header_is_a_header_mismatch() -> None:
    header_mismatch(request(), mcp_protocol_version=[VERSION, VERSION])


@pytest.mark.parametrize("value", ["plain", "get_weather", "a b", "x=?base64?"])
def test_plain_ascii_values_are_sent_unencoded_and_decode_to_themselves(value: str) -> None:
    assert encode_header_value(value) == value
    assert decode_header_value(encode_header_value(value)) == value


@pytest.mark.parametrize("value", ["café", " lead", "trail ", "=?base64?abc?=", "新", "a\x01b"])
def test_values_that_are_not_plain_ascii_round_trip_through_the_base64_form(value: str) -> None:
    encoded = encode_header_value(value)

    assert encoded.startswith("=?base64?")
    assert encoded.endswith("?=")
    assert decode_header_value(encoded) == value


# --- Mcp-Param-* ------------------------------------------------------------------------------------


def call(arguments: dict[str, Any]) -> Request:
    return request("tools/call", {"name": "deploy", "arguments": arguments})


def test_param_header_matching_a_string_argument_is_accepted() -> None:
    check(call({"region": "eu-west-1"}), {"Region": "region"}, mcp_param_region=["eu-west-1"])


def test_param_header_that_differs_from_a_string_argument_is_a_header_mismatch() -> None:
    message = header_mismatch(call({"region": "eu-west-1"}), {"Region": "region"}, mcp_param_region=["us-east-1"])

    assert "Mcp-Param-Region" in message


def test_param_header_string_comparison_is_case_sensitive() -> None:
    header_mismatch(call({"region": "eu-west-1"}), {"Region": "region"}, mcp_param_region=["EU-WEST-1"])


def test_param_header_for_a_non_ascii_string_is_decoded_from_base64() -> None:
    check(call({"city": "Zürich"}), {"City": "city"}, mcp_param_city=[encode_header_value("Zürich")])


@pytest.mark.parametrize("header", ["42", "42.0", "4.2e1", " 42 ", "042"])
def test_param_header_for_an_integer_argument_compares_numerically(header: str) -> None:
    check(call({"count": 42}), {"Count": "count"}, mcp_param_count=[header])


@pytest.mark.parametrize("header", ["43", "forty-two", "", "nan", "inf"])
def test_param_header_for_an_integer_argument_with_another_number_is_a_header_mismatch(header: str) -> None:
    header_mismatch(call({"count": 42}), {"Count": "count"}, mcp_param_count=[header])


def test_param_header_for_a_large_integer_argument_must_equal_it_exactly() -> None:
    # 2**53 + 1 and 2**53 are different integers, even though they are the same double.
    header_mismatch(call({"count": 2**53 + 1}), {"Count": "count"}, mcp_param_count=[str(2**53)])


@pytest.mark.parametrize(("value", "header"), [(True, "true"), (False, "false")])
def test_param_header_for_a_boolean_argument_is_true_or_false(value: bool, header: str) -> None:
    check(call({"dry": value}), {"Dry-Run": "dry"}, mcp_param_dry_run=[header])


@pytest.mark.parametrize(("value", "header"), [(True, "false"), (True, "1"), (True, "True"), (False, "0")])
def test_param_header_for_a_boolean_argument_spelled_otherwise_is_a_header_mismatch(value: bool, header: str) -> None:
    header_mismatch(call({"dry": value}), {"Dry-Run": "dry"}, mcp_param_dry_run=[header])


def test_missing_param_header_for_a_present_argument_is_a_header_mismatch() -> None:
    message = header_mismatch(call({"region": "eu-west-1"}), {"Region": "region"})

    assert "Mcp-Param-Region" in message
    assert "missing" in message


def test_param_header_without_the_argument_is_a_header_mismatch() -> None:
    message = header_mismatch(call({}), {"Region": "region"}, mcp_param_region=["eu-west-1"])

    assert "Mcp-Param-Region" in message


def test_no_param_header_is_needed_when_the_argument_is_absent_or_null() -> None:
    check(call({}), {"Region": "region"})
    check(call({"region": None}), {"Region": "region"})


def test_duplicated_param_header_is_a_header_mismatch() -> None:
    header_mismatch(call({"region": "eu"}), {"Region": "region"}, mcp_param_region=["eu", "eu"])


# --- logLevel and progressToken ----------------------------------------------------------------------


@pytest.mark.parametrize("level", ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"])
def test_every_logging_level_of_the_spec_is_accepted(level: str) -> None:
    envelope = check(request(meta={LOG_LEVEL: level}))

    assert envelope.log_level == level
    assert envelope.wants_stream()


@pytest.mark.parametrize("level", ["verbose", "INFO", "", 3])
def test_unknown_logging_level_is_invalid_params(level: object) -> None:
    with pytest.raises(InvalidParams) as caught:
        check(request(meta={LOG_LEVEL: level}))

    assert caught.value.code == INVALID_PARAMS


@pytest.mark.parametrize("token", ["progress-1", 7, 0, ""])
def test_string_or_integer_progress_token_is_accepted(token: str | int) -> None:
    envelope = check(request(meta={"progressToken": token}))

    assert envelope.progress_token == token
    assert envelope.wants_stream()


@pytest.mark.parametrize("token", [True, 1.5, [1], {"id": 1}])
def test_progress_token_that_is_not_a_string_or_an_integer_is_invalid_params(token: object) -> None:
    with pytest.raises(InvalidParams) as caught:
        check(request(meta={"progressToken": token}))

    assert caught.value.code == INVALID_PARAMS


def test_request_without_progress_token_or_log_level_does_not_want_a_stream() -> None:
    assert not check(request()).wants_stream()
