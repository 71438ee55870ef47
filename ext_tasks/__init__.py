"""ext_tasks: an MCP 2026-07-28 server with the Tasks extension and multi round-trip requests.

The tool-author API lives here; the server itself is started with ``ext-tasks serve``.

The names are loaded on first use (PEP 562), not when the package is: ``import ext_tasks.client`` runs this
file too, and a client must not load the server's modules (the tool registry, the auth package, pydantic's
wire models). ``tests/unit/test_client_imports.py`` checks it in a fresh interpreter.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # what the names are, for type checkers and readers; at run time see ``__getattr__``
    from .auth import Principal
    from .context import Context, InputRequest, InputRequired, ToolError, elicit, elicit_url, list_roots, sample
    from .protocol.errors import MissingClientCapability, ProtocolError
    from .protocol.wire import (
        AudioContent,
        EmbeddedResource,
        ImageContent,
        PromptMessage,
        ResourceContents,
        ResourceLink,
        TextContent,
    )
    from .results import PromptResult, ResourceResult, ToolResult
    from .retention import Retention
    from .retry import Backoff, Retry
    from .tools import Header, ToolRegistry

#: Each public name and the module (relative to this package) it comes from.
_HOMES: Final = {
    "Principal": ".auth",
    **dict.fromkeys(
        ("Context", "InputRequest", "InputRequired", "ToolError", "elicit", "elicit_url", "list_roots", "sample"),
        ".context",
    ),
    **dict.fromkeys(("MissingClientCapability", "ProtocolError"), ".protocol.errors"),
    **dict.fromkeys(
        (
            "AudioContent",
            "EmbeddedResource",
            "ImageContent",
            "PromptMessage",
            "ResourceContents",
            "ResourceLink",
            "TextContent",
        ),
        ".protocol.wire",
    ),
    **dict.fromkeys(("PromptResult", "ResourceResult", "ToolResult"), ".results"),
    **dict.fromkeys(("Backoff", "Retry"), ".retry"),
    "Retention": ".retention",
    **dict.fromkeys(("Header", "ToolRegistry"), ".tools"),
}

__all__ = [
    "AudioContent",
    "Backoff",
    "Context",
    "EmbeddedResource",
    "Header",
    "ImageContent",
    "InputRequest",
    "InputRequired",
    "MissingClientCapability",
    "Principal",
    "PromptMessage",
    "PromptResult",
    "ProtocolError",
    "ResourceContents",
    "ResourceLink",
    "ResourceResult",
    "Retention",
    "Retry",
    "TextContent",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "elicit",
    "elicit_url",
    "list_roots",
    "sample",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # loaded once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
