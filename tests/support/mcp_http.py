"""Hand-built 2026-07-28 requests for tests that talk raw HTTP (httpx) to a server.

::

    headers, body = modern_request("tools/call", {"name": "introduce", "arguments": {}},
                                   capabilities={"elicitation": {}})
    reply = parse_reply(httpx.post(server.url, headers=headers, json=body))

The helper fills ``params._meta`` (protocol version, client info, client capabilities) and the
SEP-2243 headers that mirror the body (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``),
encoding a header value that is not plain visible ASCII as ``=?base64?...?=``.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Mapping
from typing import Any

import httpx

PROTOCOL_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "ext-tasks-tests", "version": "0.0.0"}

# The body field that Mcp-Name mirrors, per method (core + Tasks extension).
NAME_FIELDS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

_ids = itertools.count(1)


def header_value(value: object) -> str:
    """A header value as SEP-2243 sends it: as is if plain visible ASCII, else base64 in the sentinel."""
    text = value if isinstance(value, str) else json.dumps(value)
    plain = (
        text == text.strip()
        and all(0x20 <= ord(char) < 0x7F for char in text)
        and not (text.startswith("=?base64?") and text.endswith("?="))
    )
    if plain:
        return text
    return "=?base64?" + base64.b64encode(text.encode("utf-8")).decode("ascii") + "?="


def modern_request(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    capabilities: Mapping[str, Any] | None = None,
    request_id: int | str | None = None,
    protocol_version: str = PROTOCOL_VERSION,
    client_info: Mapping[str, Any] | None = CLIENT_INFO,
    extra_meta: Mapping[str, Any] | None = None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """``(headers, body)`` for one JSON-RPC request of the 2026-07-28 revision.

    ``params`` may already hold a ``_meta``; its keys are kept and the standard ones are added.
    A fresh integer id is used unless ``request_id`` is given (an MRTR retry needs a new id).
    """
    body_params: dict[str, Any] = dict(params or {})
    meta: dict[str, Any] = dict(body_params.get("_meta") or {})
    meta["io.modelcontextprotocol/protocolVersion"] = protocol_version
    meta["io.modelcontextprotocol/clientCapabilities"] = dict(capabilities or {})
    if client_info is not None:
        meta["io.modelcontextprotocol/clientInfo"] = dict(client_info)
    meta.update(extra_meta or {})
    body_params["_meta"] = meta
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": next(_ids) if request_id is None else request_id,
        "method": method,
        "params": body_params,
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": protocol_version,
        "Mcp-Method": method,
    }
    name_field = NAME_FIELDS.get(method)
    if name_field is not None and name_field in body_params:
        headers["Mcp-Name"] = header_value(body_params[name_field])
    return headers, body


def parse_reply(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC response object of one reply, whether sent as JSON or as an SSE stream.

    On an SSE stream, notifications are skipped and the message carrying ``result`` or ``error``
    is returned.
    """
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        for event in response.text.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(
                line[len("data:") :].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")
            )
            if not data:
                continue
            message: dict[str, Any] = json.loads(data)
            if "result" in message or "error" in message:
                return message
        raise AssertionError(f"no JSON-RPC response on the SSE stream:\n{response.text}")
    parsed: dict[str, Any] = response.json()
    return parsed


def post(
    client: httpx.Client,
    url: str,
    method: str,
    params: Mapping[str, Any] | None = None,
    **options: Any,
) -> tuple[httpx.Response, dict[str, Any]]:
    """Send one modern request and return the HTTP response and its JSON-RPC message."""
    headers, body = modern_request(method, params, **options)
    response = client.post(url, headers=headers, json=body)
    return response, parse_reply(response)
