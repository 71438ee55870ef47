"""What a tool, prompt or resource function sees of its request, and how it asks the client for input.

Asking for input works by re-running: a function asks (``await ctx.elicit(...)``, ``ctx.ask({...})``
or ``raise InputRequired(...)``); if the answer is not there yet, the call ends with an
``input_required`` result carrying a signed ``requestState``; when the client retries with answers,
the function runs again from the top and this time the same call returns the answer. Answers from
every earlier round stay available, so a function can ask step by step in straight-line code. Nothing
waits in memory for the client, so the retry may land on any instance that shares the keys.

Side effects before the last question therefore run once per round: keep them after the questions,
or make them idempotent.

The context remembers which keys the function asked for (``ask``, ``answer`` and the helpers built on
them): only answers under keys that were asked travel on to the next round, so answers a client sends
under keys nobody asked do not ride along in every later ``requestState``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NoReturn

import msgspec
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from .auth import Principal
from .protocol.envelope import LOG_LEVELS, Envelope
from .protocol.errors import MissingClientCapability
from .protocol.wire import CreateMessageResult, ElicitResult, ListRootsResult, Root

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]


class InputRequest(msgspec.Struct, frozen=True):
    """One request for input, as it appears under a key of ``inputRequests`` (a frozen Struct, not a
    dataclass: a resumed call builds its questions again, and this is twice as fast to build)."""

    method: str
    params: dict[str, Any] = {}

    def to_wire(self) -> dict[str, Any]:
        if self.method == "roots/list" and not self.params:
            return {"method": self.method}
        return {"method": self.method, "params": self.params}

    def required_capability(self) -> dict[str, Any]:
        """The client capability this request needs, in ``ClientCapabilities`` shape."""
        if self.method == "elicitation/create":
            return {"elicitation": {"url": {}}} if self.params.get("mode") == "url" else {"elicitation": {}}
        if self.method == "sampling/createMessage":
            return {"sampling": {"tools": {}}} if self.params.get("tools") else {"sampling": {}}
        return {"roots": {}}

    def parse_answer(self, answer: Mapping[str, Any]) -> Any:
        """The typed answer, or ``None`` when it does not answer this request (then it is asked again)."""
        # The models' validators, called directly: what model_validate does, without its ~0.5 µs of
        # argument handling (an answer is parsed on every round that carries one).
        try:
            if self.method == "elicitation/create":
                result = ElicitResult.__pydantic_validator__.validate_python(answer)
                return result if _fits_requested_schema(result, self.params.get("requestedSchema")) else None
            if self.method == "sampling/createMessage":
                return CreateMessageResult.__pydantic_validator__.validate_python(answer)
            return ListRootsResult.__pydantic_validator__.validate_python(answer)
        except ValidationError:
            return None


def client_has(capabilities: Mapping[str, Any], required: Mapping[str, Any]) -> bool:
    """Whether declared ``capabilities`` cover ``required`` (both ``ClientCapabilities``-shaped)."""
    for name, sub in required.items():
        declared = capabilities.get(name)
        if not isinstance(declared, dict):
            return False
        if name == "elicitation" and not sub and declared and "form" not in declared:
            return False  # `{}` means form only; an object naming only `url` does not include form
        if isinstance(sub, dict) and sub and not client_has(declared, sub):
            return False
    return True


def missing_capabilities(requests: Iterable[InputRequest], capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """What ``requests`` need that ``capabilities`` lack, merged into one ``ClientCapabilities`` object."""
    missing: dict[str, Any] = {}
    for request in requests:
        required = request.required_capability()
        if not client_has(capabilities, required):
            _merge(missing, required)
    return missing


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for name, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(name), dict):
            _merge(into[name], value)
        else:
            into.setdefault(name, dict(value) if isinstance(value, dict) else value)


def _fits_requested_schema(result: ElicitResult, schema: object) -> bool:
    """An accepted answer's content must be valid against the schema the question sent (JSON Schema,
    checked by ``jsonschema``: required fields, types, and the enum, length and range constraints that
    elicitation schemas use); a decline or a cancel carries no content to check."""
    if result.action != "accept" or not isinstance(schema, dict):
        return True
    if result.content is None:
        return False
    return bool(Draft202012Validator(schema).is_valid(result.content))


class InputRequired(Exception):
    """Raised by a function that cannot go on without answers from the client.

    ``requests`` may be empty: a state-only ``input_required`` result asks the client to retry at once
    (load shedding, hand-off). ``state`` is the function's own small JSON state for the next round.
    """

    def __init__(self, requests: Mapping[str, InputRequest] | None = None, *, state: Any = None) -> None:
        super().__init__("input required")
        self.requests = dict(requests or {})
        self.state = state


class StartTask(Exception):
    """Raised by ``ctx.start_task()`` on the inline path: the engine turns the call into a task here."""


class ToolError(Exception):
    """Raised by a tool to end with an ``isError`` result whose text is this message."""


class RetryLater(Exception):
    """Raised by ``ctx.retry_later``: inside a task, run the tool again ``after_s`` from now (``None``:
    after the tool's backoff), as its next attempt (:mod:`ext_tasks.retry`); inline, the call ends with
    an ``isError`` result saying ``reason``."""

    def __init__(self, after_s: float | None, reason: str) -> None:
        if after_s is not None and not after_s >= 0:
            raise ValueError("after_s must be a number of seconds, not negative")
        super().__init__(reason)
        self.after_s = after_s
        self.reason = reason


def elicit(message: str, schema: Mapping[str, Any] | type[BaseModel]) -> InputRequest:
    """A form elicitation; ``schema`` is a flat JSON object schema or a pydantic model."""
    requested = schema.model_json_schema() if isinstance(schema, type) else dict(schema)
    requested.pop("title", None)
    return InputRequest("elicitation/create", {"mode": "form", "message": message, "requestedSchema": requested})


def elicit_url(message: str, url: str) -> InputRequest:
    return InputRequest("elicitation/create", {"mode": "url", "message": message, "url": url})


def sample(prompt: str | list[dict[str, Any]], *, max_tokens: int, system_prompt: str | None = None) -> InputRequest:
    """A sampling request; ``prompt`` is one user text or a list of ``SamplingMessage`` objects."""
    messages = [{"role": "user", "content": {"type": "text", "text": prompt}}] if isinstance(prompt, str) else prompt
    params: dict[str, Any] = {"messages": messages, "maxTokens": max_tokens}
    if system_prompt is not None:
        params["systemPrompt"] = system_prompt
    return InputRequest("sampling/createMessage", params)


def list_roots() -> InputRequest:
    return InputRequest("roots/list")


async def _no_emit(method: str, params: dict[str, Any]) -> None:
    return None


class Context:
    """The per-request view a function gets when it declares a parameter annotated ``Context``."""

    def __init__(
        self,
        *,
        principal: Principal,
        envelope: Envelope,
        answers: Mapping[str, dict[str, Any]] | None = None,
        state: Any = None,
        emit: Emit = _no_emit,
        task_id: str | None = None,
        can_start_task: bool = False,
        on_status: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.principal = principal
        self.envelope = envelope
        self.state = state
        #: Set while the function runs as a task: stable across re-runs and crash recoveries, so tools
        #: use it as the idempotency key of their side effects.
        self.task_id = task_id
        self._answers = dict(answers or {})
        self._asked: set[str] = set()
        self._emit = emit
        self._can_start_task = can_start_task
        self._on_status = on_status

    async def start_task(self) -> None:
        """Continue as a task from here, if this tool and this request allow it.

        Only meaningful for tools registered with ``preflight=True``: what runs before this call runs
        inline (and may ask for input through multi round-trip requests); the call then ends with a
        ``CreateTaskResult`` and the function runs again in a worker, where this returns at once. For
        a client that did not declare the tasks extension on an ``optional`` tool, it returns at once
        and the whole function runs inline.
        """
        if self.task_id is None and self._can_start_task:
            raise StartTask

    async def set_status(self, message: str) -> None:
        """Inside a task: publish ``message`` as the task's ``statusMessage``. Inline: nothing."""
        if self._on_status is not None:
            await self._on_status(message)

    def retry_later(self, after_s: float, reason: str) -> NoReturn:
        """End this attempt and run the tool again ``after_s`` seconds from now, as its next attempt
        (bounded by the tool's ``retry=Retry(attempts=...)``, 3 without one); past the last attempt the
        task ends ``failed`` with ``reason``. The wait is kept by the task store, not by this process."""
        raise RetryLater(after_s, reason)

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        return self.envelope.client_capabilities

    @property
    def client_info(self) -> Mapping[str, Any] | None:
        return self.envelope.client_info

    @property
    def answers(self) -> Mapping[str, dict[str, Any]]:
        """Raw answers received so far (this round's and every earlier round's), by key."""
        return self._answers

    @property
    def asked_keys(self) -> frozenset[str]:
        """The keys this function asked for in this run (through ``ask``, ``answer`` or the helpers),
        answered or not. With the keys of a raised :class:`InputRequired` and of earlier rounds, they
        decide which answers are carried to the next round."""
        return frozenset(self._asked)

    def supports(self, request_or_capability: InputRequest | Mapping[str, Any]) -> bool:
        """Whether this request's client declared what ``request_or_capability`` needs."""
        required = (
            request_or_capability.required_capability()
            if isinstance(request_or_capability, InputRequest)
            else request_or_capability
        )
        return client_has(self.client_capabilities, required)

    def require(self, capability: Mapping[str, Any]) -> None:
        """Fail with -32021 unless the client declared ``capability`` on this request."""
        if not client_has(self.client_capabilities, capability):
            raise MissingClientCapability(capability)

    def answer(self, key: str, request: InputRequest) -> Any:
        """The typed answer to ``request`` under ``key`` if one was given and fits, else ``None``."""
        self._asked.add(key)
        raw = self._answers.get(key)
        return None if raw is None else request.parse_answer(raw)

    def ask(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        """Typed answers to every request, or raise :class:`InputRequired` for the ones still missing."""
        answered: dict[str, Any] = {}
        missing: dict[str, InputRequest] = {}
        for key, request in requests.items():
            parsed = self.answer(key, request)
            if parsed is None:
                missing[key] = request
            else:
                answered[key] = parsed
        if missing:
            raise InputRequired(missing, state=self.state)
        return answered

    async def elicit(self, key: str, message: str, schema: Mapping[str, Any] | type[BaseModel]) -> ElicitResult:
        result: ElicitResult = self.ask({key: elicit(message, schema)})[key]
        return result

    async def sample(self, key: str, prompt: str | list[dict[str, Any]], *, max_tokens: int) -> CreateMessageResult:
        result: CreateMessageResult = self.ask({key: sample(prompt, max_tokens=max_tokens)})[key]
        return result

    async def list_roots(self, key: str) -> list[Root]:
        result: ListRootsResult = self.ask({key: list_roots()})[key]
        return result.roots

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the request carried a ``progressToken``; inside a task,
        ``message`` becomes the task's ``statusMessage`` (tasks have no progress notifications)."""
        if message is not None and self._on_status is not None:
            await self._on_status(message)
        token = self.envelope.progress_token
        if token is None:
            return
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._emit("notifications/progress", params)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` at ``level`` if the request asked for logs at or below it."""
        if level not in LOG_LEVELS:
            # A tool's own mistake: it fails the same way whether or not this client asked for logs.
            raise ValueError(f"unknown log level {level!r}: one of {', '.join(LOG_LEVELS)}")
        wanted = self.envelope.log_level
        if wanted is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._emit("notifications/message", params)
