"""A task record as the fields of a Valkey hash, and the difference between two versions of one.

Scalars are stored as text, structured fields as JSON (never pickle). Absent optional fields are left
out. A commit writes only the fields that changed (:func:`changes`), so a status message rewrites a
few bytes, not the arguments and the answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...protocol.states import TaskStatus
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
    if record.ttl_ms is not None:
        fields["ttl_ms"] = str(record.ttl_ms)
    if record.status_message is not None:
        fields["status_message"] = record.status_message
    if record.poll_max_ms is not None:
        fields["poll_max_ms"] = str(record.poll_max_ms)
    if record.sensitive:
        fields["sensitive"] = "1"
    if record.delivered_at_ms is not None:
        fields["delivered_at_ms"] = str(record.delivered_at_ms)
    if record.grant is not None:  # JSON text already, kept as it is (only a starting run decodes it)
        fields["grant"] = record.grant
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
    with ``dataclasses.replace``, so untouched fields keep their objects): a commit does not re-encode
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
    decoded: dict[str, Any] = {name: decode_json(fields[name]) for name in _JSON_FIELDS if name in fields}
    return TaskRecord(
        task_id=fields["task_id"],
        owner=fields["owner"],
        tool=fields["tool"],
        status=TaskStatus(fields["status"]),
        version=int(fields["version"]),
        created_at_ms=int(fields["created_at_ms"]),
        updated_at_ms=int(fields["updated_at_ms"]),
        ttl_ms=int(fields["ttl_ms"]) if "ttl_ms" in fields else None,
        poll_interval_ms=int(fields["poll_interval_ms"]),
        attempts=int(fields.get("attempts", "0")),
        status_message=fields.get("status_message"),
        poll_max_ms=int(fields["poll_max_ms"]) if "poll_max_ms" in fields else None,
        sensitive=fields.get("sensitive") == "1",
        delivered_at_ms=int(fields["delivered_at_ms"]) if "delivered_at_ms" in fields else None,
        arguments=decoded.get("arguments") or {},
        client_capabilities=decoded.get("client_capabilities") or {},
        input_requests=decoded.get("input_requests") or {},
        answers=decoded.get("answers") or {},
        asked_as=decoded.get("asked_as") or {},
        state=decoded.get("state"),
        result=decoded.get("result"),
        error=decoded.get("error"),
        grant=fields.get("grant"),
    )
