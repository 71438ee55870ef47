"""A task's trace: the task a request created or reads named on its span, and each run attempt of the
task in a span of its own, continuing the creating request's trace (``TaskRecord.trace_context``) on
whichever instance runs it, with its attempt number, a reclaim after a crash and its outcome as events.
Off (:data:`.tracing.tracer` ``None``), a run costs one check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Tracer

from . import tracing
from .protocol.states import TaskEvent
from .protocol.tasks import TaskRecord
from .tracing import (
    EVENT_OUTCOME,
    EVENT_RECLAIMED,
    EVENT_RUN_STARTED,
    RUN_ATTEMPT,
    TASK_ID,
    context_of_traceparent,
    record_error,
    within,
)

R = TypeVar("R")


def add_task_link(record_context: str | None, task_id: str) -> None:
    """Link the current span to a task's trace (``tasks/get|update|cancel``, and what the legacy shim
    asks of a task through them), naming the task."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute(TASK_ID, task_id)
    context = context_of_traceparent(record_context)
    if context is not None:
        span.add_link(trace.get_current_span(context).get_span_context(), {"ext_tasks.link": "task"})


def name_task(task_id: str) -> None:
    """Name the task a request created on its span."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(TASK_ID, task_id)


def run_span(tracer: Tracer, record: TaskRecord, attempt: int, reclaimed: bool) -> Span:
    """The span of one run attempt of ``record``'s task: a child of the creating request's context,
    linked to it."""
    parent = context_of_traceparent(record.trace_context)
    links = [Link(trace.get_current_span(parent).get_span_context(), {"ext_tasks.link": "task"})] if parent else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": record.tool,
        TASK_ID: record.task_id,
        RUN_ATTEMPT: attempt,
    }
    if record.retries:  # a retry the tool asked for (ext_tasks.retry), not a crash's rerun
        attributes["ext_tasks.run.retries"] = record.retries
    span = tracer.start_span(
        f"execute_tool {record.tool}",
        context=parent if parent is not None else otel_context.Context(),
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
    )
    span.add_event(EVENT_RUN_STARTED, {RUN_ATTEMPT: attempt})
    if reclaimed or attempt > 1:
        # The run came back: its previous holder stopped (a crash, a lost lease) before finishing it.
        span.add_event(EVENT_RECLAIMED, {RUN_ATTEMPT: attempt, "ext_tasks.run.interrupted_attempts": attempt - 1})
    return span


async def traced_run(
    record: TaskRecord, attempt: int, reclaimed: bool, work: Callable[[Span | None], Awaitable[R]]
) -> R:
    """``work(span)``: a run attempt in its span (:func:`run_span`), or ``work(None)`` with tracing off."""
    if tracing.tracer is None:
        return await work(None)
    span = run_span(tracing.tracer, record, attempt, reclaimed)
    try:
        return await within(span, work(span))
    finally:
        span.end()


#: A run's outcome as its span names it, by the status table's event.
_OUTCOMES: Final = {
    TaskEvent.SUCCEEDED: "completed",
    TaskEvent.FAILED: "failed",
    TaskEvent.INPUT_REQUESTED: "input_required",
    TaskEvent.RERUN_REQUESTED: "rerun",
    TaskEvent.RETRY_SCHEDULED: "retry_scheduled",
    TaskEvent.RUN_DEFERRED: "deferred",
}


def run_outcome(
    span: Span | None, event: TaskEvent | None, attempt: int, error: Mapping[str, Any] | None = None
) -> None:
    """The outcome of a run attempt on its span (none: tracing off): ``completed``, ``failed``,
    ``input_required``, ``rerun``, ``retry_scheduled``, or ``superseded`` (``event`` ``None``: its
    commit lost to a cancellation)."""
    if span is None:
        return
    outcome = _OUTCOMES.get(event, "superseded") if event is not None else "superseded"
    attributes: dict[str, Any] = {"ext_tasks.run.outcome": outcome, RUN_ATTEMPT: attempt}
    if error is not None:
        attributes["error.type"] = str(error.get("code", "_OTHER"))
    span.add_event(EVENT_OUTCOME, attributes)
    span.set_attribute("ext_tasks.run.outcome", outcome)
    if error is not None:
        record_error(span, error.get("code", "_OTHER"), error.get("message"))
