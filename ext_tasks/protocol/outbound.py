"""The SEP-2243 headers a 2026-07-28 *client* sends: what the server side checks in ``envelope.py``.

Used by everything here that speaks to a server: ``ext_tasks.client``, the proxy's upstream calls,
the tests and the benchmark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from .envelope import NAME_FIELDS, encode_header_value

#: An HTTP field-name token (RFC 9110 §5.6.2), which ``Mcp-Param-{Name}`` must stay.
_TOKEN: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
#: JSON Schema types a header can carry: one value that reads the same in text on both sides (not
#: ``number``: a float's text differs between languages, so the referee refuses it too).
_SCALAR_TYPES: Final = frozenset({"string", "integer", "boolean"})


class InvalidHeaderAnnotation(ValueError):
    """A tool's ``x-mcp-header`` annotations cannot be followed: calling it would send wrong headers."""


def header_params_of(tool: Mapping[str, Any]) -> dict[str, str]:
    """``{header name: argument}`` for a tool's ``x-mcp-header`` annotations (top-level properties).

    Raises :class:`InvalidHeaderAnnotation` for one that is not a header token, is used twice (names
    compare case-insensitively), or sits on a property whose type is not a scalar."""
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    found: dict[str, str] = {}
    seen: set[str] = set()
    for argument, spec in (properties or {}).items() if isinstance(properties, Mapping) else ():
        if not isinstance(spec, Mapping) or "x-mcp-header" not in spec:
            continue
        name = spec["x-mcp-header"]
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise InvalidHeaderAnnotation(f"argument {argument!r}: x-mcp-header {name!r} is not a header name")
        if name.lower() in seen:
            raise InvalidHeaderAnnotation(f"x-mcp-header {name!r} is used by more than one argument")
        kind = spec.get("type")
        kinds = set(kind) - {"null"} if isinstance(kind, list) else {kind}
        if not kinds or not kinds <= _SCALAR_TYPES:
            raise InvalidHeaderAnnotation(f"argument {argument!r}: a header carries one scalar value, not {kind!r}")
        seen.add(name.lower())
        found[name] = str(argument)
    return found


def header_text(value: object) -> str:
    """An argument's value as header text: strings as they are, numbers and booleans as JSON writes them."""
    return value if isinstance(value, str) else json.dumps(value)


def mirror_headers(
    version: str, method: str, params: Mapping[str, Any], header_params: Mapping[str, str]
) -> dict[str, str]:
    """``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` (where the method has a name field) and one
    ``Mcp-Param-*`` per annotated argument present and not null, each value encoded when not plain ASCII."""
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    name_field = NAME_FIELDS.get(method)
    if name_field is not None and isinstance(params.get(name_field), str):
        headers["Mcp-Name"] = encode_header_value(params[name_field])
    arguments = params.get("arguments")
    if isinstance(arguments, Mapping):
        for header, argument in header_params.items():
            value = arguments.get(argument)
            if value is not None:
                headers[f"Mcp-Param-{header}"] = encode_header_value(header_text(value))
    return headers
