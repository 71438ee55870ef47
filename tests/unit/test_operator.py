"""The operator's view, its pure parts (``ext_tasks.operator``, ``ext_tasks.admin_http.AdminTokens``):
what "stuck" means, how the admin API's query reads as a filter, which tokens the admin listener takes,
and the trace id read from a W3C ``traceparent``."""

from __future__ import annotations

import pytest

from ext_tasks.admin_http import AdminTokens
from ext_tasks.operator import StuckRule, TaskFilter
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.store.listing import Lease, TaskRow
from ext_tasks.tracing import trace_id_of as trace_id

NOW = 10_000_000
RULE = StuckRule(lease_ms=10_000, input_limit_ms=60_000)


def row(status: TaskStatus, quiet_ms: int, **changes: object) -> TaskRow:
    fields: dict[str, object] = {
        "task_id": "bd.x",
        "owner": "alice",
        "tool": "deploy",
        "status": status,
        "created_at_ms": NOW - quiet_ms - 1000,
        "updated_at_ms": NOW - quiet_ms,
        "expires_at_ms": None,
        "attempts": 1,
    }
    return TaskRow(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_working_task_is_stuck_once_its_worker_stops_heartbeating() -> None:
    alive = Lease("bd.x", "worker-1", idle_ms=3_000, attempt=1)
    dead = Lease("bd.x", "worker-1", idle_ms=12_000, attempt=1)
    assert RULE.reason(row(TaskStatus.WORKING, 60_000), alive, NOW) is None
    reason = RULE.reason(row(TaskStatus.WORKING, 60_000), dead, NOW)
    assert reason is not None and "worker-1" in reason and "12 s" in reason


def test_a_working_task_nobody_took_is_stuck_only_after_a_lease() -> None:
    assert RULE.reason(row(TaskStatus.WORKING, 2_000), None, NOW) is None  # just queued
    reason = RULE.reason(row(TaskStatus.WORKING, 30_000), None, NOW)
    assert reason is not None and "no worker has taken" in reason


def test_a_task_waiting_for_its_retry_is_stuck_only_a_lease_after_the_retry_was_due() -> None:
    # The retry was scheduled 30 s ago, due 60 s after that: nobody should have taken it yet.
    waiting = row(TaskStatus.WORKING, 30_000, retry_at_ms=NOW + 30_000)
    assert RULE.reason(waiting, None, NOW) is None
    assert RULE.reason(waiting, None, NOW + 30_000 + 10_000) is None  # due a lease ago at most
    reason = RULE.reason(waiting, None, NOW + 30_000 + 12_000)
    assert reason is not None and "for 12 s" in reason


def test_input_required_is_stuck_past_its_limit_and_finished_tasks_never() -> None:
    assert RULE.reason(row(TaskStatus.INPUT_REQUIRED, 59_000), None, NOW) is None
    assert "input_required" in (RULE.reason(row(TaskStatus.INPUT_REQUIRED, 61_000), None, NOW) or "")
    for status in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED):
        assert RULE.reason(row(status, 10**9), None, NOW) is None


def test_the_query_reads_as_a_filter() -> None:
    wanted = TaskFilter.from_query(
        {"status": ["working,failed", "cancelled"], "tool": ["deploy"], "older_than_s": ["1.5"], "stuck": ["true"]}
    )
    assert wanted.statuses == {TaskStatus.WORKING, TaskStatus.FAILED, TaskStatus.CANCELLED}
    assert (wanted.tool, wanted.principal, wanted.older_than_ms, wanted.stuck) == ("deploy", None, 1500, True)
    assert TaskFilter.from_query({"limit": ["0"]}).limit == 0
    assert TaskFilter.from_query({}).limit == 1000
    assert TaskFilter.from_query({}).admits(row(TaskStatus.WORKING, 0), NOW, None)


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ({"status": ["done"]}, "status"),
        ({"older_than_s": ["soon"]}, "older_than_s"),
        ({"min_attempts": ["-1"]}, "negative"),
    ],
)
def test_a_query_that_does_not_parse_says_what_is_wrong(query: dict[str, list[str]], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        TaskFilter.from_query(query)


def test_a_filter_admits_by_every_criterion() -> None:
    task = row(TaskStatus.FAILED, 5_000, attempts=3, owner="bob")  # created 6 s ago
    assert TaskFilter(statuses=frozenset({TaskStatus.FAILED}), principal="bob").admits(task, NOW, None)
    assert not TaskFilter(principal="alice").admits(task, NOW, None)
    assert TaskFilter(older_than_ms=6_000, newer_than_ms=6_000, min_attempts=3).admits(task, NOW, None)
    assert not TaskFilter(min_attempts=4).admits(task, NOW, None)
    assert not TaskFilter(stuck=True).admits(task, NOW, None)
    assert TaskFilter(stuck=True).admits(task, NOW, "why")


def test_only_an_admin_token_is_admitted() -> None:
    tokens = AdminTokens(["first-token", "second-token"])
    assert tokens.admits("Bearer second-token") and tokens.admits("bearer first-token")
    for refused in (None, "", "Bearer ", "Bearer second", "Basic second-token", "second-token", "Bearer first-tokenx"):
        assert not tokens.admits(refused)
    assert not AdminTokens([]).admits("Bearer ")


def test_the_trace_id_is_read_from_a_w3c_traceparent() -> None:
    assert trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id(None) is None
    assert trace_id("garbage") is None
