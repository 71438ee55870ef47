"""Turning what a function returns into the result shapes of the wire.

Tools may return a string, a content block, a list of those, a ``ToolResult``, a dict or pydantic model
(sent as ``structuredContent`` with a JSON text copy), or ``None``. Prompts return a string (one user
message), a ``PromptMessage`` list or a ``PromptResult``. Resources return text or bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from pydantic import BaseModel

from .protocol.result_types import GetPromptResult, ToolCallResult
from .protocol.wire import ContentBlock, PromptMessage, ResourceContents, TextContent, WireModel


@dataclass
class ToolResult:
    content: Sequence[ContentBlock | str] = ()
    structured: dict[str, Any] | None = None
    is_error: bool = False


@dataclass
class PromptResult:
    messages: Sequence[PromptMessage | str]
    description: str | None = None


@dataclass
class ResourceResult:
    contents: Sequence[ResourceContents] = field(default_factory=list)


def _block(item: ContentBlock | str) -> dict[str, Any]:
    # A string's block is written directly: it is what TextContent(text=item).to_wire() gives, without
    # a model built and dumped (~1.4 µs) for every tool result.
    return {"type": "text", "text": item} if isinstance(item, str) else item.to_wire()


#: What makes one content block (a tuple built once: ``str | WireModel`` would build a union per call).
_ONE_BLOCK: Final = (str, WireModel)


def tool_result(value: Any) -> ToolCallResult:
    """The result of a tool whose function returned ``value``: built here, once, and sent as it is (the
    engine adds ``_meta``; ``resultType`` is the Struct's tag)."""
    if isinstance(value, ToolResult):
        blocks = [_block(item) for item in value.content]
        if value.structured is not None:
            return ToolCallResult(content=blocks, is_error=value.is_error, structured_content=value.structured)
        return ToolCallResult(content=blocks, is_error=value.is_error)
    if value is None:
        return ToolCallResult(content=[], is_error=False)
    if isinstance(value, _ONE_BLOCK):
        return ToolCallResult(content=[_block(value)], is_error=False)  # type: ignore[arg-type]
    if isinstance(value, list | tuple):
        return ToolCallResult(content=[_block(item) for item in value], is_error=False)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        text = msgspec.json.encode(value).decode()
        return ToolCallResult(content=[{"type": "text", "text": text}], is_error=False, structured_content=value)
    return ToolCallResult(content=[{"type": "text", "text": str(value)}], is_error=False)


def tool_error_result(message: str) -> ToolCallResult:
    return ToolCallResult(content=[{"type": "text", "text": message}], is_error=True)


def prompt_result(value: Any, description: str) -> GetPromptResult:
    if isinstance(value, PromptResult):
        messages, description = value.messages, value.description or description
    elif isinstance(value, str | PromptMessage):
        messages = [value]
    else:
        messages = list(value)
    wire = [
        PromptMessage(role="user", content=TextContent(text=item)).to_wire()
        if isinstance(item, str)
        else item.to_wire()
        for item in messages
    ]
    return GetPromptResult(messages=wire, description=description) if description else GetPromptResult(messages=wire)


def resource_contents(uri: str, mime_type: str | None, value: Any) -> list[dict[str, Any]]:
    """The ``contents`` of a ``resources/read`` result (the handler adds how long they may be cached)."""
    if isinstance(value, ResourceResult):
        return [item.to_wire() for item in value.contents]
    if isinstance(value, ResourceContents):
        return [value.to_wire()]
    if isinstance(value, bytes):
        contents = ResourceContents(uri=uri, mime_type=mime_type, blob=base64.b64encode(value).decode("ascii"))
    else:
        contents = ResourceContents(uri=uri, mime_type=mime_type or "text/plain", text=str(value))
    return [contents.to_wire()]
