"""2026-07-28 requests for the loader: the per-request ``_meta``, the SEP-2243 headers (from
``protocol.outbound``, the client's own), the answers to a server's input requests filled from their
schemas, and every reply sorted into a result or a counted failure.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ..protocol.outbound import mirror_headers
from ..protocol.versions import META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN_2026_07_28
from .http import Connection, sse_response

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: Everything a loader can answer: it fills answers from the requests' schemas.
CAPABILITIES: Final[dict[str, Any]] = {
    "elicitation": {},
    "sampling": {},
    "roots": {},
    "extensions": {TASKS_EXTENSION: {}},
}
CLIENT_INFO: Final = {"name": "ext-tasks-bench", "version": "1.0.0"}
SAMPLED: Final = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "ext-tasks-bench",
                  "stopReason": "endTurn"}  # fmt: skip

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Failure(Exception):
    """A request that did not get the answer its workload needs, counted under ``key`` (``HTTP 503``,
    ``HTTP 200 JSON-RPC -32602``, ``isError``, ``timeout`` ...), with a short sample of what came back."""

    def __init__(self, key: str, sample: str) -> None:
        super().__init__(f"{key}: {sample}")
        self.key = key
        self.sample = sample[:300]


class Mcp:
    """Builds one server's requests and reads its replies."""

    def __init__(
        self,
        path: str,
        *,
        token: str | None = None,
        capabilities: Mapping[str, Any] | None = None,
        header_params: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.path = path.encode()
        self._ids = itertools.count(1)
        base = b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        if token is not None:
            base += b"Authorization: Bearer " + token.encode() + b"\r\n"
        self._base = base
        self._meta = {
            META_PROTOCOL_VERSION: MODERN_2026_07_28,
            META_CLIENT_CAPABILITIES: dict(CAPABILITIES if capabilities is None else capabilities),
            META_CLIENT_INFO: CLIENT_INFO,
        }
        #: Each tool's ``Mcp-Param-*`` headers (header -> argument), as ``tools/list`` declares them.
        self.header_params = dict(header_params or {})

    def request(self, method: str, params: dict[str, Any]) -> tuple[bytes, bytes]:
        """The header block and the body of one request (a new JSON-RPC id each time)."""
        params["_meta"] = self._meta
        body = _encode({"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params})
        tool = params.get("name") if method == "tools/call" else None
        mirrored = mirror_headers(MODERN_2026_07_28, method, params, self.header_params.get(str(tool), {}))
        headers = self._base + "".join(f"{name}: {value}\r\n" for name, value in mirrored.items()).encode()
        return headers, body

    async def call(self, conn: Connection, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The ``result`` of one request, or :class:`Failure`."""
        headers, body = self.request(method, params)
        status, _, payload = await conn.post(self.path, headers, body)
        return result_of(method, status, payload)


def result_of(method: str, status: int, payload: bytes) -> dict[str, Any]:
    if payload.startswith((b"event:", b"data:", b":", b"id:", b"retry:")):
        payload = sse_response(payload)
    try:
        message = _decode(payload) if payload else None
    except msgspec.DecodeError:
        message = None
    if not isinstance(message, dict):
        raise Failure(f"HTTP {status}", f"{method}: {payload[:200]!r}")
    error = message.get("error")
    if isinstance(error, dict):
        raise Failure(f"HTTP {status} JSON-RPC {error.get('code')}", f"{method}: {error.get('message')}")
    result = message.get("result")
    if status != 200 or not isinstance(result, dict):
        raise Failure(f"HTTP {status}", f"{method}: {payload[:200]!r}")
    return result


def answers_for(requests: object) -> dict[str, Any]:
    """An answer to each input request: an elicitation accepted with a value per field of its schema
    (its default, const or first enum value, else one of its type), a stub sampling reply, no roots."""
    if not isinstance(requests, Mapping):
        raise Failure("protocol", f"inputRequests is not an object: {str(requests)[:100]}")
    answers: dict[str, Any] = {}
    for key, request in requests.items():
        method = request.get("method") if isinstance(request, Mapping) else None
        params = request.get("params") if isinstance(request, Mapping) else None
        params = params if isinstance(params, Mapping) else {}
        if method == "elicitation/create":
            answers[key] = {"action": "accept", "content": _fill(params.get("requestedSchema"))}
            if params.get("mode") == "url":
                answers[key] = {"action": "accept"}
        elif method == "sampling/createMessage":
            answers[key] = SAMPLED
        elif method == "roots/list":
            answers[key] = {"roots": []}
        else:
            raise Failure("protocol", f"input request {key!r} of an unknown kind: {method!r}")
    return answers


def _fill(schema: object) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return {}
    return {str(name): _value(spec if isinstance(spec, Mapping) else {}) for name, spec in properties.items()}


def _value(spec: Mapping[str, Any]) -> Any:
    for key in ("default", "const"):
        if key in spec:
            return spec[key]
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return spec["enum"][0]
    kind = spec.get("type")
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return spec.get("minimum", 1)
    return "x" * max(1, int(spec.get("minLength", 1)))
