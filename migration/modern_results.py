"""The 2026-07-28 results the shim reads, as the engine's own Structs (``ext_tasks.protocol.result_types``).

The engine in process answers with those Structs already, and the shim takes them as they are. A remote
server's JSON (``ext-tasks proxy``) is decoded into the same Structs here, once, by the method it
answers: the shim's translation then reads typed fields on either path (``result.task_id``, not
``result["taskId"]``), and an answer that is not the result its method has is refused at the edge
(HTTP 502), not half-read later. Members a Struct does not name are dropped; the ones a 2025-11-25
client can use are all named.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ext_tasks.protocol.result_types import (
    Complete,
    CompleteResult,
    CreateTaskResult,
    DetailedTask,
    ErrorObject,
    GetPromptResult,
    GetTaskResult,
    InputRequiredResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    ReadResourceResult,
    ToolCallResult,
    TypedResult,
)

from .remote import UpstreamFailed

Message = dict[str, Any]

#: Per method the shim sends: the results it may be answered with. Methods that may ask the client
#: first (MRTR) may answer ``input_required``; ``tools/call`` may also answer with a task.
_RESULTS: Final[dict[str, Any]] = {
    "tools/call": ToolCallResult | CreateTaskResult | InputRequiredResult,
    "prompts/get": GetPromptResult | InputRequiredResult,
    "resources/read": ReadResourceResult | InputRequiredResult,
    "completion/complete": CompleteResult,
    "tools/list": ListToolsResult,
    "prompts/list": ListPromptsResult,
    "resources/list": ListResourcesResult,
    "resources/templates/list": ListResourceTemplatesResult,
    "tasks/get": GetTaskResult,
}


def typed_result(method: str, result: object) -> TypedResult:
    """``result`` (of a response to ``method``) as its Struct; a Struct already (the engine's) as it is.

    Raises :class:`~.remote.UpstreamFailed` when it is not a result ``method`` has."""
    if isinstance(result, msgspec.Struct):
        return result  # type: ignore[return-value]  # the engine's own, typed where it was made
    wanted = _RESULTS.get(method, Complete)
    try:
        typed: TypedResult = msgspec.convert(result, wanted)
    except msgspec.ValidationError as exc:
        raise UpstreamFailed(f"Upstream answered {method} with a malformed result: {exc}") from None
    return typed


def typed_error(error: object) -> ErrorObject:
    """A JSON-RPC ``error`` member as an :class:`ErrorObject` (the engine's is one already)."""
    if isinstance(error, ErrorObject):
        return error
    try:
        return msgspec.convert(error, ErrorObject)
    except msgspec.ValidationError as exc:
        raise UpstreamFailed(f"Upstream answered with a malformed error: {exc}") from None


def typed_response(method: str, message: Message) -> Message:
    """A response message with its ``result`` or ``error`` typed (see :func:`typed_result`); any other
    message as it is."""
    if "result" in message:
        return {**message, "result": typed_result(method, message["result"])}
    if "error" in message:
        return {**message, "error": typed_error(message["error"])}
    return message


def detailed_task(value: object) -> DetailedTask | None:
    """A task as read from a ``notifications/tasks`` (a wire object from the engine or a remote server)
    or from the shim's own store; ``None`` when it is not one (a remote's malformed notification is
    skipped, as any unusable message on a stream is)."""
    if isinstance(value, DetailedTask):
        return value
    try:
        return msgspec.convert(value, DetailedTask)
    except msgspec.ValidationError:
        return None
