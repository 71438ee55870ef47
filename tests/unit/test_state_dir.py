"""The CLI's state directory: where it is, that only its owner can read it, and that its files are
replaced whole and never followed through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ext_tasks.client.state_dir import StateDirError, read_private, state_dir, write_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_variable_wins_over_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "mine"
    assert _mode(tmp_path / "mine") == 0o700


def test_xdg_state_home_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXT_TASKS_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "ext-tasks"
    # A relative XDG_STATE_HOME is ignored, as the XDG rules say.
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "ext-tasks"


def test_a_directory_open_to_others_is_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(shared))
    assert state_dir() == shared
    assert _mode(shared) == 0o700


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    target = tmp_path / "link"
    target.symlink_to(tmp_path / "file")
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(target))
    with pytest.raises((StateDirError, FileExistsError)):
        state_dir()


def test_files_are_private_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    write_private(path, b"first")
    write_private(path, b"second")
    assert path.read_bytes() == b"second"
    assert _mode(path) == 0o600
    assert [entry.name for entry in tmp_path.iterdir()] == ["tokens.json"]  # no temporary left behind


def test_reads_are_bounded_and_never_follow_a_link(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    assert read_private(path, 10) is None
    write_private(path, b"0123456789")
    assert read_private(path, 10) == b"0123456789"
    assert read_private(path, 9) is None  # grown past its bound: not trusted
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not ours")
    link = tmp_path / "link.json"
    link.symlink_to(elsewhere)
    with pytest.raises(OSError):
        read_private(link, 100)
    assert os.path.islink(link)
