"""The task status machine as data, and the pure record operations of ``ext_tasks.protocol.tasks``.

No store, no clock: records are built by hand and every change goes through the pure functions.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

import pytest

from ext_tasks.protocol.states import (
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    TaskEvent,
    TaskStatus,
    next_status,
)
from ext_tasks.protocol.tasks import (
    TaskRecord,
    answers_merged,
    cancelled,
    completed,
    detailed_task_wire,
    failed,
    input_requested,
    task_wire,
    transition,
)

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
ERROR: dict[str, Any] = {"code": -32603, "message": "Upstream API rate limit exceeded"}

ALL_PAIRS = list(itertools.product(TaskStatus, TaskEvent))


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
    return dataclasses.replace(record, **changes)


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


@pytest.mark.parametrize(("status", "event"), ALL_PAIRS, ids=[f"{s.value}-{e.value}" for s, e in ALL_PAIRS])
def test_every_status_event_pair_is_in_the_table_or_raises_invalid_transition(
    status: TaskStatus, event: TaskEvent
) -> None:
    if (status, event) in TRANSITIONS:
        assert next_status(status, event) is TRANSITIONS[(status, event)]
        return
    with pytest.raises(InvalidTransition) as raised:
        next_status(status, event)
    assert raised.value.status is status
    assert raised.value.event is event


def test_terminal_statuses_are_completed_failed_cancelled() -> None:
    assert {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED} == TERMINAL
    assert [status for status in TaskStatus if status.terminal] == [
        TaskStatus.COMPLETED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
    ]


def test_terminal_statuses_have_no_outgoing_edge() -> None:
    assert not [pair for pair in TRANSITIONS if pair[0] in TERMINAL]


@pytest.mark.parametrize("status", sorted(TERMINAL))
@pytest.mark.parametrize("event", list(TaskEvent))
def test_a_terminal_record_refuses_every_event_and_stays_unchanged(status: TaskStatus, event: TaskEvent) -> None:
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
    for status in (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED):
        assert TRANSITIONS[(status, TaskEvent.PROGRESSED)] is status


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
    after = transition(record, TaskEvent.PROGRESSED, T0 + 2_000)  # a clock that stepped back
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
    record = dataclasses.replace(record, answers={"name": NAME_ANSWER})
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
    record = dataclasses.replace(
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
