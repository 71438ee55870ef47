"""The record codec: a commit writes exactly the fields that changed, and only those are encoded."""

from __future__ import annotations

import msgspec

from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import TaskRecord
from ext_tasks.store.valkey.codec import changes, field_map, record_from_fields

RECORD = TaskRecord(
    task_id="bd.x",
    owner="alice",
    tool="deploy",
    arguments={"service": "billing", "n": 1},
    status=TaskStatus.WORKING,
    version=1,
    created_at_ms=1_000,
    updated_at_ms=1_000,
    ttl_ms=60_000,
    poll_interval_ms=250,
    client_capabilities={"elicitation": {}},
    status_message="starting",
)


def test_fields_round_trip() -> None:
    assert record_from_fields(field_map(RECORD)) == RECORD
    assert "grant" not in field_map(RECORD)  # a static-token owner's task keeps no grant at all
    oauth = msgspec.structs.replace(RECORD, grant='{"issuer":"https://id.example.com","scopes":["mcp"],"claims":{}}')
    assert record_from_fields(field_map(oauth)) == oauth


def test_a_status_message_writes_a_few_scalars_and_no_structured_field() -> None:
    after = msgspec.structs.replace(RECORD, status_message="half way", version=2, updated_at_ms=2_000)
    changed, dropped = changes(RECORD, after)
    assert changed == {"status_message": "half way", "version": "2", "updated_at_ms": "2000"}
    assert dropped == []


def test_a_new_structured_value_is_encoded_and_a_cleared_field_dropped() -> None:
    after = msgspec.structs.replace(RECORD, result={"content": [], "isError": False}, status_message=None)
    changed, dropped = changes(RECORD, after)
    assert changed == {"result": '{"content":[],"isError":false}'}
    assert dropped == ["status_message"]
    gone = msgspec.structs.replace(after, result=None)
    assert changes(after, gone) == ({}, ["result"])


def test_a_value_equal_in_python_but_not_in_json_is_still_written() -> None:
    before = msgspec.structs.replace(RECORD, state={"confirm": 1})
    after = msgspec.structs.replace(before, state={"confirm": True})  # 1 == True in Python
    changed, _ = changes(before, after)
    assert changed == {"state": '{"confirm":true}'}


def test_every_change_survives_the_store_round_trip() -> None:
    after = msgspec.structs.replace(
        RECORD, status=TaskStatus.COMPLETED, version=2, result={"content": [{"type": "text", "text": "ok"}]}
    )
    stored = field_map(RECORD)
    changed, dropped = changes(RECORD, after)
    stored.update(changed)
    for name in dropped:
        del stored[name]
    assert record_from_fields(stored) == after


def test_the_runs_carried_over_a_deferral_are_kept_and_dropped_once_counted_afresh() -> None:
    deferred = msgspec.structs.replace(RECORD, attempts=2, carried_attempts=2, retry_at_ms=5_000)
    assert record_from_fields(field_map(deferred)) == deferred
    retried = msgspec.structs.replace(deferred, attempts=0, carried_attempts=0)
    assert changes(deferred, retried) == ({"attempts": "0"}, ["carried_attempts"])
