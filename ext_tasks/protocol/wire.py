"""Pydantic models of the 2026-07-28 shapes this server reads and writes (camelCase on the wire).

A client's answers to input requests are validated with these models; a validation failure becomes
-32602 with a short, readable message (:func:`validate_params`). (Request params are Structs:
:mod:`.params`.) Extra fields are allowed everywhere, as the spec asks
servers to ignore what they do not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from .errors import InvalidParams


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- answers to input requests (what a client puts in inputResponses) ----------------------------


class ElicitResult(WireModel):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class CreateMessageResult(WireModel):
    role: Literal["user", "assistant"]
    content: dict[str, Any] | list[dict[str, Any]]
    model: str
    stop_reason: str | None = None


class Root(WireModel):
    uri: str
    name: str | None = None


class ListRootsResult(WireModel):
    roots: list[Root]


# --- content blocks a tool or prompt returns -----------------------------------------------------


class TextContent(WireModel):
    type: Literal["text"] = "text"
    text: str


class _Media(WireModel):
    """Base64 ``data`` of a ``mime_type``."""

    data: str
    mime_type: str


class ImageContent(_Media):
    type: Literal["image"] = "image"


class AudioContent(_Media):
    type: Literal["audio"] = "audio"


class ResourceContents(WireModel):
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class EmbeddedResource(WireModel):
    type: Literal["resource"] = "resource"
    resource: ResourceContents


class ResourceLink(WireModel):
    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str
    mime_type: str | None = None
    description: str | None = None


ContentBlock = TextContent | ImageContent | AudioContent | EmbeddedResource | ResourceLink


class PromptMessage(WireModel):
    role: Literal["user", "assistant"]
    content: ContentBlock


M = TypeVar("M", bound=BaseModel)


def validate_params(model: type[M], params: dict[str, Any]) -> M:
    """Validate request params, turning pydantic's report into one -32602 message."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise InvalidParams(f"Invalid params: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        location = ".".join(str(item) for item in error["loc"]) or "params"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


def parse_input_responses(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``inputResponses`` of a retry, which must be an object whose values are objects.

    Absent means "no answers". Present but malformed (``null``, a number, a list ...) is a protocol
    error (-32602): the client sent something no input request could have produced.
    """
    if "inputResponses" not in params:
        return {}
    raw = params["inputResponses"]
    if not isinstance(raw, dict):
        raise InvalidParams("Invalid params: inputResponses must be an object")
    for key, value in raw.items():
        if not isinstance(value, dict):
            raise InvalidParams(f"Invalid params: inputResponses[{key!r}] must be an object")
    return raw
