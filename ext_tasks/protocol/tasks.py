"""Task records of the Tasks extension and the pure operations on them.

A :class:`TaskRecord` is what the store keeps: the wire fields (``DetailedTask``) plus what the server
needs to run the tool again on any instance (tool, arguments, the declaring request's capabilities,
every answer so far, the function's own state, the run attempt count). Every change goes through
:func:`transition`, which takes the next status from the table (``states.TABLE``) and bumps ``version``;
the store commits a change only if the version it read is still current (compare-and-set), so two
instances never both win. Each operation below is one event of the table.

What a record keeps is bounded (see the limits in ``options.TaskOptions``): the client's capabilities
only as far as tools can use them (:func:`kept_capabilities`), a status message to
:data:`MAX_STATUS_CHARS` characters, and the bytes the caps charge are :func:`stored_bytes`. What a reader
is told of a record (the wire shapes, at the moment it is read) is :mod:`.task_views`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from .errors import InternalError
from .states import TaskEvent, TaskStatus, next_status

EXTENSION_ID = "io.modelcontextprotocol/tasks"
#: How many times a task's function was started (``tasks/get`` ``_meta``): runs are at least once, and
#: a run taken over after a crash says so here.
META_RUN_ATTEMPTS = "dev.ext-tasks/runAttempts"
#: How many times the task's tool was scheduled to run again after a transient failure (its
#: ``retry=Retry(...)`` or ``ctx.retry_later``), apart from crash re-runs; present once there was one.
META_RETRIES = "dev.ext-tasks/retries"
#: The longest ``statusMessage`` kept: a status is a line for a human, and longer ones end with "…".
MAX_STATUS_CHARS: Final = 1024
#: The client capabilities a task keeps: those that decide what its tool may ask (elicitation, sampling,
#: roots) and those a tool may check with ``ctx.supports``/``ctx.require`` (experimental, extensions).
TASK_CAPABILITIES: Final = ("elicitation", "sampling", "roots", "experimental", "extensions")
#: The most a task (or a legacy session) keeps of them, as encoded JSON.
MAX_CAPABILITY_BYTES: Final = 16 * 1024
#: The most a failed task keeps of its error's ``data``, as encoded JSON (its message is cut like a
#: status message): a tool's error is an outcome, bounded like a result.
MAX_ERROR_DATA_BYTES: Final = 16 * 1024
#: What a record keeps besides its structured fields (ids, times, counters, field names), roughly.
_RECORD_OVERHEAD: Final = 256
_encoder: Final = msgspec.json.Encoder()


class TaskRecord(msgspec.Struct, frozen=True):
    task_id: str
    owner: str
    tool: str
    arguments: dict[str, Any]
    status: TaskStatus
    version: int
    created_at_ms: int
    updated_at_ms: int
    ttl_ms: int | None
    poll_interval_ms: int
    client_capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    status_message: str | None = None
    input_requests: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    state: Any = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    #: Ceiling of the suggested poll interval; ``poll_interval_ms`` is where it starts.
    poll_max_ms: int | None = None
    #: A sensitive task's lifetime shrinks to a short grace once ``tasks/get`` delivered its outcome.
    sensitive: bool = False
    #: When ``tasks/get`` first delivered the terminal outcome (``None`` until then).
    delivered_at_ms: int | None = None
    #: Every key ever put in ``inputRequests`` -> the tool's own key for it. A question asked again
    #: (its answer did not fit) goes out under a fresh key, since keys are unique for a task's life.
    asked_as: dict[str, str] = msgspec.field(default_factory=dict)
    #: What the owner's credentials said at creation (OAuth issuer, subject, client, scopes, claims), as
    #: JSON text read only when a run starts, so the tool sees the same ``ctx.principal`` on whichever
    #: worker runs it; ``None`` for a static token.
    grant: str | None = None
    #: The lifetime granted at creation (``EXT_TASKS_TASK_TTL_MS``, the tool's ``ttl_ms`` or a legacy
    #: client's hint): while the task is unfinished, ``createdAt + ttlMs`` is kept this far ahead of the
    #: moment it is read (:func:`.task_views.reported_ttl`).
    #: ``None``: a record of an earlier version (``ttl_ms`` as is).
    grant_ms: int | None = None
    #: When the wait for input ends the task: read in ``input_required`` only (a later status may keep
    #: the last wait's deadline; it means nothing there).
    deadline_ms: int | None = None
    #: Retries scheduled so far (:mod:`ext_tasks.retry`): the running attempt is ``retries + 1``.
    retries: int = 0
    #: When the last retry scheduled is due (its run waits in the store until then; ``None``: none yet).
    retry_at_ms: int | None = None
    #: Runs interrupted before flow control deferred the task's run (:func:`run_deferred`): the run it
    #: gets later is a fresh delivery of the queue, counted from 1, so the crash count goes on from these.
    carried_attempts: int = 0
    #: The creating request's span context as a W3C ``traceparent`` (55 characters), kept only when
    #: tracing is on (``ext_tasks.tracing``): each run attempt's span continues it and links to it, and
    #: ``tasks/*`` spans link to it. Its trace id (characters 3 to 35) names the task's trace.
    trace_context: str | None = None

    @property
    def expires_at_ms(self) -> int | None:
        return None if self.ttl_ms is None else self.created_at_ms + self.ttl_ms

    @property
    def terminal(self) -> bool:
        return self.status.terminal


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as JSON (what the stores keep of a structured field)."""
    return len(_encoder.encode(value))


def stored_bytes(record: TaskRecord) -> int:
    """What the caps charge for ``record``: the encoded size of everything it keeps."""
    size = _RECORD_OVERHEAD + len(record.task_id) + len(record.owner.encode()) + len(record.tool.encode())
    if record.status_message is not None:
        size += len(record.status_message.encode())
    structured = (
        record.arguments,
        record.client_capabilities,
        record.input_requests,
        record.answers,
        record.asked_as,
        record.state,
        record.result,
        record.error,
    )
    if record.grant is not None:
        size += len(record.grant.encode())
    if record.trace_context is not None:
        size += len(record.trace_context)
    return size + sum(len(_encoder.encode(part)) for part in structured if part)


def kept_capabilities(capabilities: object, names: tuple[str, ...] = TASK_CAPABILITIES) -> dict[str, Any]:
    """The capabilities among ``names`` that ``capabilities`` declares (as objects), nothing else: what
    reads them later (a tool inside a task, the legacy shim) needs no more, and a client must not make
    the store keep arbitrary JSON."""
    if not isinstance(capabilities, Mapping):
        return {}
    return {name: capabilities[name] for name in names if isinstance(capabilities.get(name), dict)}


def bounded_status(message: str) -> str:
    """``message`` cut to :data:`MAX_STATUS_CHARS` characters, the cut marked with an ellipsis."""
    return message if len(message) <= MAX_STATUS_CHARS else message[: MAX_STATUS_CHARS - 1] + "…"


def result_too_large(size: int, limit: int) -> dict[str, Any]:
    """The error a task ends ``failed`` with when its result is larger than it may keep."""
    return InternalError(
        f"The tool's result is too large to keep ({size} bytes; the limit is {limit}, EXT_TASKS_MAX_RESULT_BYTES)"
    ).to_error()


def bounded_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """``error`` as a failed task keeps it: its message cut to :data:`MAX_STATUS_CHARS` characters, its
    ``data`` dropped if larger than :data:`MAX_ERROR_DATA_BYTES`."""
    kept = dict(error)
    message = kept.get("message")
    if isinstance(message, str):
        kept["message"] = bounded_status(message)
    if "data" in kept and encoded_size(kept["data"]) > MAX_ERROR_DATA_BYTES:
        del kept["data"]
    return kept


def failure_status(error: Mapping[str, Any]) -> str:
    """The ``statusMessage`` of a task that failed with ``error``."""
    return bounded_status(f"Task failed: {error.get('message', 'error')}")


Requests = dict[str, dict[str, Any]]


def transition(
    record: TaskRecord,
    event: TaskEvent,
    now_ms: int,
    *,
    status_message: str | UnsetType | None = UNSET,
    input_requests: Requests | UnsetType = UNSET,
    answers: Requests | UnsetType = UNSET,
    asked_as: dict[str, str] | UnsetType = UNSET,
    state: Any = UNSET,
    result: dict[str, Any] | UnsetType = UNSET,
    error: dict[str, Any] | UnsetType = UNSET,
    attempts: int | UnsetType = UNSET,
    ttl_ms: int | UnsetType = UNSET,
    delivered_at_ms: int | UnsetType = UNSET,
    retries: int | UnsetType = UNSET,
    retry_at_ms: int | UnsetType = UNSET,
    carried_attempts: int | UnsetType = UNSET,
) -> TaskRecord:
    """The record after ``event``: next status from the table, version + 1, the fields given changed
    (the others kept, as the same objects: the Valkey codec writes only what changed), and
    ``lastUpdatedAt`` moved to ``now_ms`` (never backwards).

    Raises:
        InvalidTransition: the event is not allowed in the record's status (e.g. any event but
            ``delivered`` on a terminal task).
    """
    status = next_status(record.status, event)
    given = {
        "status_message": status_message,
        "input_requests": input_requests,
        "answers": answers,
        "asked_as": asked_as,
        "state": state,
        "result": result,
        "error": error,
        "attempts": attempts,
        "ttl_ms": ttl_ms,
        "delivered_at_ms": delivered_at_ms,
        "retries": retries,
        "retry_at_ms": retry_at_ms,
        "carried_attempts": carried_attempts,
    }
    changes = {name: value for name, value in given.items() if value is not UNSET}
    if attempts is not UNSET:  # the crash count set afresh: nothing carried over a deferral either
        changes.setdefault("carried_attempts", 0)
    updated_at_ms = max(now_ms, record.updated_at_ms)
    return msgspec.structs.replace(
        record, status=status, version=record.version + 1, updated_at_ms=updated_at_ms, **changes
    )


def input_requested(record: TaskRecord, requests: Mapping[str, dict[str, Any]], state: Any, now_ms: int) -> TaskRecord:
    """The task waits for answers to ``requests`` (keyed by the tool's own keys).

    A key that was asked before gets a fresh wire key (``confirm.2``, ``confirm.3`` ...): the spec
    forbids reusing a key after its answer arrived. Reaching this resting point also resets the run
    attempt count, which only counts runs that were interrupted.
    """
    asked_as = dict(record.asked_as)
    wire: dict[str, dict[str, Any]] = {}
    for key, request in requests.items():
        wire_key = key
        serial = 1
        while wire_key in asked_as or (wire_key == key and key in record.answers):
            serial += 1
            wire_key = f"{key}.{serial}"
        asked_as[wire_key] = key
        wire[wire_key] = request
    return transition(
        record, TaskEvent.INPUT_REQUESTED, now_ms, input_requests=wire, state=state, asked_as=asked_as, attempts=0
    )


def status_reported(record: TaskRecord, message: str, now_ms: int) -> TaskRecord:
    """The running function set its ``statusMessage``."""
    return transition(record, TaskEvent.STATUS_REPORTED, now_ms, status_message=bounded_status(message))


def rerun_requested(record: TaskRecord, state: Any, now_ms: int) -> TaskRecord:
    """A state-only ``input_required`` inside a task: nothing to ask, so run again with ``state``."""
    return transition(record, TaskEvent.RERUN_REQUESTED, now_ms, state=state, attempts=0)


def retry_scheduled(record: TaskRecord, status_message: str, due_at_ms: int, now_ms: int) -> TaskRecord:
    """The attempt failed transiently and the next one is scheduled, due at ``due_at_ms``: the task stays
    ``working``, saying when it runs again; the retry is counted and the crash count starts afresh for
    the next attempt."""
    return transition(
        record,
        TaskEvent.RETRY_SCHEDULED,
        now_ms,
        status_message=bounded_status(status_message),
        retries=record.retries + 1,
        retry_at_ms=due_at_ms,
        attempts=0,
    )


def run_deferred(record: TaskRecord, status_message: str, due_at_ms: int, now_ms: int) -> TaskRecord:
    """The run found a gate of flow control full and waits in its line, tried again at ``due_at_ms`` (or
    woken sooner, when a place comes free): the task stays ``working``, saying what it waits for. Not an
    attempt: neither the retries nor the crash count move. ``record`` is the run's, its attempt counted
    (``RunInProgress.working``): the runs interrupted before it are carried to the run the task gets
    later (a fresh delivery: without them, a run that kills its worker would escape
    ``EXT_TASKS_MAX_ATTEMPTS`` by waiting in a gate's line between its crashes)."""
    interrupted = max(0, record.attempts - 1)
    return transition(
        record,
        TaskEvent.RUN_DEFERRED,
        now_ms,
        status_message=bounded_status(status_message),
        retry_at_ms=due_at_ms,
        attempts=interrupted,
        carried_attempts=interrupted,
    )


def answers_merged(record: TaskRecord, responses: Mapping[str, dict[str, Any]], now_ms: int) -> TaskRecord | None:
    """Merge answers for *outstanding* keys (others are ignored, as the spec asks).

    Returns ``None`` when nothing changes (no outstanding key answered, or the task is not waiting).
    Some keys answered is ``answered`` (still ``input_required``, with the rest outstanding); the last
    outstanding key answered is ``input_provided``: the task goes back to ``working``.
    """
    if record.status is not TaskStatus.INPUT_REQUIRED:
        return None
    accepted = {key: value for key, value in responses.items() if key in record.input_requests}
    if not accepted:
        return None
    outstanding = {key: value for key, value in record.input_requests.items() if key not in accepted}
    # Answers are kept under the tool's own key, whatever wire key the question went out under.
    answers = {**record.answers, **{record.asked_as.get(key, key): value for key, value in accepted.items()}}
    if outstanding:
        return transition(record, TaskEvent.ANSWERED, now_ms, input_requests=outstanding, answers=answers)
    return transition(record, TaskEvent.INPUT_PROVIDED, now_ms, input_requests={}, answers=answers)


def completed(record: TaskRecord, result: dict[str, Any], now_ms: int) -> TaskRecord:
    return transition(record, TaskEvent.SUCCEEDED, now_ms, result=result, input_requests={})


def failed(record: TaskRecord, error: dict[str, Any], now_ms: int) -> TaskRecord:
    kept = bounded_error(error)
    return transition(
        record, TaskEvent.FAILED, now_ms, error=kept, status_message=failure_status(kept), input_requests={}
    )


def cancelled(record: TaskRecord, now_ms: int) -> TaskRecord:
    return transition(
        record, TaskEvent.CANCEL_REQUESTED, now_ms, input_requests={}, status_message="The task was cancelled."
    )


def delivered(record: TaskRecord, now_ms: int, grace_ms: int) -> TaskRecord | None:
    """A sensitive task's record after ``tasks/get`` first handed out its terminal outcome (``None``
    if the task is not sensitive, not finished, or was delivered before: then a read writes nothing).

    The delivery time is recorded and the remaining lifetime shrinks to ``grace_ms`` from now (never
    grows), and ``ttlMs`` says so, since it counts from ``createdAt``. It is the table's ``delivered``
    edge: the status does not change, and neither does ``lastUpdatedAt`` (a read is no update of the
    task).
    """
    if not record.sensitive or not record.terminal or record.delivered_at_ms is not None:
        return None
    shrunk = now_ms + grace_ms - record.created_at_ms
    ttl_ms = max(1, shrunk if record.ttl_ms is None else min(record.ttl_ms, shrunk))
    return transition(record, TaskEvent.DELIVERED, record.updated_at_ms, ttl_ms=ttl_ms, delivered_at_ms=now_ms)
