"""The params of the client requests that carry more than a name or an id, as msgspec Structs.

Each is decoded once, by :func:`decode_params`, from the params the envelope check left; a mismatch is
one -32602 that says where (``Invalid params: Expected `str`, got `int` - at `$.name```). Members this
server does not know are ignored, as the spec asks. The bounds of a ``subscriptions/listen`` (how many
ids and URIs one may name, and how long each) are part of its type: a listen past them is refused
before anything is looked up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from .errors import InvalidParams


class _Params(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Params as a client sends them (camelCase members)."""


class GetPromptParams(_Params, frozen=True):
    name: str
    arguments: dict[str, str] | None = None


class ReadResourceParams(_Params, frozen=True):
    uri: str


class ListParams(_Params, frozen=True):
    cursor: str | None = None


class CompletionReference(_Params, frozen=True):
    type: Literal["ref/prompt", "ref/resource"]
    name: str | None = None
    uri: str | None = None


class CompletionArgument(_Params, frozen=True):
    name: str
    value: str


class CompletionContext(_Params, frozen=True):
    arguments: dict[str, str] | None = None


class CompleteParams(_Params, frozen=True):
    ref: CompletionReference
    argument: CompletionArgument
    context: CompletionContext | None = None


#: What one ``subscriptions/listen`` may ask to watch: each id is a store lookup, each URI a filter.
MAX_LISTEN_TASK_IDS: Final = 1_000
MAX_LISTEN_RESOURCES: Final = 1_000
MAX_WATCHED_ID_CHARS: Final = 256
_WatchedId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_WATCHED_ID_CHARS)]
_WatchedUri = Annotated[str, msgspec.Meta(min_length=1, max_length=8 * MAX_WATCHED_ID_CHARS)]


class NotificationFilter(_Params, frozen=True):
    tools_list_changed: bool = False
    prompts_list_changed: bool = False
    resources_list_changed: bool = False
    resource_subscriptions: Annotated[list[_WatchedUri], msgspec.Meta(max_length=MAX_LISTEN_RESOURCES)] | None = None
    task_ids: Annotated[list[_WatchedId], msgspec.Meta(max_length=MAX_LISTEN_TASK_IDS)] | None = None


class ListenParams(_Params, frozen=True):
    notifications: NotificationFilter = msgspec.field(default_factory=NotificationFilter)


S = TypeVar("S", bound=_Params)


def decode_params(kind: type[S], params: Mapping[str, Any]) -> S:
    """``params`` as ``kind``, or the -32602 that says what is wrong and where."""
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as exc:
        raise InvalidParams(f"Invalid params: {exc}") from None
