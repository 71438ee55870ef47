"""ext_tasks: an MCP 2026-07-28 server with the Tasks extension and multi round-trip requests.

The tool-author API lives here; the server itself is started with ``ext-tasks serve``.
"""

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
from .tools import Header, ToolRegistry

__all__ = [
    "AudioContent",
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
    "TextContent",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "elicit",
    "elicit_url",
    "list_roots",
    "sample",
]
