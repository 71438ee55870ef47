"""JSON-RPC 2.0 envelopes: bytes in, typed message out; and the response/error/notification builders.

Only single messages are accepted: MCP 2026-07-28 sends one JSON-RPC message per POST and has no batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from .errors import InvalidRequest, ParseError, ProtocolError

RequestId = str | int

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Response:
    """A JSON-RPC response sent *by the client* (only meaningful on the legacy path)."""

    id: RequestId
    result: dict[str, Any] | None
    error: dict[str, Any] | None


Message = Request | Notification | Response


def decode_message(body: bytes) -> Message:
    """Parse one JSON-RPC message.

    Raises:
        ParseError: the body is not JSON (including invalid UTF-8).
        InvalidRequest: it is JSON but not a JSON-RPC 2.0 message this server accepts.
    """
    try:
        raw = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ParseError(f"Parse error: {exc}") from None
    return parse_message(raw)


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
    """Best-effort request id of a body that failed later checks, so errors can echo it."""
    try:
        raw = _decoder.decode(raw_body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if isinstance(raw, dict) and _is_valid_id(raw.get("id")):
        request_id: RequestId = raw["id"]
        return request_id
    return None


def result_message(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_message(request_id: RequestId | None, error: ProtocolError) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "error": error.to_error()}
    if request_id is not None:
        message["id"] = request_id
    else:
        message["id"] = None
    return message


def notification_message(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def encode(message: dict[str, Any]) -> bytes:
    return _encoder.encode(message)
