"""JSON-RPC 2.0 decoding: one message per POST, classified as request, notification or client response."""

from __future__ import annotations

import json

import msgspec
import pytest

from ext_tasks.protocol.errors import INVALID_REQUEST, PARSE_ERROR, InvalidRequest, ParseError
from ext_tasks.protocol.jsonrpc import (
    MAX_DEPTH,
    Notification,
    Request,
    Response,
    decode_message,
    encode,
    error_message,
    id_of,
    result_message,
)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"not json",
        b"{'jsonrpc': '2.0'}",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list",}',
    ],
)
def test_body_that_is_not_json_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError) as caught:
        decode_message(body)

    assert caught.value.code == PARSE_ERROR
    assert caught.value.http_status == 400


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe", b'{"jsonrpc":"2.0","id":1,"method":"tools/\xfflist"}'],
    ids=["invalid-utf8-bytes", "invalid-utf8-inside-a-string"],
)
def test_body_that_is_not_utf8_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError):
        decode_message(body)


@pytest.mark.parametrize(
    "body",
    [b"[]", b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]'],
    ids=["empty-batch", "batch-of-one"],
)
def test_batches_are_refused_as_invalid_requests(body: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_message(body)

    assert caught.value.code == INVALID_REQUEST
    assert "batch" in caught.value.message


@pytest.mark.parametrize("body", [b'"tools/list"', b"42", b"null", b"true"])
def test_json_that_is_not_an_object_is_an_invalid_request(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_message(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"id":1,"method":"tools/list"}',
        b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}',
        b'{"jsonrpc":2.0,"id":1,"method":"tools/list"}',
        b'{"jsonrpc":null,"id":1,"method":"tools/list"}',
    ],
    ids=["missing", "1.0", "number", "null"],
)
def test_jsonrpc_member_other_than_2_0_is_an_invalid_request(body: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_message(body)

    assert '"jsonrpc"' in caught.value.message


@pytest.mark.parametrize(
    "raw_id",
    [b"true", b"false", b"null", b"1.5", b"1.0", b"[1]", b'{"a":1}'],
)
def test_id_that_is_not_a_string_or_an_integer_is_an_invalid_request(raw_id: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_message(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"tools/list"}')

    assert '"id"' in caught.value.message


@pytest.mark.parametrize(("raw_id", "expected"), [(b'"abc"', "abc"), (b"7", 7), (b"0", 0), (b"-3", -3), (b'""', "")])
def test_string_and_integer_ids_are_kept_as_sent(raw_id: bytes, expected: str | int) -> None:
    message = decode_message(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"tools/list"}')

    assert isinstance(message, Request)
    assert message.id == expected
    assert type(message.id) is type(expected)


def test_message_with_id_and_method_is_a_request() -> None:
    message = decode_message(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}')

    assert message == Request(id=1, method="tools/call", params={"name": "x"})


def test_request_without_params_gets_empty_params() -> None:
    message = decode_message(b'{"jsonrpc":"2.0","id":"a","method":"tools/list"}')

    assert message == Request(id="a", method="tools/list", params={})


def test_message_with_method_and_no_id_is_a_notification() -> None:
    message = decode_message(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}')

    assert message == Notification(method="notifications/cancelled", params={"requestId": 1})


def test_message_with_id_and_result_is_a_client_response() -> None:
    message = decode_message(b'{"jsonrpc":"2.0","id":5,"result":{"roots":[]}}')

    assert message == Response(id=5, result={"roots": []}, error=None)


def test_message_with_id_and_error_is_a_client_response() -> None:
    message = decode_message(b'{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"no"}}')

    assert message == Response(id="r", result=None, error={"code": -1, "message": "no"})


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"x"}}',
        b'{"jsonrpc":"2.0","id":5}',
        b'{"jsonrpc":"2.0","result":{}}',
        b'{"jsonrpc":"2.0","id":5,"result":[1]}',
        b'{"jsonrpc":"2.0","id":5,"error":"bad"}',
    ],
    ids=["result-and-error", "neither", "result-without-id", "result-not-object", "error-not-object"],
)
def test_malformed_responses_are_invalid_requests(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_message(body)


@pytest.mark.parametrize("method", [b'""', b"3", b"null", b'["tools/list"]'])
def test_method_that_is_not_a_non_empty_string_is_an_invalid_request(method: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_message(b'{"jsonrpc":"2.0","id":1,"method":' + method + b"}")

    assert '"method"' in caught.value.message


@pytest.mark.parametrize("params", [b"[]", b"[1,2]", b'"x"', b"3", b"true"])
def test_params_that_are_not_an_object_are_an_invalid_request(params: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_message(b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":' + params + b"}")

    assert '"params"' in caught.value.message


def test_notification_params_that_are_not_an_object_are_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest):
        decode_message(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}')


def test_id_of_recovers_the_id_of_a_body_that_failed_later_checks() -> None:
    assert id_of(b'{"jsonrpc":"2.0","id":"x-1","method":"nope"}') == "x-1"
    assert id_of(b'{"jsonrpc":"2.0","id":3,"params":[]}') == 3


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"id":true}', b'{"id":1.5}', b'{"method":"x"}'])
def test_id_of_is_none_when_there_is_no_usable_id(body: bytes) -> None:
    assert id_of(body) is None


def test_error_message_without_a_known_id_carries_a_null_id() -> None:
    message = msgspec.to_builtins(error_message(None, ParseError("Parse error")))

    assert message == {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "Parse error"}}


def test_error_message_echoes_the_request_id() -> None:
    message = msgspec.to_builtins(error_message("abc", InvalidRequest("Invalid Request")))

    assert message["id"] == "abc"
    assert message["error"]["code"] == INVALID_REQUEST


def test_encoded_result_decodes_back_to_the_same_message() -> None:
    message = result_message(9, {"resultType": "complete", "text": "héllo"})

    assert decode_message(encode(message)) == Response(
        id=9, result={"resultType": "complete", "text": "héllo"}, error=None
    )


# --- nesting depth ------------------------------------------------------------------------------------


def nested_body(
    depth: int, kind: str = "list", where: str = "arguments", request_id: bytes = b"1", *, padding: int = 0
) -> bytes:
    """A tools/call whose deepest value is ``depth`` levels down, counting the message object as 1;
    ``padding`` adds that many shallow arrays, so the body has more brackets than levels."""
    prefix, suffix, levels = {
        "arguments": (b'"params":{"name":"x","arguments":{"deep":', b"}}", 3),
        "inputResponses": (b'"params":{"name":"x","inputResponses":{"k":{"action":"accept","content":', b"}}}", 4),
        "meta": (b'"params":{"name":"x","_meta":{"deep":', b"}}", 3),
        "params": (b'"params":', b"", 1),  # params itself is the deep value (an object, as it must be)
    }[where]
    opening, closing = (b"[", b"]") if kind == "list" and where != "params" else (b'{"a":', b"}")
    inner = depth - levels
    deep = opening * inner + b"0" + closing * inner
    pad = b'"pad":[' + b",".join([b"[]"] * padding) + b"],"
    return b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"tools/call",' + pad + prefix + deep + suffix + b"}"


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


@pytest.mark.parametrize("padding", [0, 50], ids=["no-padding", "padding"])
@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("where", ["arguments", "inputResponses", "meta", "params"])
def test_nesting_down_to_the_depth_limit_is_accepted(kind: str, where: str, padding: int) -> None:
    body = nested_body(MAX_DEPTH, kind, where, padding=padding)
    assert depth_of(json.loads(body)) == MAX_DEPTH

    message = decode_message(body)

    assert isinstance(message, Request)


@pytest.mark.parametrize("padding", [0, 50], ids=["no-padding", "padding"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 970, 990])
@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("where", ["arguments", "inputResponses", "meta", "params"])
def test_nesting_deeper_than_the_limit_is_a_parse_error(depth: int, kind: str, where: str, padding: int) -> None:
    with pytest.raises(ParseError) as caught:
        decode_message(nested_body(depth, kind, where, padding=padding))

    assert caught.value.code == PARSE_ERROR
    assert caught.value.http_status == 400
    assert caught.value.message == f"Parse error: JSON nested deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_nesting_deeper_than_the_decoder_itself_goes_is_the_same_parse_error(depth: int) -> None:
    for body in (nested_body(depth), b"[" * depth):
        with pytest.raises(ParseError) as caught:
            decode_message(body)

        assert caught.value.message == f"Parse error: JSON nested deeper than {MAX_DEPTH} levels"


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = "[" * 5_000 + "{" * 5_000
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"t":"'
        + text.encode()
        + b'"}}}'
    )

    message = decode_message(body)

    assert isinstance(message, Request)
    assert message.params["arguments"]["t"] == text


def test_many_shallow_containers_are_not_nesting() -> None:
    items = b",".join([b'{"a":[1,{"b":[]}]}'] * 2_000)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"rows":[' + items + b"]}}}"

    message = decode_message(body)

    assert isinstance(message, Request)
    assert len(message.params["arguments"]["rows"]) == 2_000


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 980, 5_000])
def test_id_of_a_body_nested_too_deep_is_none(depth: int) -> None:
    assert id_of(nested_body(MAX_DEPTH, request_id=b"7")) == 7
    assert id_of(nested_body(depth, request_id=b"7")) is None
