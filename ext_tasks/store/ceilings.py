"""Bounds of in-memory maps whose entries lapse: shared by the memory task store and session store."""

from __future__ import annotations

from typing import Any, Final, TypeVar

#: The most entries any one map of an in-memory store holds.
CEILING: Final = 100_000

V = TypeVar("V")


def lapse_time(value: Any) -> float:
    """When an entry lapses: the value itself, or the last item of a tuple value."""
    return float(value[-1] if isinstance(value, tuple) else value)


def within_ceiling(entries: dict[str, V], ceiling: int = CEILING) -> dict[str, V]:
    """``entries`` with at most ``ceiling`` of them: those that lapse last are kept."""
    if len(entries) <= ceiling:
        return entries
    return dict(sorted(entries.items(), key=lambda item: lapse_time(item[1]))[-ceiling:])
