"""Every protocol failure as a typed exception that knows its JSON-RPC code and its HTTP status.

The tree: each class with its JSON-RPC code, HTTP status and extra headers (a value not written is its
parent's), and, for a class defined elsewhere, its module. ``tests/unit/test_error_tree.py`` checks it
against every subclass in ``ext_tasks`` and ``migration`` (a tool author's own subclass, like the one in
``ext_tasks.examples``, is not the server's and is not drawn)::

    ProtocolError(-32603, 200)
      ParseError(-32700, 400)
      InvalidRequest(-32600, 400)
        BodyTooLarge(413, Connection: close)
        ForbiddenOrigin(403)
        BodyTimeout(408, Connection: close)                   ext_tasks.watch
        SessionRequired                                       migration.shim
        SessionNotFound(404)                                  migration.shim
      Unauthenticated(-32600, 401, WWW-Authenticate)          ext_tasks.auth.challenge
      InsufficientScope(-32600, 403, WWW-Authenticate)        ext_tasks.auth.challenge
      LimitExceeded(-31429, 429, Retry-After)
      MethodNotFound(-32601, 404)
      InvalidParams(-32602)
        MissingMeta(400)
        ParamsTooLarge(413)
        InvalidRequestState
        ResourceNotFound
      InternalError(-32603, 500)
        Busy(503, Retry-After)
          AuthUnavailable                                     ext_tasks.auth.challenge
          TaskStoreUnavailable                                ext_tasks.store.connection.errors
            ReplicasBehind                                    ext_tasks.store.connection.acks
        RequestStateTooLarge(413)
        UpstreamFailed(502)                                   migration.remote
          UpstreamTimedOut(504)                               migration.remote
          UpstreamTooLarge                                    migration.remote
          UpstreamUnparsable(-32700)                          migration.remote
      HeaderMismatch(-32020, 400)
      MissingClientCapability(-32021, 400)
      UnsupportedProtocolVersion(-32022, 400)
      RelayedError                                            migration.translate

(``RelayedError`` is sent with the code the upstream answered, -32603 if it named none.)

Raising is the only way the core reports a failure. One mapping turns these into JSON-RPC error
replies, with the request id, ``ext_tasks.failures``: each surface (the engine for 2026-07-28,
``migration.shim`` for 2025-11-25, the HTTP edge before either, the worker for a task's outcome) answers
through its guard. No JSON-RPC code appears as a literal anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec
from msgspec import UNSET

from .result_types import ErrorObject

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: A caller's limit was reached; retry after a while. Application-defined on purpose: JSON-RPC 2.0
#: reserves -32768..-32000, MCP owns -32020..-32099 and asks implementations not to use -32000..-32019,
#: so a code outside that space can never be mistaken for a protocol one (429 as in HTTP).
LIMIT_EXCEEDED = -31429


class ProtocolError(Exception):
    """A failure the client is told about as a JSON-RPC error."""

    code: ClassVar[int] = INTERNAL_ERROR
    http_status: ClassVar[int] = 200
    #: How long the HTTP edge waits before sending this answer (a pacing refusal, ``ext_tasks.pacing``).
    hold_s: float = 0.0

    def __init__(self, message: str, *, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def http_headers(self) -> dict[str, str]:
        """Extra HTTP response headers this failure asks for (``Retry-After``, ``WWW-Authenticate``)."""
        return {}

    def error_object(self) -> ErrorObject:
        """The JSON-RPC ``error`` member for this failure."""
        return ErrorObject(self.code, self.message, UNSET if self.data is None else dict(self.data))

    def to_error(self) -> dict[str, Any]:
        """:meth:`error_object` as a plain object (as a failed task stores its error)."""
        error: dict[str, Any] = msgspec.to_builtins(self.error_object())
        return error


class ParseError(ProtocolError):
    code = PARSE_ERROR
    http_status = 400


class InvalidRequest(ProtocolError):
    code = INVALID_REQUEST
    http_status = 400


class BodyTooLarge(InvalidRequest):
    """The rest of the body is not read, so the connection cannot carry another request: it closes."""

    http_status = 413

    def http_headers(self) -> dict[str, str]:
        return {"Connection": "close"}


class ForbiddenOrigin(InvalidRequest):
    """Origin or Host header not allowed (DNS-rebinding protection)."""

    http_status = 403


class LimitExceeded(ProtocolError):
    """A configured limit of the caller was reached (unfinished tasks, polling rate): the request was
    well formed, and the same request may succeed after ``retry_after_s`` seconds."""

    code = LIMIT_EXCEEDED
    http_status = 429

    def __init__(self, message: str, *, limit: str, retry_after_s: int, hold_s: float = 0.0) -> None:
        self.retry_after_s = max(1, retry_after_s)
        self.hold_s = hold_s
        super().__init__(message, data={"limit": limit, "retryAfterSeconds": self.retry_after_s})

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class MethodNotFound(ProtocolError):
    code = METHOD_NOT_FOUND
    http_status = 404


class InvalidParams(ProtocolError):
    code = INVALID_PARAMS


class MissingMeta(InvalidParams):
    """A required per-request ``_meta`` key is absent: the request is malformed (HTTP 400)."""

    http_status = 400


class ParamsTooLarge(InvalidParams):
    """A part of the request is larger than a task may keep (its arguments, its answers, the client's
    capabilities): nothing was stored. Final: the same request fails the same way.

    HTTP 413, as for every other "too large" (the body, a ``requestState``): what the server will not
    take in is told the same way whatever part it was. ``data`` names the sizes, e.g.
    ``{"argumentBytes": N, "maxArgumentBytes": M}``."""

    http_status = 413

    def __init__(self, part: str, size: int, limit: int, *, setting: str | None = None) -> None:
        name = {"argument": "arguments", "answer": "answers", "capability": "client capabilities"}.get(part, part)
        where = f", {setting}" if setting else ""
        super().__init__(
            f"Invalid params: the task's {name} would be {size} bytes of JSON, over the limit of {limit}{where}",
            data={f"{part}Bytes": size, f"max{part[:1].upper()}{part[1:]}Bytes": limit},
        )
        self.size = size
        self.limit = limit


class InvalidRequestState(InvalidParams):
    """The echoed ``requestState`` failed verification.

    The wire message is fixed on purpose: why it failed (expired, foreign key, other principal ...)
    is logged by the server and never told to a possibly hostile client.
    """

    WIRE_MESSAGE: ClassVar[str] = "Invalid or expired requestState"

    def __init__(self, reason: str) -> None:
        super().__init__(self.WIRE_MESSAGE, data={"reason": "invalid_request_state"})
        self.reason = reason


class ResourceNotFound(InvalidParams):
    def __init__(self, uri: str) -> None:
        super().__init__(f"Resource not found: {uri}", data={"uri": uri})


class InternalError(ProtocolError):
    code = INTERNAL_ERROR
    http_status = 500


class Busy(InternalError):
    """A transient condition on the server's side (the store is unreachable, a task kept changing under
    the request): nothing was changed, and the same request may be sent again."""

    http_status = 503
    retry_after_s = 1

    def __init__(self, message: str) -> None:
        # ``retryAfterSeconds`` says "retry later" in the body too, where the HTTP status does not travel
        # (the legacy shim relays an error of the engine or of a remote server with its own status).
        super().__init__(message, data={"retryAfterSeconds": self.retry_after_s})

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class RequestStateTooLarge(InternalError):
    """The ``requestState`` for the next round would be longer than any instance accepts back
    (``MAX_TOKEN_CHARS``), so it is refused when it would be sealed: the client learns it now, rather
    than by an "Invalid or expired requestState" on its retry. Final: the same request fails the same
    way (the answers, or the function's own state, carried to the next round must be smaller).

    HTTP 413: large answers from the client can cause it, and client input never causes a 5xx."""

    http_status = 413

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"Internal error: the requestState for the next round would be {size} characters, over the "
            f"limit of {limit}; the answers and state carried between rounds are too large",
            data={"stateChars": size, "maxStateChars": limit},
        )
        self.size = size
        self.limit = limit


class HeaderMismatch(ProtocolError):
    code = HEADER_MISMATCH
    http_status = 400


class MissingClientCapability(ProtocolError):
    code = MISSING_REQUIRED_CLIENT_CAPABILITY
    http_status = 400

    def __init__(self, required: Mapping[str, Any], message: str | None = None) -> None:
        names = ", ".join(sorted(required)) or "a capability"
        super().__init__(
            message or f"Missing required client capability: {names}",
            data={"requiredCapabilities": dict(required)},
        )


class UnsupportedProtocolVersion(ProtocolError):
    code = UNSUPPORTED_PROTOCOL_VERSION
    http_status = 400

    def __init__(self, requested: str, supported: tuple[str, ...]) -> None:
        super().__init__(
            f"Unsupported protocol version: {requested}",
            data={"supported": list(supported), "requested": requested},
        )
