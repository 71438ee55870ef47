"""The task status machine as data, and the pure record operations of ``ext_tasks.protocol.tasks``.

No store, no clock: records are built by hand and every change goes through the pure functions. The
table also names the lifecycle log events, the transitions metric's labels and the 2025-11-25 statuses,
and draws the diagram in docs/architecture.md: those are checked here too.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ext_tasks.lifecycle import task_event
from ext_tasks.metrics import REGISTRY
from ext_tasks.protocol.errors import INTERNAL_ERROR
from ext_tasks.protocol.states import (
    LEGACY_STATUS,
    LEGACY_TERMINAL,
    MERMAID_COMMAND,
    TABLE,
    TERMINAL,
    TRANSITIONS,
    Edge,
    InvalidTransition,
    TaskEvent,
    TaskStatus,
    edge,
    legacy_status,
    mermaid,
    next_status,
)
from ext_tasks.protocol.task_views import detailed_task_wire, task_wire
from ext_tasks.protocol.tasks import (
    TaskRecord,
    answers_merged,
    cancelled,
    completed,
    delivered,
    failed,
    input_requested,
    rerun_requested,
    status_reported,
    transition,
)
from migration import translate
from tests.unit.properties import quick

T0 = 1_800_000_000_000  # ms since the epoch (2027-01-15)
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")

NAME_REQUEST: dict[str, Any] = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}
COLOUR_REQUEST: dict[str, Any] = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your colour?",
        "requestedSchema": {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]},
    },
}
NAME_ANSWER: dict[str, Any] = {"action": "accept", "content": {"name": "Ada"}}
COLOUR_ANSWER: dict[str, Any] = {"action": "accept", "content": {"colour": "teal"}}
TOOL_RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "done"}], "isError": False}
ERROR: dict[str, Any] = {"code": INTERNAL_ERROR, "message": "Upstream API rate limit exceeded"}


def make_record(status: TaskStatus = TaskStatus.WORKING, **changes: Any) -> TaskRecord:
    record = TaskRecord(
        task_id="task-1",
        owner="alice",
        tool="deploy",
        arguments={"service": "api"},
        status=status,
        version=7,
        created_at_ms=T0,
        updated_at_ms=T0 + 1_000,
        ttl_ms=60_000,
        poll_interval_ms=500,
    )
    return msgspec.structs.replace(record, **changes)


def waiting_record(**requests: dict[str, Any]) -> TaskRecord:
    return make_record(TaskStatus.INPUT_REQUIRED, input_requests=dict(requests))


def record_in(status: TaskStatus) -> TaskRecord:
    """A record in ``status`` with the member that status carries on the wire."""
    if status is TaskStatus.INPUT_REQUIRED:
        return waiting_record(name=NAME_REQUEST)
    if status is TaskStatus.COMPLETED:
        return make_record(status, result=TOOL_RESULT)
    if status is TaskStatus.FAILED:
        return make_record(status, error=ERROR, status_message="Task failed: Upstream API rate limit exceeded")
    return make_record(status)


# --- the table --------------------------------------------------------------------------------------

_W, _I = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED
_C, _F, _X = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED
#: Every row, written out: the log event names are what operators and dashboards rely on.
EXPECTED_ROWS: dict[tuple[TaskStatus | None, TaskEvent], tuple[TaskStatus, str | None]] = {
    (None, TaskEvent.CREATED): (_W, "task.created"),
    (_W, TaskEvent.RUN_STARTED): (_W, None),
    (_W, TaskEvent.STATUS_REPORTED): (_W, None),
    (_W, TaskEvent.RERUN_REQUESTED): (_W, "task.rerun"),
    (_W, TaskEvent.RETRY_SCHEDULED): (_W, "task.retry_scheduled"),
    (_W, TaskEvent.RUN_DEFERRED): (_W, "task.run_deferred"),
    (_W, TaskEvent.INPUT_REQUESTED): (_I, "task.input_requested"),
    (_W, TaskEvent.SUCCEEDED): (_C, "task.completed"),
    (_W, TaskEvent.FAILED): (_F, "task.failed"),
    (_W, TaskEvent.CANCEL_REQUESTED): (_X, "task.cancelled"),
    (_I, TaskEvent.ANSWERED): (_I, "task.answered"),
    (_I, TaskEvent.INPUT_PROVIDED): (_W, "task.resumed"),
    (_I, TaskEvent.SUCCEEDED): (_C, "task.completed"),
    (_I, TaskEvent.FAILED): (_F, "task.failed"),
    (_I, TaskEvent.CANCEL_REQUESTED): (_X, "task.cancelled"),
    (_C, TaskEvent.DELIVERED): (_C, "task.result_retrieved"),
    (_F, TaskEvent.DELIVERED): (_F, "task.result_retrieved"),
    (_X, TaskEvent.DELIVERED): (_X, "task.result_retrieved"),
}


def test_terminal_statuses_are_completed_failed_cancelled() -> None:
    assert {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED} == TERMINAL
    assert [status for status in TaskStatus if status.terminal] == [
        TaskStatus.COMPLETED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
    ]


@pytest.mark.parametrize("status", sorted(TERMINAL))
@pytest.mark.parametrize("event", [event for event in TaskEvent if event is not TaskEvent.DELIVERED])
def test_a_terminal_record_refuses_every_other_event_and_stays_unchanged(status: TaskStatus, event: TaskEvent) -> None:
    record = record_in(status)
    with pytest.raises(InvalidTransition):
        transition(record, event, T0 + 5_000)
    assert record.status is status
    assert record.version == 7


@pytest.mark.parametrize("status", [TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED])
def test_non_terminal_statuses_reach_every_terminal_status(status: TaskStatus) -> None:
    reached = {TRANSITIONS[(status, event)] for event in TaskEvent if (status, event) in TRANSITIONS}
    assert reached >= TERMINAL


def test_the_table_follows_the_spec_state_machine() -> None:
    # protocol.md §3.10: working → input_required|completed|failed|cancelled; input_required → working|...
    assert TRANSITIONS[(TaskStatus.WORKING, TaskEvent.INPUT_REQUESTED)] is TaskStatus.INPUT_REQUIRED
    assert TRANSITIONS[(TaskStatus.INPUT_REQUIRED, TaskEvent.INPUT_PROVIDED)] is TaskStatus.WORKING
    assert (TaskStatus.WORKING, TaskEvent.INPUT_PROVIDED) not in TRANSITIONS
    assert (TaskStatus.INPUT_REQUIRED, TaskEvent.INPUT_REQUESTED) not in TRANSITIONS
    # Bookkeeping that leaves the status as it is: a run started, a status message, a state-only rerun, a
    # retry scheduled (the task is working while it waits), a partial answer, and the first delivery of
    # an outcome.
    events = (
        TaskEvent.RUN_STARTED,
        TaskEvent.STATUS_REPORTED,
        TaskEvent.RERUN_REQUESTED,
        TaskEvent.RETRY_SCHEDULED,
        TaskEvent.RUN_DEFERRED,  # a run waiting in a gate's line
    )
    for event in events:
        assert TRANSITIONS[(TaskStatus.WORKING, event)] is TaskStatus.WORKING
    assert TRANSITIONS[(TaskStatus.INPUT_REQUIRED, TaskEvent.ANSWERED)] is TaskStatus.INPUT_REQUIRED
    for status in TERMINAL:
        assert TRANSITIONS[(status, TaskEvent.DELIVERED)] is status


# --- properties of the machine (hypothesis) -----------------------------------------------------------
# The oracle is EXPECTED_ROWS, written out above, and the spec's diagram below: never the module's own
# TABLE, TRANSITIONS or TERMINAL, which the functions under test are derived from.

STATUSES = st.sampled_from(list(TaskStatus))
EVENTS = st.sampled_from(list(TaskEvent))
#: protocol.md §3.10: where a task may go from each status (staying where it is included), drawn by hand.
SPEC_MOVES: dict[TaskStatus, frozenset[TaskStatus]] = {
    _W: frozenset({_W, _I, _C, _F, _X}),
    _I: frozenset({_I, _W, _C, _F, _X}),
    _C: frozenset({_C}),
    _F: frozenset({_F}),
    _X: frozenset({_X}),
}


@quick(200)
@given(status=STATUSES, event=EVENTS)
def test_next_status_is_the_written_out_row_or_raises_invalid_transition(status: TaskStatus, event: TaskEvent) -> None:
    row = EXPECTED_ROWS.get((status, event))
    if row is None:
        with pytest.raises(InvalidTransition) as raised:
            next_status(status, event)
        assert (raised.value.status, raised.value.event) == (status, event)
        assert (status, event) not in TRANSITIONS
        return
    assert next_status(status, event) is row[0]
    assert TRANSITIONS[(status, event)] is row[0]
    assert edge(status, event).log == row[1]


@quick(100)
@given(status=st.sampled_from([_C, _F, _X]), event=EVENTS)
def test_a_finished_task_takes_only_delivered_and_stays_where_it_is(status: TaskStatus, event: TaskEvent) -> None:
    record = record_in(status)
    if event is TaskEvent.DELIVERED:
        assert transition(record, event, T0 + 5_000).status is status
        return
    with pytest.raises(InvalidTransition) as raised:
        transition(record, event, T0 + 5_000)
    assert (raised.value.status, raised.value.event) == (status, event)


@quick(200)
@given(start=STATUSES, events=st.lists(EVENTS, max_size=16), steps_ms=st.lists(st.integers(-3_000, 3_000)))
def test_any_sequence_of_events_moves_a_record_only_along_the_rows(
    start: TaskStatus, events: list[TaskEvent], steps_ms: list[int]
) -> None:
    # Events in any order, refused ones included, and a clock that may step back.
    record, now = record_in(start), T0 + 1_000
    for index, event in enumerate(events):
        now += steps_ms[index] if index < len(steps_ms) else 1_000
        row = EXPECTED_ROWS.get((record.status, event))
        if row is None:
            with pytest.raises(InvalidTransition):
                transition(record, event, now)
            continue  # records are immutable: a refused event leaves nothing to undo
        after = transition(record, event, now)
        assert after.status is row[0]
        assert after.status in SPEC_MOVES[record.status]
        assert after.version == record.version + 1
        assert after.updated_at_ms == max(record.updated_at_ms, now)
        assert (after.task_id, after.created_at_ms) == (record.task_id, record.created_at_ms)
        record = after


@quick(200)
@given(data=st.data())
def test_every_walk_of_allowed_events_from_working_stays_in_the_spec_diagram(data: st.DataObject) -> None:
    record, seen = make_record(_W), [_W]
    for _ in range(data.draw(st.integers(0, 12), label="length")):
        allowed = sorted(event for (status, event) in EXPECTED_ROWS if status is record.status)
        event = data.draw(st.sampled_from(allowed), label=f"event in {record.status.value}")
        after = transition(record, event, T0 + 2_000)
        assert after.status in SPEC_MOVES[record.status], (record.status, event, after.status)
        record = after
        seen.append(record.status)
    # Once finished, always finished: no walk leaves a terminal status.
    finished = [index for index, status in enumerate(seen) if status in {_C, _F, _X}]
    if finished:
        assert set(seen[finished[0] :]) == {seen[finished[0]]}


# --- transition ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "event"), list(TRANSITIONS), ids=[f"{s.value}-{e.value}" for s, e in TRANSITIONS])
def test_transition_bumps_version_by_one_and_applies_the_table(status: TaskStatus, event: TaskEvent) -> None:
    record = make_record(status)
    after = transition(record, event, T0 + 5_000, status_message="moved")
    assert after.status is TRANSITIONS[(status, event)]
    assert after.version == record.version + 1
    assert after.updated_at_ms == T0 + 5_000
    assert after.status_message == "moved"
    assert after.created_at_ms == record.created_at_ms
    assert record.version == 7  # the input record is never mutated


def test_transition_never_moves_updated_at_backwards() -> None:
    record = make_record(updated_at_ms=T0 + 10_000)
    after = transition(record, TaskEvent.STATUS_REPORTED, T0 + 2_000)  # a clock that stepped back
    assert after.updated_at_ms == T0 + 10_000
    assert after.version == record.version + 1


def test_each_transition_in_a_chain_has_a_strictly_greater_version() -> None:
    record = make_record()
    asked = input_requested(record, {"name": NAME_REQUEST}, {"step": 1}, T0 + 2_000)
    answered = answers_merged(asked, {"name": NAME_ANSWER}, T0 + 3_000)
    assert answered is not None
    done = completed(answered, TOOL_RESULT, T0 + 4_000)
    versions = [record.version, asked.version, answered.version, done.version]
    assert versions == sorted(set(versions))
    assert [asked.status, answered.status, done.status] == [
        TaskStatus.INPUT_REQUIRED,
        TaskStatus.WORKING,
        TaskStatus.COMPLETED,
    ]


def test_completed_after_cancel_is_an_invalid_transition() -> None:
    gone = cancelled(make_record(), T0 + 2_000)
    assert gone.status is TaskStatus.CANCELLED
    with pytest.raises(InvalidTransition):
        completed(gone, TOOL_RESULT, T0 + 3_000)


def test_failed_sets_the_error_and_a_status_message_and_drops_input_requests() -> None:
    record = waiting_record(name=NAME_REQUEST)
    after = failed(record, ERROR, T0 + 2_000)
    assert after.status is TaskStatus.FAILED
    assert after.error == ERROR
    assert after.status_message is not None
    assert ERROR["message"] in after.status_message
    assert after.input_requests == {}


def test_input_requested_keeps_the_requests_and_the_state() -> None:
    after = input_requested(make_record(), {"name": NAME_REQUEST}, {"step": 1}, T0 + 2_000)
    assert after.status is TaskStatus.INPUT_REQUIRED
    assert after.input_requests == {"name": NAME_REQUEST}
    assert after.state == {"step": 1}


# --- answers_merged -----------------------------------------------------------------------------------


def test_answers_merged_ignores_keys_that_are_not_outstanding() -> None:
    record = waiting_record(name=NAME_REQUEST)
    assert answers_merged(record, {"unknown": NAME_ANSWER}, T0 + 2_000) is None


def test_answers_merged_ignores_a_task_that_is_not_waiting() -> None:
    for status in (TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED):
        record = make_record(status, input_requests={"name": NAME_REQUEST})
        assert answers_merged(record, {"name": NAME_ANSWER}, T0 + 2_000) is None


def test_answers_merged_ignores_an_answer_already_given() -> None:
    record = waiting_record(colour=COLOUR_REQUEST)
    record = msgspec.structs.replace(record, answers={"name": NAME_ANSWER})
    assert answers_merged(record, {"name": {"action": "accept", "content": {"name": "Eve"}}}, T0 + 2_000) is None


def test_a_partial_answer_keeps_input_required_with_only_the_rest() -> None:
    record = waiting_record(name=NAME_REQUEST, colour=COLOUR_REQUEST)
    after = answers_merged(record, {"name": NAME_ANSWER, "stray": COLOUR_ANSWER}, T0 + 2_000)
    assert after is not None
    assert after.status is TaskStatus.INPUT_REQUIRED
    assert after.input_requests == {"colour": COLOUR_REQUEST}
    assert after.answers == {"name": NAME_ANSWER}
    assert after.version == record.version + 1
    assert detailed_task_wire(after)["inputRequests"] == {"colour": COLOUR_REQUEST}


def test_the_last_answer_returns_to_working_with_inputs_cleared_and_answers_kept() -> None:
    record = waiting_record(name=NAME_REQUEST, colour=COLOUR_REQUEST)
    partial = answers_merged(record, {"name": NAME_ANSWER}, T0 + 2_000)
    assert partial is not None
    after = answers_merged(partial, {"colour": COLOUR_ANSWER}, T0 + 3_000)
    assert after is not None
    assert after.status is TaskStatus.WORKING
    assert after.input_requests == {}
    assert after.answers == {"name": NAME_ANSWER, "colour": COLOUR_ANSWER}
    assert after.version == partial.version + 1
    assert after.updated_at_ms == T0 + 3_000


def test_answering_every_key_at_once_returns_to_working() -> None:
    record = waiting_record(name=NAME_REQUEST, colour=COLOUR_REQUEST)
    after = answers_merged(record, {"name": NAME_ANSWER, "colour": COLOUR_ANSWER}, T0 + 2_000)
    assert after is not None
    assert after.status is TaskStatus.WORKING
    assert after.input_requests == {}
    assert after.answers == {"name": NAME_ANSWER, "colour": COLOUR_ANSWER}


# --- the wire -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(TaskStatus))
def test_detailed_task_wire_carries_only_the_member_of_its_status(status: TaskStatus) -> None:
    # Every record carries every member internally; the wire must pick the one of its status only.
    record = msgspec.structs.replace(
        record_in(status),
        input_requests={"name": NAME_REQUEST},
        result=TOOL_RESULT,
        error=ERROR,
    )
    wire = detailed_task_wire(record)
    assert wire["status"] == status.value
    assert ("inputRequests" in wire) is (status is TaskStatus.INPUT_REQUIRED)
    assert ("result" in wire) is (status is TaskStatus.COMPLETED)
    assert ("error" in wire) is (status is TaskStatus.FAILED)
    if status is TaskStatus.INPUT_REQUIRED:
        assert wire["inputRequests"] == {"name": NAME_REQUEST}
    if status is TaskStatus.COMPLETED:
        assert wire["result"] == TOOL_RESULT
    if status is TaskStatus.FAILED:
        assert wire["error"] == ERROR
        assert "statusMessage" in wire


@pytest.mark.parametrize("status", list(TaskStatus))
def test_detailed_task_wire_has_integer_ms_fields_and_no_legacy_keys(status: TaskStatus) -> None:
    wire = detailed_task_wire(record_in(status))
    assert wire["taskId"] == "task-1"
    assert type(wire["ttlMs"]) is int
    assert wire["ttlMs"] == 60_000
    assert type(wire["pollIntervalMs"]) is int
    assert wire["pollIntervalMs"] == 500
    for legacy in ("ttl", "pollInterval", "task", "requestState", "resultType"):
        assert legacy not in wire


@pytest.mark.parametrize("status", list(TaskStatus))
def test_detailed_task_wire_times_are_iso8601_utc_ending_in_z(status: TaskStatus) -> None:
    wire = detailed_task_wire(record_in(status))
    assert ISO_Z.match(wire["createdAt"]), wire["createdAt"]
    assert ISO_Z.match(wire["lastUpdatedAt"]), wire["lastUpdatedAt"]
    assert wire["createdAt"].startswith("2027-01-15T08:00:00")
    assert wire["lastUpdatedAt"].startswith("2027-01-15T08:00:01")


def test_an_unlimited_ttl_is_sent_as_null() -> None:
    wire = detailed_task_wire(make_record(ttl_ms=None))
    assert "ttlMs" in wire
    assert wire["ttlMs"] is None


def test_task_wire_omits_status_message_until_there_is_one() -> None:
    assert "statusMessage" not in task_wire(make_record())
    assert task_wire(make_record(status_message="Halfway"))["statusMessage"] == "Halfway"


def test_task_wire_has_no_status_specific_member() -> None:
    for status in TaskStatus:
        wire = task_wire(record_in(status))
        assert not {"inputRequests", "result", "error"} & set(wire)


# --- the operations are the table's events ------------------------------------------------------------


def test_bookkeeping_operations_keep_the_status_and_bump_the_version() -> None:
    record = make_record(attempts=1)
    started = transition(record, TaskEvent.RUN_STARTED, T0 + 2_000, attempts=2)
    assert (started.status, started.attempts, started.version) == (TaskStatus.WORKING, 2, record.version + 1)
    reported = status_reported(started, "halfway", T0 + 3_000)
    assert (reported.status, reported.status_message, reported.version) == (TaskStatus.WORKING, "halfway", 9)
    rerun = rerun_requested(reported, {"step": 2}, T0 + 4_000)
    assert (rerun.status, rerun.state, rerun.attempts, rerun.version) == (TaskStatus.WORKING, {"step": 2}, 0, 10)
    with pytest.raises(InvalidTransition):
        transition(waiting_record(name=NAME_REQUEST), TaskEvent.RUN_STARTED, T0 + 2_000)
    with pytest.raises(InvalidTransition):
        status_reported(waiting_record(name=NAME_REQUEST), "halfway", T0 + 2_000)


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_the_first_delivery_is_the_delivered_edge_and_keeps_status_and_last_update(status: TaskStatus) -> None:
    record = msgspec.structs.replace(record_in(status), sensitive=True)
    after = delivered(record, T0 + 9_000, grace_ms=30_000)
    assert after is not None
    assert after.status is status
    assert after.version == record.version + 1
    assert after.delivered_at_ms == T0 + 9_000
    assert after.updated_at_ms == record.updated_at_ms  # a read, not an update: lastUpdatedAt stays
    assert delivered(after, T0 + 10_000, grace_ms=30_000) is None  # only the first delivery counts


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_reading_a_task_that_is_not_sensitive_changes_nothing(status: TaskStatus) -> None:
    # Only a sensitive outcome's first read has something to record (its lifetime shrinks); any other
    # read is a read, so tasks/get stays one store command.
    assert delivered(record_in(status), T0 + 9_000, grace_ms=30_000) is None


def test_delivering_a_sensitive_outcome_shrinks_its_lifetime_to_the_grace() -> None:
    record = make_record(TaskStatus.COMPLETED, result=TOOL_RESULT, sensitive=True, ttl_ms=3_600_000)
    after = delivered(record, T0 + 9_000, grace_ms=30_000)
    assert after is not None
    assert after.ttl_ms == 9_000 + 30_000


@pytest.mark.parametrize("status", [TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED])
def test_an_unfinished_task_is_never_delivered(status: TaskStatus) -> None:
    assert delivered(record_in(status), T0 + 9_000, grace_ms=30_000) is None
    with pytest.raises(InvalidTransition):
        transition(record_in(status), TaskEvent.DELIVERED, T0 + 9_000)


# --- the rows: lifecycle log events and the transitions metric ----------------------------------------


def test_the_table_is_exactly_these_rows() -> None:
    assert {(row.source, row.event): (row.target, row.log) for row in TABLE} == EXPECTED_ROWS
    assert len(TABLE) == len(EXPECTED_ROWS)  # no row twice
    assert {pair: target for pair, (target, _) in EXPECTED_ROWS.items() if pair[0] is not None} == TRANSITIONS


def test_a_task_is_created_working_and_nothing_else_creates_one() -> None:
    assert edge(None, TaskEvent.CREATED).target is TaskStatus.WORKING
    for status in TaskStatus:
        with pytest.raises(InvalidTransition):
            next_status(status, TaskEvent.CREATED)
    for event in TaskEvent:
        if event is not TaskEvent.CREATED:
            with pytest.raises(InvalidTransition, match="not created yet"):
                edge(None, event)


def test_the_metric_counts_entries_into_a_status_as_it_always_did() -> None:
    # Which log events meant "entered a status" before the table named them (lifecycle's old _ENTERS).
    entering = {row.log: row.enters.value for row in TABLE if row.enters is not None}
    assert entering == {
        "task.created": "working",
        "task.input_requested": "input_required",
        "task.resumed": "working",
        "task.completed": "completed",
        "task.failed": "failed",
        "task.cancelled": "cancelled",
    }
    staying = {row.log for row in TABLE if row.enters is None}
    assert staying == {
        None,
        "task.rerun",
        "task.retry_scheduled",
        "task.run_deferred",
        "task.answered",
        "task.result_retrieved",
    }


def _transitions(status: str) -> float:
    return REGISTRY.get_sample_value("ext_tasks_task_transitions_total", {"status": status}) or 0.0


@pytest.mark.parametrize("row", TABLE, ids=[f"{row.source}-{row.event.value}" for row in TABLE])
def test_task_event_logs_and_counts_what_its_row_says(row: Edge, caplog: pytest.LogCaptureFixture) -> None:
    record = record_in(row.target)
    before = {status.value: _transitions(status.value) for status in TaskStatus}
    with caplog.at_level(logging.INFO, logger="ext_tasks.lifecycle"):
        task_event(row.source, row.event, record, keys=2)
    lines = [line for line in caplog.records if line.name == "ext_tasks.lifecycle"]
    if row.log is None:
        assert lines == []
    else:
        assert [line.getMessage() for line in lines] == [row.log]
        assert vars(lines[0])["event"] == row.log
        assert vars(lines[0])["task_id"] == "task-1"
        assert vars(lines[0])["tool"] == "deploy"
        assert vars(lines[0])["keys"] == 2
    counted = {status: _transitions(status) - value for status, value in before.items()}
    expected = {status.value: 0.0 for status in TaskStatus}
    if row.enters is not None:
        expected[row.enters.value] = 1.0
    assert counted == expected


def test_task_event_refuses_a_transition_the_table_does_not_have() -> None:
    with pytest.raises(InvalidTransition):
        task_event(TaskStatus.COMPLETED, TaskEvent.SUCCEEDED, record_in(TaskStatus.COMPLETED))
    with pytest.raises(AssertionError, match="leads to completed"):
        task_event(TaskStatus.WORKING, TaskEvent.SUCCEEDED, record_in(TaskStatus.FAILED))


# --- the 2025-11-25 names -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(TaskStatus))
def test_legacy_statuses_have_the_same_names(status: TaskStatus) -> None:
    assert LEGACY_STATUS[status] == status.value
    assert type(LEGACY_STATUS[status]) is str
    assert legacy_status(status.value) == status.value


@pytest.mark.parametrize("status", list(TaskStatus))
def test_a_tool_error_reads_as_failed_only_for_a_completed_task(status: TaskStatus) -> None:
    expected = "failed" if status is TaskStatus.COMPLETED else status.value
    assert legacy_status(status.value, tool_error=True) == expected


def test_a_status_the_table_does_not_know_is_passed_on() -> None:
    assert legacy_status("paused") == "paused"
    assert legacy_status("paused", tool_error=True) == "paused"


def test_the_legacy_terminal_statuses_are_the_tables() -> None:
    assert {"completed", "failed", "cancelled"} == LEGACY_TERMINAL
    assert all(type(status) is str for status in LEGACY_TERMINAL)
    assert translate.TERMINAL is LEGACY_TERMINAL


# --- the diagram ----------------------------------------------------------------------------------------

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
STATES_SECTION = re.compile(r"<!-- states:begin -->\n(.*?)<!-- states:end -->", re.DOTALL)


def test_the_diagram_has_one_arrow_per_row() -> None:
    lines = mermaid().splitlines()
    assert lines[0] == "stateDiagram-v2"
    arrows = [line.strip() for line in lines if "-->" in line]
    assert len(arrows) == len(TABLE)
    assert "[*] --> working : created / task.created" in arrows
    assert "working --> input_required : input_requested / task.input_requested" in arrows
    assert "working --> working : run_started" in arrows
    assert "cancelled --> cancelled : delivered / task.result_retrieved" in arrows


def test_the_command_prints_the_diagram() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ext_tasks.protocol.states", "--mermaid"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ARCHITECTURE.parents[1],
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, mermaid(), "")


def test_the_diagram_in_the_docs_is_the_generated_one() -> None:
    found = STATES_SECTION.search(ARCHITECTURE.read_text(encoding="utf-8"))
    assert found is not None, f"{ARCHITECTURE} has no <!-- states:begin --> ... <!-- states:end --> section"
    assert found.group(1) == f"```mermaid\n{mermaid()}```\n", (
        f"The task-state diagram in docs/architecture.md differs from ext_tasks/protocol/states.py's table. "
        f"Regenerate it with `.venv/bin/{MERMAID_COMMAND}` and put the output in the ```mermaid block "
        "between <!-- states:begin --> and <!-- states:end -->."
    )
