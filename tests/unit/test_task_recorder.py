"""What the client commands write to the task record (``ext_tasks.client.recorder``): a started task at
once, states seen on the way at most every few seconds, the end always and last, a task started
elsewhere never added, and a record that cannot be written warned of once and then left alone."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from ext_tasks.client import recorder as recorder_module
from ext_tasks.client.console import Console
from ext_tasks.client.recorder import NotRecorded, Recorder, server_of
from ext_tasks.client.records import Records, iso, new_entry
from ext_tasks.client.tasks import TaskHandle

pytestmark = pytest.mark.anyio

SERVER = "http://127.0.0.1:3001/mcp"


def _console() -> tuple[Console, io.StringIO]:
    stream = io.StringIO()
    return Console(stream, interactive=False, ask=False), stream


def _handle(task_id: str | None, **state: Any) -> TaskHandle:
    return TaskHandle(cast(Any, None), task_id, {"taskId": task_id, "status": "working", "ttlMs": 60_000, **state})


def _status(records: Records) -> tuple[str, str | None]:
    [entry] = records.entries()
    return entry.last_status, entry.status_message


async def test_a_started_task_is_recorded_before_waiting(tmp_path: Path) -> None:
    console, _ = _console()
    records = Records(tmp_path)
    recorder = Recorder(console, SERVER, "slow_compute", records)

    await recorder.begin(_handle("t-1"))

    [entry] = records.entries()
    assert (entry.server, entry.tool, entry.task_id, entry.last_status) == (SERVER, "slow_compute", "t-1", "working")


async def test_states_on_the_way_are_throttled_and_the_end_always_written(tmp_path: Path) -> None:
    console, _ = _console()
    records = Records(tmp_path)
    recorder = Recorder(console, SERVER, "slow_compute", records)
    handle = _handle("t-1")
    await recorder.begin(handle)

    assert recorder.seen(handle.last) is None  # the state just recorded
    assert recorder.seen({"status": "working", "statusMessage": "1/3"}) is None  # too soon after the last write
    done = recorder.seen({"status": "completed", "statusMessage": "3/3"}, final=True)
    assert done is not None
    await recorder.close()
    assert _status(records) == ("completed", "3/3")


class _SlowMiddle(Records):
    """A record whose write of a state on the way is slow: it waits (bounded) for the end to be written,
    which, were the writes not kept in order, would let the end be overwritten by the state before it."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.end_written = threading.Event()
        self.middle_written = threading.Event()

    def learned(self, server: str, task_id: str, state: Mapping[str, Any]) -> bool:
        if state.get("status") == "working":
            self.end_written.wait(timeout=0.5)  # kept in order, the end is never written first: waits it out
        written = super().learned(server, task_id, state)
        (self.end_written if state.get("status") == "failed" else self.middle_written).set()
        return written


async def test_the_end_is_never_overwritten_by_a_state_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_module, "UPDATE_EVERY_S", 0.0)
    console, _ = _console()
    records = _SlowMiddle(tmp_path)
    recorder = Recorder(console, SERVER, "slow_compute", records)
    await recorder.begin(_handle("t-1"))

    recorder.seen({"status": "working", "statusMessage": "on the way"})  # not awaited: the end queues behind it
    recorder.seen({"status": "failed", "statusMessage": "broke"}, final=True)
    await recorder.close()
    assert await asyncio.to_thread(records.middle_written.wait, 5.0)

    assert _status(records) == ("failed", "broke")


async def test_a_task_picked_up_by_id_is_updated_never_added(tmp_path: Path) -> None:
    console, _ = _console()
    records = Records(tmp_path)
    await Recorder(console, SERVER, "slow_compute", records).begin(_handle("mine"))

    for task_id in ("mine", "elsewhere"):
        recorder = Recorder(console, SERVER, None, records)
        recorder.picked_up(task_id)
        handle = _handle(task_id)
        await recorder.begin(handle)
        assert recorder.seen(handle.last, final=True) is None  # the handle's placeholder, not a state seen
        recorder.seen({"status": "completed"}, final=True)
        await recorder.close()

    assert [(entry.task_id, entry.last_status) for entry in records.entries()] == [("mine", "completed")]


async def test_an_answer_without_a_task_records_nothing(tmp_path: Path) -> None:
    console, _ = _console()
    records = Records(tmp_path)
    recorder = Recorder(console, SERVER, "greet", records)
    await recorder.begin(_handle(None, status="completed"))
    assert recorder.seen({"status": "completed"}, final=True) is None
    assert not (tmp_path / "tasks.json").exists()


async def test_a_record_that_cannot_be_written_is_warned_of_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(recorder_module, "UPDATE_EVERY_S", 0.0)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(tmp_path / "file"))
    console, stream = _console()
    recorder = Recorder(console, SERVER, "slow_compute")

    await recorder.begin(_handle("t-1"))
    recorder.seen({"status": "working", "statusMessage": "on"})
    recorder.seen({"status": "completed"}, final=True)
    await recorder.close()

    assert stream.getvalue().count("warning:") == 1, stream.getvalue()


def test_the_server_of_a_recorded_task_is_said(tmp_path: Path) -> None:
    console, stream = _console()
    records = Records(tmp_path)
    other = "http://10.0.0.7:3001/mcp"
    now = datetime.now(UTC)
    for server, minutes in ((other, 2), (SERVER, 1)):
        created = iso(now - timedelta(minutes=minutes))
        entry = new_entry(server, "tool", "t-1", {"status": "working", "createdAt": created}, now)
        assert entry is not None and records.add(entry)

    assert server_of("t-1", console, records) == SERVER  # the one started last
    assert "(from the task record)" in stream.getvalue()
    with pytest.raises(NotRecorded, match="pass --url"):
        server_of("t-2", console, records)
