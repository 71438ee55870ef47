"""A task record as the fields of a Valkey hash, and the difference between two versions of one.

Scalars are stored as text, structured fields as JSON (never pickle). Absent optional fields are left
out. A commit writes only the fields that changed (:func:`changes`), so a status message rewrites a
few bytes, not the arguments and the answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ...protocol.tasks import TaskRecord
from ..connection.jsontext import decode_json, encode_json

_JSON_FIELDS: Final = (
    "arguments",
    "client_capabilities",
    "input_requests",
    "answers",
    "state",
    "result",
    "error",
    "asked_as",
)


def _scalar_fields(record: TaskRecord) -> dict[str, str]:
    fields: dict[str, str] = {
        "task_id": record.task_id,
        "owner": record.owner,
        "tool": record.tool,
        "status": record.status.value,
        "version": str(record.version),
        "created_at_ms": str(record.created_at_ms),
        "updated_at_ms": str(record.updated_at_ms),
        "poll_interval_ms": str(record.poll_interval_ms),
        "attempts": str(record.attempts),
    }
    if record.status_message is not None:
        fields["status_message"] = record.status_message
    if record.sensitive:
        fields["sensitive"] = "1"
    # Optional numbers, absent while unset (grant_ms and deadline_ms: also on records of earlier versions).
    for name in ("ttl_ms", "poll_max_ms", "delivered_at_ms", "grant_ms", "deadline_ms", "retry_at_ms"):
        value = getattr(record, name)
        if value is not None:
            fields[name] = str(value)
    for name in ("retries", "carried_attempts"):  # counters: absent while 0
        if count := getattr(record, name):
            fields[name] = str(count)
    if record.grant is not None:  # JSON text already, kept as it is (only a starting run decodes it)
        fields["grant"] = record.grant
    if record.trace_context is not None:  # a traceparent, checked before it was kept
        fields["trace_context"] = record.trace_context
    return fields


def field_map(record: TaskRecord) -> dict[str, str]:
    fields = _scalar_fields(record)
    for name in _JSON_FIELDS:
        value = getattr(record, name)
        if value is not None:
            fields[name] = encode_json(value)
    return fields


def flat(fields: Mapping[str, str]) -> list[str]:
    """``{"a": "1", "b": "2"}`` as ``["a", "1", "b", "2"]`` (the argument list of ``HSET``)."""
    return [item for pair in fields.items() for item in pair]


def changes(before: TaskRecord, after: TaskRecord) -> tuple[dict[str, str], list[str]]:
    """The fields ``after`` sets that differ from ``before``, and those it no longer has. A structured
    field is encoded only when ``after`` holds another object than ``before`` (transitions build records
    with ``msgspec.structs.replace``, so untouched fields keep their objects): a commit does not re-encode
    the arguments, answers or result it leaves alone. Identity, not equality: ``1 == True`` in Python,
    not in JSON."""
    old, new = _scalar_fields(before), _scalar_fields(after)
    changed = {name: value for name, value in new.items() if old.get(name) != value}
    dropped = [name for name in old if name not in new]
    for name in _JSON_FIELDS:
        was, now = getattr(before, name), getattr(after, name)
        if now is None:
            if was is not None:
                dropped.append(name)
        elif now is not was:
            changed[name] = encode_json(now)
    return changed, dropped


def record_from_fields(fields: Mapping[str, str]) -> TaskRecord:
    """The record a hash holds: the structured fields decoded from JSON, the scalars converted from text
    by the record's own types (``"5"`` to an int, ``"1"`` to ``True``, a status to its enum); a field the
    hash leaves out takes the record's default (``ttl_ms``: none)."""
    raw: dict[str, Any] = {"ttl_ms": None, **fields}
    for name in _JSON_FIELDS:
        if name in fields:
            raw[name] = decode_json(fields[name])
    return msgspec.convert(raw, TaskRecord, strict=False)
