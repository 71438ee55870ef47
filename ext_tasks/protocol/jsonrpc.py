"""JSON-RPC 2.0 envelopes: bytes in, typed message out; and the response/error/notification builders.

Only single messages are accepted: MCP 2026-07-28 sends one JSON-RPC message per POST and has no batches.
Nor is JSON nested deeper than :data:`MAX_DEPTH` levels (see :func:`decode_message`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from .errors import InvalidRequest, ParseError, ProtocolError

RequestId = str | int
#: A JSON-RPC result object, as the handlers build it.
Result = dict[str, Any]

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()

#: The deepest nesting of arrays and objects a message may have, the message object itself being
#: level 1. MCP messages are shallow (the content of an answer in ``inputResponses`` sits at level 6),
#: so this leaves tool arguments and answers some 95 levels of their own, while keeping every later
#: step that recurses over a value (the arguments digest, sealing answers into a ``requestState``,
#: pydantic, the legacy shim) far from Python's recursion limit (1,000 frames by default). Without
#: it, a band of depths just under that limit decodes, then overflows later: an HTTP 500.
MAX_DEPTH: Final = 100
#: Refused with -32700 rather than -32600. RFC 8259 §9 lets a parser limit nesting, and this is that
#: limit: the body is JSON this server's parser does not take, like a body deeper than the decoder
#: itself goes (``RecursionError``), which gets the same error, so the code does not depend on how
#: deep past the limit a body is; -32600 would say the JSON-RPC shape is wrong, and it may not be.
_TOO_DEEP: Final = f"Parse error: JSON nested deeper than {MAX_DEPTH} levels"
#: A tuple, not ``dict | list``: ``isinstance`` is markedly faster with it, and the walk calls it per value.
_CONTAINERS: Final = (dict, list)


class Request(msgspec.Struct, frozen=True):
    id: RequestId
    method: str
    params: dict[str, Any]


class Notification(msgspec.Struct, frozen=True):
    method: str
    params: dict[str, Any]


class Response(msgspec.Struct, frozen=True):
    """A JSON-RPC response sent *by the client* (only meaningful on the legacy path)."""

    id: RequestId
    result: dict[str, Any] | None
    error: dict[str, Any] | None


Message = Request | Notification | Response


def decode_message(body: bytes) -> Message:
    """Parse one JSON-RPC message.

    Raises:
        ParseError: the body is not JSON (including invalid UTF-8), or is nested deeper than
            :data:`MAX_DEPTH` levels (HTTP 400 either way).
        InvalidRequest: it is JSON but not a JSON-RPC 2.0 message this server accepts.
    """
    return parse_message(_decode(body))


def decode_json(body: bytes) -> object:
    """The JSON value of ``body``, with the limits every message this project reads has (no deeper than
    :data:`MAX_DEPTH` levels): for answers read from another server (the proxy's upstream, the client's
    server), which are not requests to classify.

    Raises:
        ParseError: not JSON (including invalid UTF-8), or nested too deep.
    """
    return _decode(body)


def _decode(body: bytes) -> object:
    """The JSON value of ``body``, no deeper than :data:`MAX_DEPTH` levels; every decode of a message
    goes through here, so the limit is the same on every path."""
    try:
        raw = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ParseError(f"Parse error: {exc}") from None
    except RecursionError:
        raise ParseError(_TOO_DEEP) from None
    # Every level of nesting opens with its own bracket, so a body with at most MAX_DEPTH of them
    # cannot be too deep: two byte counts (C loops) instead of a walk, for nearly every request.
    # Brackets inside strings only make the count larger, so the walk is the rare exact check.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _deeper_than(raw, MAX_DEPTH):
        raise ParseError(_TOO_DEEP)
    return raw


def _deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels deep (itself being level
    1). Level by level, without recursion: the walk must not itself hit the limit it checks for."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    for _ in range(limit):
        if not level:
            return False
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, _CONTAINERS)
        ]
    return bool(level)


def parse_message(raw: object) -> Message:
    """Classify an already decoded JSON value as a request, notification or response."""
    if isinstance(raw, list):
        raise InvalidRequest("Invalid Request: JSON-RPC batches are not supported")
    if not isinstance(raw, dict):
        raise InvalidRequest("Invalid Request: expected a JSON object")
    if raw.get("jsonrpc") != "2.0":
        raise InvalidRequest('Invalid Request: "jsonrpc" must be "2.0"')
    has_id = "id" in raw
    if has_id and not _is_valid_id(raw["id"]):
        raise InvalidRequest('Invalid Request: "id" must be a string or an integer')
    if "method" not in raw:
        if has_id and ("result" in raw) != ("error" in raw):
            return _parse_response(raw)
        raise InvalidRequest('Invalid Request: "method" is required')
    method = raw["method"]
    if not isinstance(method, str) or not method:
        raise InvalidRequest('Invalid Request: "method" must be a non-empty string')
    params = raw.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest('Invalid Request: "params" must be an object')
    if has_id:
        return Request(id=raw["id"], method=method, params=params)
    return Notification(method=method, params=params)


def _parse_response(raw: dict[str, Any]) -> Response:
    result, error = raw.get("result"), raw.get("error")
    if result is not None and not isinstance(result, dict):
        raise InvalidRequest('Invalid Request: "result" must be an object')
    if error is not None and not isinstance(error, dict):
        raise InvalidRequest('Invalid Request: "error" must be an object')
    return Response(id=raw["id"], result=result, error=error)


def _is_valid_id(value: object) -> bool:
    # bool is an int subclass in Python, but true/false are not valid JSON-RPC ids.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def id_of(raw_body: bytes) -> RequestId | None:
    """Best-effort request id of a body that failed later checks, so errors can echo it (none for a
    body that :func:`decode_message` refuses as not JSON or nested too deep)."""
    try:
        raw = _decode(raw_body)
    except ParseError:
        return None
    if isinstance(raw, dict) and _is_valid_id(raw.get("id")):
        request_id: RequestId = raw["id"]
        return request_id
    return None


def to_wire(message: Message) -> dict[str, Any]:
    """A decoded message as the JSON object it was (what a proxy forwards)."""
    if isinstance(message, Response):
        wire: dict[str, Any] = {"jsonrpc": "2.0", "id": message.id}
        if message.error is not None:
            wire["error"] = message.error
        else:
            wire["result"] = message.result
        return wire
    wire = {"jsonrpc": "2.0", "method": message.method, "params": message.params}
    if isinstance(message, Request):
        wire["id"] = message.id
    return wire


def result_message(request_id: RequestId, result: dict[str, Any] | msgspec.Struct) -> dict[str, Any]:
    """The response carrying ``result``: a dict, or a typed result (``result_types``), encoded as it is."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_message(request_id: RequestId | None, error: ProtocolError) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "error": error.error_object()}
    if request_id is not None:
        message["id"] = request_id
    else:
        message["id"] = None
    return message


def notification_message(method: str, params: dict[str, Any] | msgspec.Struct) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def encode(message: dict[str, Any]) -> bytes:
    return _encoder.encode(message)
