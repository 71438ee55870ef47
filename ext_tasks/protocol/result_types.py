"""The results this server sends, as msgspec Structs: built once by the handler that knows them, encoded
as they are.

Two members are attached at encode, not by the handlers: ``resultType`` is each class's msgspec *tag*
(written by the encoder, and by ``msgspec.to_builtins`` for readers in process), and ``_meta`` is
:attr:`meta`, which the engine fills once, where it wraps the result into its JSON-RPC response (the
server's identity next to any ``_meta`` of the result's own). Optional members are :data:`UNSET` and
left out of the JSON (``omit_defaults``), as the spec's optional fields are; a member that is required
on the wire has no default, so it is always written (``ttlMs`` even when it is ``null``).

A task has one shape here, :class:`Task`, with :class:`DetailedTask` adding the member of its status
(``inputRequests``, ``result`` or ``error``); the results that carry a task (``CreateTaskResult``, the
``tasks/get`` result) are those two with a ``resultType``, and ``notifications/tasks`` and the legacy
shim map from the same Structs.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

Meta = dict[str, Any]


class _Result(msgspec.Struct, omit_defaults=True, kw_only=True, rename="camel", tag_field="resultType"):
    #: ``_meta``: the engine's to fill, at encode (see the module docstring).
    meta: Meta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class Complete(_Result, tag="complete"):
    """A ``complete`` result with nothing more to say (``tasks/update`` and ``tasks/cancel`` acknowledge
    with it), and the base of every other ``complete`` result."""


class _Cacheable(Complete):
    """A result a client may keep for ``ttlMs``, shared as ``cacheScope`` says."""

    ttl_ms: int
    cache_scope: str


class DiscoverResult(_Cacheable):
    supported_versions: list[str]
    capabilities: dict[str, Any]
    instructions: str | UnsetType = UNSET


class _Page(_Cacheable, kw_only=True):
    """One page of a listing: this server lists everything at once, a remote upstream may page."""

    next_cursor: str | UnsetType = UNSET


class ListToolsResult(_Page):
    tools: list[dict[str, Any]]


class ListPromptsResult(_Page):
    prompts: list[dict[str, Any]]


class ListResourcesResult(_Page):
    resources: list[dict[str, Any]]


class ListResourceTemplatesResult(_Page):
    resource_templates: list[dict[str, Any]]


class ReadResourceResult(_Cacheable):
    contents: list[dict[str, Any]]


class GetPromptResult(Complete):
    messages: list[dict[str, Any]]
    description: str | UnsetType = UNSET


class CompleteResult(Complete):
    """``completion/complete``'s result (``completion``: values, total, hasMore)."""

    completion: dict[str, Any]


class ToolCallResult(Complete, omit_defaults=False):
    """``CallToolResult``: what a tool's function came to (``isError`` for a tool's own failure).

    ``isError`` is always written, ``false`` included, and read as ``false`` when a remote server leaves
    it out (it is optional on the wire); unset members are still left out."""

    content: list[dict[str, Any]]
    is_error: bool = False
    structured_content: Any | UnsetType = UNSET


class InputRequiredResult(_Result, tag="input_required"):
    """SEP-2322: the questions of this round (none: a state-only round) and the state to echo."""

    #: Optional on the wire (this server always seals one; another server may keep no state).
    request_state: str | UnsetType = UNSET
    input_requests: dict[str, dict[str, Any]] | UnsetType = UNSET


class Task(msgspec.Struct, omit_defaults=True, kw_only=True, rename="camel"):
    """``Task``: the fields ``CreateTaskResult``, ``tasks/get`` and ``notifications/tasks`` share."""

    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    #: Always suggested by this server; optional on the wire, so a remote server may leave it out.
    poll_interval_ms: int | UnsetType = UNSET
    status_message: str | UnsetType = UNSET


class DetailedTask(Task):
    """``DetailedTask``: a task with the member of its status."""

    input_requests: dict[str, dict[str, Any]] | UnsetType = UNSET
    result: dict[str, Any] | UnsetType = UNSET
    error: dict[str, Any] | UnsetType = UNSET


class CreateTaskResult(Task, tag_field="resultType", tag="task"):
    meta: Meta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class GetTaskResult(DetailedTask, tag_field="resultType", tag="complete"):
    meta: Meta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class ErrorObject(msgspec.Struct, omit_defaults=True):
    """A JSON-RPC ``error`` member: how every failure is told (``ProtocolError.error_object``), and how the
    shim reads another server's. ``data`` is what the failure adds (a limit and when to retry, the
    capabilities a request needed, the sizes it went over); JSON-RPC lets it be any value."""

    code: int
    message: str
    data: Any | UnsetType = UNSET


#: Every typed result: each has ``meta`` for the engine to fill.
TypedResult: TypeAlias = Complete | InputRequiredResult | CreateTaskResult | GetTaskResult
