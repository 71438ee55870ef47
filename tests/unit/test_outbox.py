"""The notification buffer of an inline request (``ext_tasks.outbox``): bounded, never waits on a put, and
when full drops the oldest progress first (a newer one supersedes it), a log line only when it holds no
progress; every drop counted by kind."""

from __future__ import annotations

import pytest

from ext_tasks.metrics import REGISTRY
from ext_tasks.outbox import Outbox

pytestmark = pytest.mark.anyio


def _progress(n: int) -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": n}}


def _log(n: int) -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": n}}


def _dropped(kind: str) -> float:
    return REGISTRY.get_sample_value("ext_tasks_notifications_dropped_total", {"kind": kind}) or 0.0


async def test_a_full_outbox_drops_the_oldest_progress_first() -> None:
    outbox = Outbox(4)
    progress_before, logs_before = _dropped("progress"), _dropped("log")
    for message in (_log(1), _progress(1), _log(2), _progress(2), _progress(3), _progress(4)):
        outbox.put(message)
    assert len(outbox) == 4
    assert outbox.take_all() == [_log(1), _log(2), _progress(3), _progress(4)]
    assert (_dropped("progress") - progress_before, _dropped("log") - logs_before) == (2, 0)


async def test_logs_go_oldest_first_when_there_is_no_progress_to_drop() -> None:
    outbox = Outbox(2)
    logs_before = _dropped("log")
    for n in range(5):
        outbox.put(_log(n))
    assert [await outbox.get(), await outbox.get()] == [_log(3), _log(4)]
    assert _dropped("log") - logs_before == 3
