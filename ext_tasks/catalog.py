"""What a server exposes besides its tools: prompts, resources and resource templates, each a plain
async function with what ``prompts/list`` and ``resources/list`` say of it (registered through
:class:`~ext_tasks.tools.ToolRegistry`)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .signatures import Signature

#: What a tool, prompt or resource is: an async function.
Fn = Callable[..., Awaitable[Any]]


@dataclass
class Prompt:
    name: str
    fn: Fn
    description: str
    signature: Signature
    title: str | None = None

    def describe(self) -> dict[str, Any]:
        schema = self.signature.json_schema()
        required = set(schema.get("required", ()))
        arguments = []
        for name, spec in schema["properties"].items():
            argument: dict[str, Any] = {"name": name, "required": name in required}
            if "description" in spec:
                argument["description"] = spec["description"]
            arguments.append(argument)
        described: dict[str, Any] = {"name": self.name, "description": self.description, "arguments": arguments}
        if self.title:
            described["title"] = self.title
        return described


@dataclass
class Resource:
    uri: str
    fn: Fn
    name: str
    description: str
    mime_type: str | None
    signature: Signature

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"uri": self.uri, "name": self.name, "description": self.description}
        if self.mime_type:
            described["mimeType"] = self.mime_type
        return described


@dataclass
class ResourceTemplate:
    uri_template: str
    fn: Fn
    name: str
    description: str
    mime_type: str | None
    signature: Signature
    pattern: re.Pattern[str]

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "uriTemplate": self.uri_template,
            "name": self.name,
            "description": self.description,
        }
        if self.mime_type:
            described["mimeType"] = self.mime_type
        return described

    def match(self, uri: str) -> dict[str, str] | None:
        found = self.pattern.fullmatch(uri)
        return None if found is None else found.groupdict()


def template_pattern(uri_template: str) -> re.Pattern[str]:
    """RFC 6570 level 1: each ``{name}`` matches one path segment."""
    parts = re.split(r"\{(\w+)\}", uri_template)
    regex = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>[^/]+)" for index, part in enumerate(parts))
    return re.compile(regex)
