"""The per-request envelope check of MCP 2026-07-28: ``_meta`` keys and the SEP-2243 HTTP headers.

``check_envelope(request, headers)`` either returns the validated :class:`Envelope` or raises the
precise :class:`~.errors.ProtocolError` the spec asks for. The order follows protocol.md §1.7:
required ``_meta`` (-32602, HTTP 400), ``MCP-Protocol-Version`` equal to ``_meta`` (-32020), version
supported (-32022), then ``Mcp-Method`` / ``Mcp-Name`` / ``Mcp-Param-*`` against the body (-32020).

Headers arrive as a mapping from the *lower-cased* header name to every value sent under it, so that a
duplicated header can be refused instead of silently picking one of its values.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import msgspec

from .errors import HeaderMismatch, InvalidParams, MissingMeta, UnsupportedProtocolVersion
from .jsonrpc import Request
from .versions import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
)

Headers = Mapping[str, Sequence[str]]

#: Methods whose ``Mcp-Name`` header mirrors a body field, and which field.
NAME_FIELDS: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

#: Methods whose ``Mcp-Name`` may be left out unless headers are checked strictly: the body's ``taskId``
#: is authoritative and the header only serves routing intermediaries, and real tasks clients omit it
#: (protocol.md §3.13). A present but different value is refused all the same.
NAME_OPTIONAL: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})

LOG_LEVELS: Final[tuple[str, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

#: This project's own ``_meta`` key for retry-safe task creation (also accepted: ``Idempotency-Key``).
META_IDEMPOTENCY_KEY: Final = "dev.ext-tasks/idempotencyKey"
#: This project's ``_meta`` key carrying a client's lifetime hint (the 2025-11-25 ``params.task.ttl``,
#: forwarded by the migration shim); the server caps it by its maximum.
META_TTL_HINT: Final = "dev.ext-tasks/ttlHintMs"
#: This project's ``_meta`` key on ``tasks/get`` for a read of the status only (the migration shim's
#: legacy ``tasks/get``/``tasks/list``): it does not count as handing out the outcome, so a sensitive
#: task keeps its lifetime, and a sensitive outcome not handed out yet is withheld from the reply.
META_STATUS_ONLY: Final = "dev.ext-tasks/statusOnly"
MAX_IDEMPOTENCY_KEY_CHARS: Final = 255

_B64_PREFIX: Final = "=?base64?"
_B64_SUFFIX: Final = "?="


class Envelope(msgspec.Struct, frozen=True):
    """What a valid request says about its caller, per request (nothing is remembered between them)."""

    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None
    log_level: str | None
    progress_token: str | int | None
    idempotency_key: str | None = None
    #: Headers the request left out that were tolerated (non-strict mode), for the operator's metric.
    tolerated_headers: tuple[str, ...] = ()
    #: A client's lifetime hint for a task (this project's ``_meta`` key; the shim forwards a 2025-11-25
    #: ``params.task.ttl`` in it).
    ttl_hint_ms: int | None = None
    #: ``tasks/get`` for the status only (this project's ``_meta`` key; the shim's legacy status reads).
    status_only: bool = False

    def wants_stream(self) -> bool:
        """Whether notifications may be sent for this request (so the reply should be SSE)."""
        return self.progress_token is not None or self.log_level is not None


class Target(msgspec.Struct, frozen=True):
    """What an already parsed call says that headers mirror: the body's name (``None``: not a string,
    so ``Mcp-Name`` has nothing to match) and the arguments ``Mcp-Param-*`` mirror."""

    name: str | None
    arguments: Mapping[str, Any]


def check_envelope(
    request: Request,
    headers: Headers,
    header_params: Mapping[str, str] | None = None,
    *,
    strict_headers: bool = False,
    target: Target | None = None,
) -> Envelope:
    """Validate ``request`` and its HTTP headers; ``header_params`` maps ``Mcp-Param-{Name}`` names
    (as declared by ``x-mcp-header`` in the called tool's input schema) to argument names.

    ``target``: the call as the caller already parsed it (the engine's ``tools/call``), so the body's
    name and arguments are not read again; without it they are read from ``request.params``.

    Unless ``strict_headers``, a ``tasks/*`` request without ``Mcp-Name`` is served and the envelope
    says so in ``tolerated_headers``."""
    meta = request.params.get("_meta")
    envelope = _check_meta(meta)
    _check_protocol_version_header(headers, envelope.protocol_version)
    if envelope.protocol_version not in MODERN_VERSIONS:
        raise UnsupportedProtocolVersion(envelope.protocol_version, MODERN_VERSIONS)
    _expect_header(headers, "mcp-method", "Mcp-Method", request.method)
    tolerated: tuple[str, ...] = ()
    name_field = NAME_FIELDS.get(request.method)
    if name_field is not None:
        value = target.name if target is not None else request.params.get(name_field)
        if isinstance(value, str):
            if not strict_headers and request.method in NAME_OPTIONAL and not headers.get("mcp-name"):
                tolerated = ("Mcp-Name",)
            else:
                _expect_header(headers, "mcp-name", "Mcp-Name", value)
    if header_params:
        arguments = target.arguments if target is not None else request.params.get("arguments")
        _check_param_headers(headers, header_params, arguments if isinstance(arguments, Mapping) else {})
    key = _idempotency_key(request.params["_meta"].get(META_IDEMPOTENCY_KEY), headers)
    if key is None and not tolerated:
        return envelope
    return msgspec.structs.replace(envelope, idempotency_key=key, tolerated_headers=tolerated)


def _idempotency_key(meta_value: object, headers: Headers) -> str | None:
    values = headers.get("idempotency-key") or ()
    if len(values) > 1:
        raise HeaderMismatch("Header mismatch: header Idempotency-Key was sent more than once")
    header = values[0].strip(" \t").strip('"') if values else None
    if meta_value is not None and not isinstance(meta_value, str):
        raise InvalidParams(f"Invalid params: _meta[{META_IDEMPOTENCY_KEY!r}] must be a string")
    if header is not None and meta_value is not None and header != meta_value:
        raise InvalidParams(f"Invalid params: Idempotency-Key header and _meta[{META_IDEMPOTENCY_KEY!r}] differ")
    key = meta_value if meta_value is not None else header
    if key is not None and not (0 < len(key) <= MAX_IDEMPOTENCY_KEY_CHARS and _visible_ascii(key)):
        raise InvalidParams(
            f"Invalid params: an idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters"
        )
    return key


def _check_meta(meta: object) -> Envelope:
    if not isinstance(meta, dict):
        raise MissingMeta("Invalid params: params._meta is required")
    version = meta.get(META_PROTOCOL_VERSION)
    if not isinstance(version, str):
        raise MissingMeta(f"Invalid params: _meta[{META_PROTOCOL_VERSION!r}] is required")
    capabilities = meta.get(META_CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        raise MissingMeta(f"Invalid params: _meta[{META_CLIENT_CAPABILITIES!r}] must be an object")
    client_info = meta.get(META_CLIENT_INFO)
    log_level = meta.get(META_LOG_LEVEL)
    if log_level is not None and log_level not in LOG_LEVELS:
        raise InvalidParams(f"Invalid params: _meta[{META_LOG_LEVEL!r}] must be one of {', '.join(LOG_LEVELS)}")
    token = meta.get("progressToken")
    if token is not None and (isinstance(token, bool) or not isinstance(token, str | int)):
        raise InvalidParams("Invalid params: _meta.progressToken must be a string or an integer")
    hint = meta.get(META_TTL_HINT)
    return Envelope(
        protocol_version=version,
        client_capabilities=capabilities,
        client_info=client_info if isinstance(client_info, dict) else None,
        log_level=log_level,
        progress_token=token,
        ttl_hint_ms=hint if isinstance(hint, int) and not isinstance(hint, bool) and hint > 0 else None,
        status_only=meta.get(META_STATUS_ONLY) is True,
    )


def _check_protocol_version_header(headers: Headers, meta_version: str) -> None:
    header = _single_header(headers, "mcp-protocol-version", "MCP-Protocol-Version")
    if header is None:
        raise HeaderMismatch("Header mismatch: required header MCP-Protocol-Version is missing")
    if header != meta_version:
        raise HeaderMismatch(
            f"Header mismatch: MCP-Protocol-Version header value {header!r} does not match "
            f"_meta protocolVersion {meta_version!r}"
        )


def _expect_header(headers: Headers, key: str, display: str, body_value: str) -> None:
    header = _single_header(headers, key, display)
    if header is None:
        raise HeaderMismatch(f"Header mismatch: required header {display} is missing")
    if header != body_value:
        raise HeaderMismatch(
            f"Header mismatch: {display} header value {header!r} does not match body value {body_value!r}"
        )


def _check_param_headers(headers: Headers, header_params: Mapping[str, str], arguments: Mapping[str, Any]) -> None:
    for header_name, argument in header_params.items():
        display = f"Mcp-Param-{header_name}"
        header = _single_header(headers, display.lower(), display)
        value = arguments.get(argument)
        if value is None:
            if header is not None:
                raise HeaderMismatch(f"Header mismatch: {display} sent but argument {argument!r} is absent")
            continue
        if header is None:
            raise HeaderMismatch(f"Header mismatch: required header {display} is missing")
        if not _header_matches(header, value):
            raise HeaderMismatch(
                f"Header mismatch: {display} header value {header!r} does not match argument {argument!r}"
            )


def _header_matches(header: str, value: object) -> bool:
    if isinstance(value, bool):
        return header == ("true" if value else "false")
    if isinstance(value, int):
        # Integers compare numerically ("42.0" matches 42) but exactly: as floats, 2**53 + 1 == 2**53.
        try:
            exact = Decimal(header)
        except InvalidOperation:
            return False
        return exact.is_finite() and exact == value
    if isinstance(value, float):
        try:
            number = float(header)
        except ValueError:
            return False
        return math.isfinite(number) and number == value
    return isinstance(value, str) and header == value


def _single_header(headers: Headers, key: str, display: str) -> str | None:
    values = headers.get(key)
    if not values:
        return None
    if len(values) > 1:
        raise HeaderMismatch(f"Header mismatch: header {display} was sent more than once")
    return decode_header_value(values[0], display)


def decode_header_value(raw: str, display: str = "header") -> str:
    """Trim optional whitespace, refuse characters outside visible ASCII, and decode the
    ``=?base64?...?=`` form (SEP-2243) used for values that are not plain ASCII."""
    value = raw.strip(" \t")
    if not (value.isascii() and value.isprintable()):  # _visible_ascii, inline: three headers a request
        raise HeaderMismatch(f"Header mismatch: {display} contains invalid characters")
    if value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX) and len(value) >= 11:
        encoded = value[len(_B64_PREFIX) : -len(_B64_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise HeaderMismatch(f"Header mismatch: {display} has an invalid base64 value") from None
    return value


def _visible_ascii(value: str) -> bool:
    """Only characters 0x20-0x7E (for an ASCII string, ``isprintable`` is exactly that range)."""
    return value.isascii() and value.isprintable()


def encode_header_value(value: str) -> str:
    """The client-side encoding (the shim and the proxy speaking to an upstream, tests, benchmarks):
    plain when safe, base64 otherwise."""
    plain = (
        value == value.strip(" \t")
        and _visible_ascii(value)
        and not (value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX))
    )
    if plain:
        return value
    return _B64_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _B64_SUFFIX
