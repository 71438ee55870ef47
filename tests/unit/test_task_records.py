"""The CLI's local task record (``ext_tasks.client.records``): what an entry holds, its bounds and
pruning, a file that cannot be trusted (corrupt, wrong-shaped, too large, a symbolic link), its
permissions, and writers of several processes under its lock."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ext_tasks.client.records import LOCK_FILE, MAX_BYTES, MAX_ENTRIES, RECORD_FILE, Entry, Records, iso, new_entry
from ext_tasks.client.state_dir import state_dir

REPO = Path(__file__).resolve().parents[2]
SERVER = "http://127.0.0.1:3001/mcp"
TIMEOUT_S = 30


class Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


@pytest.fixture
def warnings() -> Warnings:
    return Warnings()


@pytest.fixture
def records(tmp_path: Path, warnings: Warnings) -> Records:
    return Records(tmp_path, warn=warnings)


def _state(**fields: Any) -> dict[str, Any]:
    return {"taskId": "t-1", "status": "working", "createdAt": iso(datetime.now(UTC)), "ttlMs": 3_600_000, **fields}


def _raw(task_id: str, *, created: datetime, updated: datetime | None = None, expires: datetime | None = None,
         status: str = "working", server: str = SERVER) -> dict[str, Any]:  # fmt: skip
    return {"server": server, "tool": "slow_compute", "taskId": task_id, "createdAt": iso(created),
            "expiresAt": None if expires is None else iso(expires), "lastStatus": status, "statusMessage": None,
            "updatedAt": iso(updated or created)}  # fmt: skip


def _write(directory: Path, tasks: list[Any], version: object = 1) -> None:
    (directory / RECORD_FILE).write_text(json.dumps({"version": version, "tasks": tasks}))


def _add(records: Records, task_id: str, **fields: Any) -> bool:
    entry = new_entry(SERVER, "slow_compute", task_id, _state(taskId=task_id, **fields), datetime.now(UTC))
    assert entry is not None
    return records.add(entry)


def test_an_entry_round_trips_without_arguments_or_tokens(records: Records, tmp_path: Path,
                                                          warnings: Warnings) -> None:  # fmt: skip
    created = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    assert _add(records, "t-1", createdAt=iso(created), statusMessage="x" * 300)

    [entry] = records.entries()
    assert (entry.server, entry.tool, entry.task_id, entry.last_status) == (SERVER, "slow_compute", "t-1", "working")
    assert entry.created_at == created  # the server's time
    assert entry.expires_at == created + timedelta(hours=1)
    assert entry.status_message == "x" * 200  # cut
    document = json.loads((tmp_path / RECORD_FILE).read_text())
    assert document["version"] == 1
    assert set(document["tasks"][0]) == {"server", "tool", "taskId", "createdAt", "expiresAt", "lastStatus",
                                         "statusMessage", "updatedAt"}  # fmt: skip
    assert warnings == []


def test_a_learned_state_updates_the_entry_and_follows_a_shortened_ttl(records: Records) -> None:
    _add(records, "t-1")
    [before] = records.entries()

    assert records.learned(SERVER, "t-1", {"status": "completed", "statusMessage": "done", "ttlMs": 60_000})

    [after] = records.entries()
    assert (after.last_status, after.status_message) == ("completed", "done")
    assert after.expires_at == before.created_at + timedelta(minutes=1)
    assert after.updated_at >= before.updated_at
    # A task the record does not have (started elsewhere) is not added: its tool is unknown.
    assert not records.learned(SERVER, "t-other", {"status": "completed"})
    assert [entry.task_id for entry in records.entries()] == ["t-1"]


def test_entries_are_keyed_by_server_and_task_id_and_found_newest_first(records: Records) -> None:
    now = datetime.now(UTC)
    other = "http://10.0.0.7:3001/mcp"
    for server, created in ((SERVER, now - timedelta(minutes=2)), (other, now - timedelta(minutes=1))):
        entry = new_entry(server, "slow_compute", "same-id", _state(createdAt=iso(created)), now)
        assert entry is not None and records.add(entry)
    assert _add(records, "same-id")  # the same server and id again: replaced, not added

    assert len(records.entries()) == 2
    found = records.find("same-id")
    assert found is not None and found.server == SERVER  # started last
    assert records.find("nope") is None


def test_at_most_500_entries_the_oldest_dropped_first(records: Records, tmp_path: Path) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    _write(tmp_path, [_raw(f"t-{n}", created=start + timedelta(seconds=n)) for n in range(MAX_ENTRIES)])

    assert _add(records, "newest")

    ids = [entry.task_id for entry in records.entries()]
    assert len(ids) == MAX_ENTRIES == 500
    assert ids[0] == "newest" and "t-0" not in ids and "t-1" in ids


def test_a_file_over_1_mib_is_ignored_and_replaced(records: Records, tmp_path: Path, warnings: Warnings) -> None:
    document = json.dumps({"version": 1, "tasks": [_raw("big", created=datetime.now(UTC))]})
    (tmp_path / RECORD_FILE).write_text(document + " " * (MAX_BYTES + 1 - len(document)))

    assert records.entries() == []
    assert any("larger than" in warning for warning in warnings)
    assert _add(records, "t-1")
    assert (tmp_path / RECORD_FILE).stat().st_size < 10_000
    assert [entry.task_id for entry in records.entries()] == ["t-1"]


def test_expired_and_long_ended_entries_are_pruned(records: Records, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    week_ago = now - timedelta(days=8)
    _write(tmp_path, [
        _raw("expired", created=now - timedelta(hours=2), expires=now - timedelta(seconds=1)),
        _raw("ended-long-ago", created=week_ago, status="completed", expires=now + timedelta(days=30)),
        _raw("no-expiry-idle", created=week_ago),
        _raw("still-running", created=week_ago, expires=now + timedelta(days=30)),
        _raw("ended-recently", created=now - timedelta(days=1), status="failed", expires=now + timedelta(hours=1)),
        _raw("no-expiry-fresh", created=now - timedelta(days=1)),
        _raw("from-the-future", created=now + timedelta(days=400), status="completed"),
    ])  # fmt: skip

    assert {entry.task_id for entry in records.entries()} == {"still-running", "ended-recently", "no-expiry-fresh"}
    _add(records, "t-1")  # a write keeps only those
    kept = {task["taskId"] for task in json.loads((tmp_path / RECORD_FILE).read_text())["tasks"]}
    assert kept == {"still-running", "ended-recently", "no-expiry-fresh", "t-1"}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a version 1"),
        ('{"version": 2, "tasks": []}', "not a version 1"),
        ('{"version": 1, "tasks": {}}', "not a version 1"),
        ('"tasks"', "not a version 1"),
        ("[" * 200_000 + "]" * 200_000, "not JSON"),
        (b"\xff\xfe{}", "not JSON"),
    ],
    ids=["corrupt", "a-list", "other-version", "tasks-not-a-list", "a-string", "too-deep", "not-utf-8"],
)
def test_a_corrupt_or_wrong_shaped_file_is_ignored_with_a_warning(
    records: Records, tmp_path: Path, warnings: Warnings, content: str | bytes, says: str
) -> None:
    (tmp_path / RECORD_FILE).write_bytes(content if isinstance(content, bytes) else content.encode())

    assert records.entries() == []
    assert any(says in warning for warning in warnings), warnings
    assert _add(records, "t-1")  # replaced on the next write
    assert [entry.task_id for entry in Records(tmp_path).entries()] == ["t-1"]


def test_bad_entries_are_dropped_and_good_ones_kept(records: Records, tmp_path: Path, warnings: Warnings) -> None:
    now = datetime.now(UTC)
    good = _raw("good", created=now)
    bad: list[Any] = [
        "not an object",
        {**good, "taskId": 7},
        {**good, "taskId": ""},
        {**good, "taskId": "x" * 257},
        {**good, "server": "file:///etc/passwd"},
        {**good, "server": "https://user:secret@example.com/mcp"},
        {**good, "tool": None},
        {**good, "lastStatus": "w" * 33},
        {**good, "statusMessage": "m" * 201},
        {**good, "createdAt": "yesterday"},
        {**good, "createdAt": "2026-12-05T09:00:00"},  # no offset
        {**good, "createdAt": "0001-01-01T00:00:00+01:00"},  # before year 1 in UTC
        {**good, "expiresAt": 12},
        {key: value for key, value in good.items() if key != "updatedAt"},
    ]
    _write(tmp_path, [*bad, good])

    assert [entry.task_id for entry in records.entries()] == ["good"]
    assert any(f"{len(bad)} malformed entries dropped" in warning for warning in warnings), warnings


def test_what_is_not_recorded(records: Records) -> None:
    now = datetime.now(UTC)
    assert new_entry("https://user:secret@example.com/mcp", "tool", "t", _state(), now) is None
    assert new_entry(SERVER, "tool", "t" * 300, _state(), now) is None
    # A server's clock a year off is not believed: the entry is dated locally.
    entry = new_entry(SERVER, "tool", "t", _state(createdAt="2099-01-01T00:00:00Z"), now)
    assert entry is not None and entry.created_at == now


def test_a_symbolic_link_in_place_of_the_file_is_refused(records: Records, tmp_path: Path, warnings: Warnings) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"version": 1, "tasks": [_raw("planted", created=datetime.now(UTC))]}))
    (tmp_path / RECORD_FILE).symlink_to(target)
    before = target.read_text()

    assert records.entries() == []
    assert not _add(records, "t-1")

    assert target.read_text() == before  # neither read nor written through
    assert (tmp_path / RECORD_FILE).is_symlink()
    assert warnings and all("symbolic link" in warning for warning in warnings), warnings


def test_the_file_is_private_to_its_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "state"
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(directory))
    records = Records()

    assert _add(records, "t-1")

    assert state_dir() == directory
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / RECORD_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / LOCK_FILE).stat().st_mode) == 0o600


_WRITER = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime
    from pathlib import Path
    from ext_tasks.client.records import Records, new_entry

    records = Records(Path(sys.argv[1]), warn=lambda message: print(message, file=sys.stderr), lock_wait_s=20)
    for n in range(50):
        state = {"status": "working", "ttlMs": 3600000}
        entry = new_entry("http://127.0.0.1:3001/mcp", "tool", f"{sys.argv[2]}-{n}", state, datetime.now(UTC))
        assert records.add(entry)
""")


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    command = [sys.executable, "-c", _WRITER, str(tmp_path)]
    writers = [subprocess.Popen([*command, name], cwd=REPO, stderr=subprocess.PIPE, text=True) for name in "ab"]
    for writer in writers:
        _, err = writer.communicate(timeout=TIMEOUT_S)
        assert writer.returncode == 0, err

    ids = {entry.task_id for entry in Records(tmp_path).entries()}
    assert ids == {f"{name}-{n}" for name in "ab" for n in range(50)}


def test_a_held_lock_skips_the_write_within_the_bounded_wait(tmp_path: Path, warnings: Warnings) -> None:
    records = Records(tmp_path, warn=warnings, lock_wait_s=0.3)
    assert _add(records, "t-1")
    before = (tmp_path / RECORD_FILE).read_bytes()
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer, stuck
        started = time.monotonic()
        written = _add(records, "t-2")
        waited = time.monotonic() - started
    finally:
        os.close(fd)

    assert not written
    assert 0.3 <= waited < 2.0
    assert (tmp_path / RECORD_FILE).read_bytes() == before
    assert any("busy" in warning for warning in warnings), warnings
    assert _add(records, "t-2")  # once released, writes go on


def test_an_unusable_state_directory_is_a_warning(tmp_path: Path, warnings: Warnings,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(tmp_path / "file"))
    records = Records(warn=warnings)

    assert records.entries() == []
    assert not _add(records, "t-1")
    assert len(warnings) == 2


def test_an_entry_read_back_equals_the_one_written() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    entry = Entry(SERVER, "tool", "t", now, None, "working", None, now)
    assert Entry.from_json(json.loads(json.dumps(entry.to_json()))) == entry
