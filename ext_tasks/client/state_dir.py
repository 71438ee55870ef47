"""Where the CLI keeps what outlives one command: the tasks it started and, without a keyring, OAuth
tokens.

``$EXT_TASKS_STATE_DIR`` when set, else ``$XDG_STATE_HOME/ext-tasks``, else ``~/.local/state/ext-tasks``
(the XDG base directory rules: state is what a program keeps between runs and a user would not put
in a backup). The directory is created readable by its owner only, and one found open to others is
closed again: tokens and task ids are nobody else's business on a shared machine.

Files in it are written whole and atomically (:func:`write_private`): a reader sees the old content
or the new, never half of one, and a crash mid-write leaves the old file in place.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

ENV_STATE_DIR: Final = "EXT_TASKS_STATE_DIR"
_PRIVATE_DIR: Final = 0o700
_PRIVATE_FILE: Final = 0o600


class StateDirError(OSError):
    """The state directory cannot be used safely (not a directory, or owned by someone else)."""


def state_dir() -> Path:
    """The state directory, created if missing and made private to its owner."""
    configured = os.environ.get(ENV_STATE_DIR)
    if configured:
        path = Path(configured).expanduser()
    else:
        base = os.environ.get("XDG_STATE_HOME")
        # The XDG rules ignore a relative XDG_STATE_HOME.
        root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "state"
        path = root / "ext-tasks"
    path.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(f"{path} is not a directory")
    if info.st_uid != os.getuid():
        raise StateDirError(f"{path} belongs to another user")
    if stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(_PRIVATE_DIR)
    return path


def read_private(path: Path, limit: int) -> bytes | None:
    """A file's bytes, at most ``limit`` of them (None when missing or larger: a file grown past its
    bound is not trusted). A symbolic link is refused: it could point anywhere."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        data = file.read(limit + 1)
    return None if len(data) > limit else data


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, readable by its owner only."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), _PRIVATE_FILE)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
