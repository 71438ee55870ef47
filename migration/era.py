"""Which era a request on the shared endpoint belongs to (protocol.md §6), decided without guessing.

Modern (2026-07-28): the ``_meta`` protocol-version key, or a modern (or unknown) ``MCP-Protocol-Version``
header. Legacy (2025-11-25 and older): an ``Mcp-Session-Id``, a legacy header, ``initialize`` without the
modern ``_meta`` key, a JSON-RPC response from the client, or no version signal at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

from ext_tasks.protocol.versions import META_PROTOCOL_VERSION, MODERN_VERSIONS

from .translate import LEGACY_VERSIONS

Era = Literal["modern", "legacy"]
_decoder = msgspec.json.Decoder()


def classify(headers: Mapping[str, Sequence[str]], body: bytes) -> Era:
    version = (headers.get("mcp-protocol-version") or [""])[0].strip()
    if version in MODERN_VERSIONS:
        # The fast path: every modern client sends the header. A stray Mcp-Session-Id on a modern request
        # is ignored, as the 2026-07-28 transport says.
        return "modern"
    if headers.get("mcp-session-id"):
        return "legacy"
    try:
        message = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return "modern" if version and version not in LEGACY_VERSIONS else "legacy"
    if isinstance(message, dict):
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
            return "modern"
        if "method" not in message and "id" in message:
            return "legacy"  # a client's response to a server→client request: sessions only
        if message.get("method") == "initialize":
            return "legacy"
    if version and version not in LEGACY_VERSIONS:
        return "modern"  # an unknown version gets the structured -32022 of the modern path
    return "legacy"
