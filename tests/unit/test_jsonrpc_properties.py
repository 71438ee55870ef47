"""Properties of :func:`ext_tasks.protocol.jsonrpc.decode_message`, for any bytes a client may send.

Its documented failures are :class:`ParseError` (not JSON, or nested deeper than ``MAX_DEPTH``) and
:class:`InvalidRequest` (JSON, but not a JSON-RPC message this server takes): nothing else may escape,
whatever the body, since any other exception would be an HTTP 500. A valid message decodes to the
typed message it was written from.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ext_tasks.protocol.errors import InvalidRequest, ParseError
from ext_tasks.protocol.jsonrpc import (
    MAX_DEPTH,
    Message,
    Notification,
    Request,
    Response,
    decode_message,
    encode,
    to_wire,
)
from tests.unit.properties import JSON_OBJECTS, JSON_VALUES, quick

IDS = st.text(max_size=12) | st.integers(min_value=-(2**63), max_value=2**63 - 1)
METHODS = st.text(min_size=1, max_size=24)
MESSAGES: st.SearchStrategy[Message] = st.one_of(
    st.builds(Request, id=IDS, method=METHODS, params=JSON_OBJECTS),
    st.builds(Notification, method=METHODS, params=JSON_OBJECTS),
    st.builds(Response, id=IDS, result=JSON_OBJECTS, error=st.none()),
    st.builds(Response, id=IDS, result=st.none(), error=JSON_OBJECTS),
)


def decoded_or_refusal(body: bytes) -> Message | ParseError | InvalidRequest:
    """The message, or the documented refusal; any other exception propagates and fails the test."""
    try:
        return decode_message(body)
    except (ParseError, InvalidRequest) as refused:
        return refused


@quick(300)
@given(body=st.binary(max_size=300))
def test_any_bytes_decode_or_are_refused_as_documented(body: bytes) -> None:
    outcome = decoded_or_refusal(body)
    assert isinstance(outcome, Request | Notification | Response | ParseError | InvalidRequest)


@quick(100)
@given(value=JSON_VALUES)
def test_any_json_value_decodes_or_is_an_invalid_request(value: Any) -> None:
    # Valid JSON, shallower than MAX_DEPTH: never a parse error.
    assert not isinstance(decoded_or_refusal(encode(value)), ParseError)


@quick(150)
@given(message=MESSAGES, data=st.data())
def test_a_valid_message_damaged_anywhere_decodes_or_is_refused_as_documented(
    message: Message, data: st.DataObject
) -> None:
    body = bytearray(encode(to_wire(message)))
    index = data.draw(st.integers(0, len(body) - 1), label="index")
    damage = data.draw(st.sampled_from(["flip", "cut", "insert"]), label="damage")
    if damage == "flip":
        body[index] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    elif damage == "cut":
        del body[index:]
    else:
        body[index:index] = data.draw(st.binary(min_size=1, max_size=4), label="inserted")
    decoded_or_refusal(bytes(body))


@quick(100)
@given(message=MESSAGES)
def test_a_valid_message_round_trips_to_its_typed_message(message: Message) -> None:
    decoded = decode_message(encode(to_wire(message)))
    assert type(decoded) is type(message)
    assert decoded == message
    assert to_wire(decoded) == to_wire(message)


@quick(100)
@given(depth=st.integers(1, 2 * MAX_DEPTH))
def test_a_message_is_a_parse_error_exactly_when_nested_deeper_than_max_depth(depth: int) -> None:
    # The message object is level 1 and params level 2; the argument below adds ``depth`` levels.
    nested: Any = 0
    for _ in range(depth):
        nested = [nested]
    body = encode({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": nested}})
    outcome = decoded_or_refusal(body)
    if 2 + depth > MAX_DEPTH:
        assert isinstance(outcome, ParseError)
    else:
        assert isinstance(outcome, Request)
