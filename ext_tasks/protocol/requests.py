"""Typed requests: each method's params checked once, into a frozen struct the layers below read.

``PARSERS[method](params, envelope)`` raises the precise -32602 (or -32021) a malformed request gets,
or returns the method's params. Nothing below the engine reads the raw params again. The checks keep
the order clients see: a method of the Tasks extension first requires the extension on the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

import msgspec

from .envelope import Envelope, Target
from .errors import InvalidParams, MissingClientCapability
from .params import CompleteParams, GetPromptParams, ListenParams, ListParams, ReadResourceParams, decode_params
from .tasks import EXTENSION_ID
from .wire import parse_input_responses

Answers = dict[str, dict[str, Any]]
P = TypeVar("P")

#: Longest task id a request may name (ids this server issues are 24 characters).
MAX_TASK_ID_CHARS: Final = 256


class _NoState:
    """``requestState`` absent (``None`` would be a state, and a wrong one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_STATE"


NO_STATE: Final = _NoState()


class Round(msgspec.Struct, frozen=True):
    """What a request that may answer ``input_required`` carries for its round: this round's answers,
    and the echoed ``requestState`` (unverified; :data:`NO_STATE` on a first round)."""

    answers: Answers
    state: object = NO_STATE

    @property
    def resumed(self) -> bool:
        return self.state is not NO_STATE


class ToolCall(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any]
    round: Round


class PromptGet(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, str]
    round: Round


class ResourceRead(msgspec.Struct, frozen=True):
    uri: str
    round: Round


class Listing(msgspec.Struct, frozen=True):
    cursor: str | None


class TaskRef(msgspec.Struct, frozen=True):
    """``tasks/get`` and ``tasks/cancel``."""

    task_id: str


class TaskUpdate(msgspec.Struct, frozen=True):
    task_id: str
    answers: Answers


class NoParams(msgspec.Struct, frozen=True):
    pass


class Call(msgspec.Struct, Generic[P], frozen=True):
    """One checked request: its id and method, its typed params, and what its envelope says."""

    id: str | int
    method: str
    params: P
    envelope: Envelope


# --- the parsers ----------------------------------------------------------------------------------------


def declares_tasks(envelope: Envelope) -> bool:
    extensions = envelope.client_capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION_ID), dict)


def require_tasks_extension(envelope: Envelope) -> None:
    if not declares_tasks(envelope):
        raise MissingClientCapability(
            {"extensions": {EXTENSION_ID: {}}},
            f"Missing required client capability: the {EXTENSION_ID} extension must be declared on this request",
        )


def _round(params: Mapping[str, Any]) -> Round:
    answers = parse_input_responses(params)
    return Round(answers, params["requestState"]) if "requestState" in params else Round(answers)


def parse_tool_call(params: dict[str, Any]) -> ToolCall:
    """Checked by hand: this is the hottest path, and these fields are all it needs. The one read of the
    call's ``name``: the engine parses the call before the envelope check, which gets it from here."""
    name = params.get("name")
    if not isinstance(name, str):
        raise InvalidParams("Invalid params: name must be a string")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise InvalidParams("Invalid params: arguments must be an object")
    return ToolCall(name, arguments, _round(params))


def tool_call(params: dict[str, Any], envelope: Envelope) -> ToolCall:
    return parse_tool_call(params)


def loose_target(params: Mapping[str, Any]) -> Target:
    """What headers are checked against for a call :func:`parse_tool_call` refused (the envelope's own
    errors come first): its name if a string, its arguments if an object."""
    name, arguments = params.get("name"), params.get("arguments")
    return Target(name if isinstance(name, str) else None, arguments if isinstance(arguments, dict) else {})


def prompt_get(params: dict[str, Any], envelope: Envelope) -> PromptGet:
    checked = decode_params(GetPromptParams, params)
    return PromptGet(checked.name, dict(checked.arguments or {}), _round(params))


def resource_read(params: dict[str, Any], envelope: Envelope) -> ResourceRead:
    return ResourceRead(decode_params(ReadResourceParams, params).uri, _round(params))


def listing(params: dict[str, Any], envelope: Envelope) -> Listing:
    return Listing(decode_params(ListParams, params).cursor)


def _task_id(params: Mapping[str, Any], envelope: Envelope) -> str:
    require_tasks_extension(envelope)
    task_id = params.get("taskId")
    if not isinstance(task_id, str) or not 0 < len(task_id) <= MAX_TASK_ID_CHARS:
        raise InvalidParams(f"Invalid params: taskId must be a string of 1 to {MAX_TASK_ID_CHARS} characters")
    return task_id


def task_ref(params: dict[str, Any], envelope: Envelope) -> TaskRef:
    return TaskRef(_task_id(params, envelope))


def task_update(params: dict[str, Any], envelope: Envelope) -> TaskUpdate:
    task_id = _task_id(params, envelope)
    if "inputResponses" not in params:
        raise InvalidParams("Invalid params: inputResponses is required")
    return TaskUpdate(task_id, parse_input_responses(params))


def listen(params: dict[str, Any], envelope: Envelope) -> ListenParams:
    """The filter of ``subscriptions/listen``; its model caps the ids and URIs one listen may name."""
    checked = decode_params(ListenParams, params)
    if checked.notifications.task_ids is not None:
        require_tasks_extension(envelope)  # -32021 before any stream opens
    return checked


def complete(params: dict[str, Any], envelope: Envelope) -> CompleteParams:
    return decode_params(CompleteParams, params)


def no_params(params: dict[str, Any], envelope: Envelope) -> NoParams:
    return NoParams()


Parser = Callable[[dict[str, Any], Envelope], Any]

PARSERS: Final[Mapping[str, Parser]] = {
    "server/discover": no_params,
    "tools/list": listing,
    "prompts/list": listing,
    "resources/list": listing,
    "resources/templates/list": listing,
    "tools/call": tool_call,
    "prompts/get": prompt_get,
    "resources/read": resource_read,
    "completion/complete": complete,
    "subscriptions/listen": listen,
    "tasks/get": task_ref,
    "tasks/update": task_update,
    "tasks/cancel": task_ref,
}
