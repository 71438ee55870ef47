"""Pure translation between 2025-11-25 (legacy, experimental tasks) and 2026-07-28 + the Tasks
extension (protocol.md §4-6). No I/O: each function maps one shape to another, so it is tested as a table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from ext_tasks.protocol.errors import (
    INTERNAL_ERROR,
    LIMIT_EXCEEDED,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    Busy,
    InternalError,
    InvalidParams,
    InvalidRequest,
    LimitExceeded,
    MethodNotFound,
    ProtocolError,
)
from ext_tasks.protocol.result_types import DetailedTask, ErrorObject, Task, TypedResult
from ext_tasks.protocol.states import LEGACY_STATUS, LEGACY_TERMINAL, TaskStatus
from ext_tasks.protocol.states import legacy_status as legacy_status_of
from ext_tasks.protocol.tasks import EXTENSION_ID, bounded_status
from ext_tasks.protocol.versions import META_RELATED_TASK, META_SERVER_INFO

LEGACY_VERSIONS: Final[tuple[str, ...]] = ("2025-11-25", "2025-06-18", "2025-03-26")
LATEST_LEGACY: Final = "2025-11-25"
TERMINAL: Final = LEGACY_TERMINAL
#: Fields of 2026-07-28 results that a 2025-11-25 client has no use for.
_MODERN_ONLY_RESULT_FIELDS: Final = ("resultType", "ttlMs", "cacheScope")
#: Client capabilities that mean the same in both eras (``tasks`` does not carry over: SEP-2663).
_SHARED_CLIENT_CAPABILITIES: Final = ("elicitation", "sampling", "roots", "experimental")


def negotiate_version(requested: object) -> str:
    """The legacy revision to speak: the client's if this shim knows it, else the newest it knows."""
    return requested if isinstance(requested, str) and requested in LEGACY_VERSIONS else LATEST_LEGACY


def modern_capabilities(legacy: Mapping[str, Any], *, tasks: bool) -> dict[str, Any]:
    """Per-request 2026-07-28 ``clientCapabilities`` for a legacy session's client."""
    capabilities = {name: legacy[name] for name in _SHARED_CLIENT_CAPABILITIES if isinstance(legacy.get(name), dict)}
    if tasks:
        capabilities["extensions"] = {EXTENSION_ID: {}}
    return capabilities


def legacy_server_capabilities(*, list_tasks: bool) -> dict[str, Any]:
    tasks: dict[str, Any] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
    if list_tasks:
        tasks["list"] = {}
    return {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
        "completions": {},
        "tasks": tasks,
    }


def legacy_result(modern: TypedResult | Mapping[str, Any]) -> dict[str, Any]:
    """A modern result (a typed one, or a tool's stored result) as a legacy one: modern-only fields and
    the serverInfo ``_meta`` dropped. The legacy wire is plain objects, so this is where a typed result
    becomes one."""
    wire: Mapping[str, Any] = msgspec.to_builtins(modern) if isinstance(modern, msgspec.Struct) else modern
    result = {key: value for key, value in wire.items() if key not in _MODERN_ONLY_RESULT_FIELDS}
    meta = result.get("_meta")
    if isinstance(meta, dict):
        meta = {key: value for key, value in meta.items() if key != META_SERVER_INFO}
        if meta:
            result["_meta"] = meta
        else:
            del result["_meta"]
    return result


def legacy_tools(tools: list[dict[str, Any]], task_support: Mapping[str, str]) -> list[dict[str, Any]]:
    """``tools/list`` entries with ``execution.taskSupport`` (a legacy-only field) from the task policy."""
    described = []
    for tool in tools:
        support = task_support.get(tool["name"])
        described.append({**tool, "execution": {"taskSupport": support}} if support else dict(tool))
    return described


class LegacyTask(msgspec.Struct, omit_defaults=True, kw_only=True, rename="camel"):
    """The flat 2025-11-25 ``Task``: ``ttl`` and ``pollInterval`` (no ``Ms``), no result, error,
    inputRequests or resultType."""

    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl: int | None
    status_message: str | UnsetType = UNSET
    poll_interval: int | UnsetType = UNSET


class LegacyCreateTaskResult(msgspec.Struct):
    """The nested legacy ``CreateTaskResult``: ``{"task": {...}}``."""

    task: LegacyTask


def legacy_status(task: Task, *, cancelled_by_legacy: bool = False) -> str:
    """Legacy status: a tool result with ``isError`` is ``failed`` for legacy callers; once a legacy
    client cancelled a task it stays ``cancelled`` whatever the work did afterwards. The names are the
    status table's (``ext_tasks.protocol.states.legacy_status``)."""
    if cancelled_by_legacy:
        return LEGACY_STATUS[TaskStatus.CANCELLED]
    result = task.result if isinstance(task, DetailedTask) else UNSET
    tool_error = isinstance(result, dict) and result.get("isError") is True
    return legacy_status_of(task.status, tool_error=tool_error)


def legacy_task(task: Task, *, cancelled_by_legacy: bool = False) -> LegacyTask:
    """The legacy ``Task`` of a modern ``Task``/``DetailedTask``: ``ttlMs``→``ttl``,
    ``pollIntervalMs``→``pollInterval``."""
    status = legacy_status(task, cancelled_by_legacy=cancelled_by_legacy)
    status_message = task.status_message
    if status == LEGACY_STATUS[TaskStatus.FAILED] and task.status == TaskStatus.COMPLETED:
        # A tool error reads as failed here, and its text is the status message (not a progress message
        # from before the error): legacy clients that never call tasks/result see why it failed.
        status_message = _error_text(task.result if isinstance(task, DetailedTask) and task.result else {})
    return LegacyTask(
        task_id=task.task_id,
        status=status,
        created_at=task.created_at,
        last_updated_at=task.last_updated_at,
        ttl=task.ttl_ms,
        status_message=status_message,
        poll_interval=task.poll_interval_ms,
    )


def _error_text(result: Mapping[str, Any]) -> str:
    texts = [block.get("text") for block in result.get("content") or () if isinstance(block, dict)]
    return bounded_status(" ".join(item for item in texts if isinstance(item, str)) or "The tool reported an error")


def legacy_create_task_result(created: Task) -> LegacyCreateTaskResult:
    """The nested legacy ``CreateTaskResult``. Legacy tasks MUST start ``working``, so a task the engine
    seeded in another status is reported ``working`` until the first poll."""
    task = legacy_task(created)
    working = LEGACY_STATUS[TaskStatus.WORKING]
    return LegacyCreateTaskResult(task if task.status == working else msgspec.structs.replace(task, status=working))


def related_task_meta(task_id: str) -> dict[str, Any]:
    return {META_RELATED_TASK: {"taskId": task_id}}


def task_outcome(task: DetailedTask) -> tuple[str, dict[str, Any]]:
    """What legacy ``tasks/result`` answers for a terminal task: ``("result", CallToolResult)`` carrying
    the related-task ``_meta``, or ``("error", JSON-RPC error)``."""
    if task.status == TaskStatus.COMPLETED:
        result = legacy_result(task.result or {"content": []})
        result["_meta"] = {**(result.get("_meta") or {}), **related_task_meta(task.task_id)}
        return "result", result
    if task.status == TaskStatus.FAILED:
        error = task.error or InternalError("Task failed").to_error()
        return "error", dict(error)
    return "error", InternalError("Task was cancelled").to_error()


def legacy_input_request(entry: Mapping[str, Any], key: str, task_id: str | None) -> tuple[str, dict[str, Any]]:
    """One ``inputRequests`` entry as a legacy server→client request ``(method, params)``.

    URL elicitation needs an ``elicitationId`` in 2025-11-25; it is derived from the key. Inside a task
    the request carries the related-task ``_meta``.
    """
    method = str(entry["method"])
    params = dict(entry.get("params") or {})
    if method == "elicitation/create" and params.get("mode") == "url" and "elicitationId" not in params:
        params["elicitationId"] = f"{task_id or 'mrtr'}:{key}"
    if task_id is not None:
        params["_meta"] = {**(params.get("_meta") or {}), **related_task_meta(task_id)}
    return method, params


def answer_from_legacy_response(method: str, response: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``inputResponses`` value for a client's JSON-RPC response to a relayed request.

    A JSON-RPC error to an elicitation counts as the user cancelling it; to anything else it means the
    input cannot be had (``None``), and the caller fails the request.
    """
    if isinstance(response.get("result"), dict):
        return dict(response["result"])
    if method == "elicitation/create":
        return {"action": "cancel"}
    return None


def legacy_notification(message: dict[str, Any]) -> dict[str, Any]:
    params = dict(message.get("params") or {})
    meta = params.get("_meta")
    if isinstance(meta, dict):
        params["_meta"] = {key: value for key, value in meta.items() if "subscriptionId" not in key}
        if not params["_meta"]:
            del params["_meta"]
    return {**message, "params": params}


def legacy_error(error: ErrorObject) -> ProtocolError:
    """A modern error as the legacy era says it (no -320xx codes a 2025-11-25 client does not know).

    A "retry later" (a limit, -31429, or the store, -32603, with ``data.retryAfterSeconds``) stays one:
    raised, it is answered HTTP 429 or 503 with ``Retry-After``, as the engine answers it."""
    data: Mapping[str, Any] = error.data if isinstance(error.data, dict) else {}
    required = data.get("requiredCapabilities")
    if error.code == MISSING_REQUIRED_CLIENT_CAPABILITY and isinstance(required, dict):
        if EXTENSION_ID in (required.get("extensions") or {}):
            # 2025-11-25, tools section: a task-required tool called without augmentation gets -32601.
            return MethodNotFound("Task augmentation required for tools/call requests")
        return InvalidRequest(f"The client did not declare a capability this request needs: {', '.join(required)}")
    retry_after = data.get("retryAfterSeconds")
    if isinstance(retry_after, int) and not isinstance(retry_after, bool) and retry_after > 0:
        if error.code == LIMIT_EXCEEDED:
            return LimitExceeded(error.message, limit=str(data.get("limit", "")), retry_after_s=retry_after)
        if error.code == INTERNAL_ERROR:
            return Busy(error.message)
    return RelayedError(error)


class RelayedError(ProtocolError):
    """An error the upstream answered, passed on with its own code."""

    def __init__(self, error: ErrorObject) -> None:
        super().__init__(error.message, data=error.data if isinstance(error.data, dict) else None)
        self.relayed_code = error.code

    def error_object(self) -> ErrorObject:
        return msgspec.structs.replace(super().error_object(), code=self.relayed_code)


def required_string(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"Invalid params: {name} must be a non-empty string")
    return value


def result_of(final: Mapping[str, Any]) -> TypedResult:
    """The typed ``result`` of a JSON-RPC response (see ``modern_results``), or its error raised as the
    legacy era says it."""
    if "error" in final:
        raise legacy_error(final["error"])
    result: TypedResult = final["result"]
    return result
