"""Every protocol failure maps to the JSON-RPC code and HTTP status of protocol.md §1.4."""

from __future__ import annotations

import pytest

from ext_tasks.auth import Unauthenticated
from ext_tasks.protocol.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LIMIT_EXCEEDED,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    BodyTooLarge,
    Busy,
    ForbiddenOrigin,
    HeaderMismatch,
    InternalError,
    InvalidParams,
    InvalidRequest,
    InvalidRequestState,
    LimitExceeded,
    MethodNotFound,
    MissingClientCapability,
    MissingMeta,
    ParseError,
    ProtocolError,
    RequestStateTooLarge,
    ResourceNotFound,
    UnsupportedProtocolVersion,
)


@pytest.mark.parametrize(
    ("error", "code", "http_status"),
    [
        (ParseError("Parse error"), PARSE_ERROR, 400),
        (InvalidRequest("Invalid Request"), INVALID_REQUEST, 400),
        (BodyTooLarge("too large"), INVALID_REQUEST, 413),
        (ForbiddenOrigin("Forbidden"), INVALID_REQUEST, 403),
        (Unauthenticated("Unauthorized"), INVALID_REQUEST, 401),
        (MethodNotFound("Method not found: x"), METHOD_NOT_FOUND, 404),
        (InvalidParams("Invalid params"), INVALID_PARAMS, 200),
        (MissingMeta("Invalid params: params._meta is required"), INVALID_PARAMS, 400),
        (InvalidRequestState("expired"), INVALID_PARAMS, 200),
        (ResourceNotFound("file:///missing"), INVALID_PARAMS, 200),
        (InternalError("Internal error"), INTERNAL_ERROR, 500),
        (Busy("retry"), INTERNAL_ERROR, 503),
        (RequestStateTooLarge(300_000, 262_144), INTERNAL_ERROR, 413),
        (LimitExceeded("slow down", limit="poll_rate", retry_after_s=2), LIMIT_EXCEEDED, 429),
        (HeaderMismatch("Header mismatch"), HEADER_MISMATCH, 400),
        (MissingClientCapability({"elicitation": {}}), MISSING_REQUIRED_CLIENT_CAPABILITY, 400),
        (UnsupportedProtocolVersion("1900-01-01", ("2026-07-28",)), UNSUPPORTED_PROTOCOL_VERSION, 400),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, ProtocolError) else str(value),
)
def test_each_error_carries_its_json_rpc_code_and_http_status(
    error: ProtocolError, code: int, http_status: int
) -> None:
    assert error.code == code
    assert error.http_status == http_status
    assert error.to_error()["code"] == code


def test_errors_that_mean_retry_later_ask_for_retry_after_and_auth_failures_for_a_scheme() -> None:
    assert LimitExceeded("slow down", limit="poll_rate", retry_after_s=0).http_headers() == {"Retry-After": "1"}
    assert Busy("retry").http_headers() == {"Retry-After": "1"}
    assert Unauthenticated("Unauthorized").http_headers() == {"WWW-Authenticate": "Bearer"}
    assert InvalidParams("Invalid params").http_headers() == {}


def test_to_error_without_data_has_only_code_and_message() -> None:
    assert MethodNotFound("Method not found: ping").to_error() == {
        "code": METHOD_NOT_FOUND,
        "message": "Method not found: ping",
    }


def test_to_error_copies_data_into_a_plain_dict() -> None:
    error = ProtocolError("boom", data={"detail": [1, 2]})

    wire = error.to_error()

    assert wire == {"code": INTERNAL_ERROR, "message": "boom", "data": {"detail": [1, 2]}}
    assert type(wire["data"]) is dict


def test_error_message_is_also_the_exception_text() -> None:
    assert str(HeaderMismatch("Header mismatch: Mcp-Name")) == "Header mismatch: Mcp-Name"


def test_missing_client_capability_names_the_capability_object_in_data() -> None:
    error = MissingClientCapability({"elicitation": {"url": {}}})

    assert error.to_error()["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}
    assert "elicitation" in error.message


def test_missing_client_capability_accepts_a_custom_message() -> None:
    error = MissingClientCapability({"sampling": {}}, "Server requires sampling")

    assert error.to_error() == {
        "code": MISSING_REQUIRED_CLIENT_CAPABILITY,
        "message": "Server requires sampling",
        "data": {"requiredCapabilities": {"sampling": {}}},
    }


def test_unsupported_protocol_version_lists_supported_and_requested() -> None:
    error = UnsupportedProtocolVersion("1900-01-01", ("2026-07-28",))

    assert error.to_error()["data"] == {"supported": ["2026-07-28"], "requested": "1900-01-01"}


def test_resource_not_found_is_invalid_params_with_the_uri() -> None:
    error = ResourceNotFound("file:///nowhere.txt")

    assert isinstance(error, InvalidParams)
    assert error.to_error()["data"] == {"uri": "file:///nowhere.txt"}
    assert "file:///nowhere.txt" in error.message


@pytest.mark.parametrize("reason", ["expired", "principal", "bad signature or unknown key", "audience", ""])
def test_invalid_request_state_tells_the_client_one_fixed_message_whatever_the_reason(reason: str) -> None:
    error = InvalidRequestState(reason)

    assert error.reason == reason
    assert error.code == INVALID_PARAMS
    assert error.message == "Invalid or expired requestState"
    assert error.to_error() == {
        "code": INVALID_PARAMS,
        "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"},
    }


def test_invalid_request_state_is_an_invalid_params_error() -> None:
    assert isinstance(InvalidRequestState("expired"), InvalidParams)


def test_missing_meta_is_an_invalid_params_error() -> None:
    assert isinstance(MissingMeta("x"), InvalidParams)
