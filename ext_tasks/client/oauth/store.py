"""Where tokens and client registrations are kept between requests and between runs.

A :class:`TokenStore` maps a key to a JSON object. The OAuth helper uses two kinds of keys: the server
URL alone, holding only the issuer last used for it (no secret), and ``"<server URL> <issuer>"``,
holding the tokens and the client registration obtained from that issuer. Two servers, or one server
that moved to another authorization server, never share an entry.

* :class:`MemoryStore`: one process, nothing written (the library's default).
* :class:`FileStore`: one file per key under ``state_dir()/oauth/``, named by the key's SHA-256,
  readable by its owner only, written atomically.
* :class:`KeyringStore`: the system keyring (service ``ext-tasks``, the key as user name), when the
  optional ``keyring`` package is installed and has a real backend.

:func:`default_store` picks the keyring when usable, else the file store; ``EXT_TASKS_TOKEN_STORE``
(``keyring`` or ``file``) forces one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from ..state_dir import read_private, state_dir, write_private

ENV_TOKEN_STORE: Final = "EXT_TASKS_TOKEN_STORE"  # noqa: S105 (a variable's name, not a secret)
KEYRING_SERVICE: Final = "ext-tasks"
#: An entry is a few tokens and a registration; a file larger than this is not one of ours.
MAX_ENTRY_BYTES: Final = 64 * 1024


@runtime_checkable
class TokenStore(Protocol):
    async def load(self, key: str) -> dict[str, Any] | None: ...

    async def save(self, key: str, value: dict[str, Any]) -> None: ...

    async def delete(self, key: str) -> None: ...


class MemoryStore:
    """Entries in this process only."""

    def __init__(self) -> None:
        self._entries: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._entries)} entries)"

    async def load(self, key: str) -> dict[str, Any] | None:
        text = self._entries.get(key)
        return None if text is None else _decode(text.encode())

    async def save(self, key: str, value: dict[str, Any]) -> None:
        # Kept as JSON text: a caller mutating what it saved or loaded cannot change the stored entry.
        self._entries[key] = json.dumps(value)

    async def delete(self, key: str) -> None:
        self._entries.pop(key, None)


class FileStore:
    """One private JSON file per key (its name the key's SHA-256, so no URL reaches the file system)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory

    def __repr__(self) -> str:
        return f"FileStore({str(self._directory) if self._directory else 'state_dir()/oauth'})"

    def path(self, key: str) -> Path:
        directory = self._directory or state_dir() / "oauth"
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return directory / (hashlib.sha256(key.encode()).hexdigest() + ".json")

    async def load(self, key: str) -> dict[str, Any] | None:
        # An unusable state directory (a file in its place, another owner's) holds no tokens of ours: a
        # server without OAuth stays reachable, and a login needing to save says why it cannot.
        try:
            data = await asyncio.to_thread(lambda: read_private(self.path(key), MAX_ENTRY_BYTES))
        except OSError:
            return None
        return None if data is None else _decode(data)

    async def save(self, key: str, value: dict[str, Any]) -> None:
        data = json.dumps(value).encode()
        if len(data) > MAX_ENTRY_BYTES:
            raise ValueError(f"a token store entry is larger than {MAX_ENTRY_BYTES} bytes")
        await asyncio.to_thread(write_private, self.path(key), data)

    async def delete(self, key: str) -> None:
        def remove() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.path(key).unlink()

        await asyncio.to_thread(remove)


class KeyringStore:
    """The system keyring, through the ``keyring`` package (the blocking calls run in a thread)."""

    def __init__(self, service: str = KEYRING_SERVICE) -> None:
        if not keyring_usable():
            raise RuntimeError("no usable keyring: install ext-tasks[keyring] and a keyring backend")
        self._service = service

    def __repr__(self) -> str:
        return f"KeyringStore({self._service!r})"

    async def load(self, key: str) -> dict[str, Any] | None:
        import keyring

        text = await asyncio.to_thread(keyring.get_password, self._service, key)
        return None if text is None or len(text) > MAX_ENTRY_BYTES else _decode(text.encode())

    async def save(self, key: str, value: dict[str, Any]) -> None:
        import keyring

        await asyncio.to_thread(keyring.set_password, self._service, key, json.dumps(value))

    async def delete(self, key: str) -> None:
        import keyring
        from keyring.errors import PasswordDeleteError

        with contextlib.suppress(PasswordDeleteError):
            await asyncio.to_thread(keyring.delete_password, self._service, key)


def keyring_usable() -> bool:
    """``keyring`` is importable and its backend stores something (not the fail or null backend)."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError:
        return False
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or type(backend).__module__.endswith(".null"):
        return False
    priority = getattr(backend, "priority", 0)
    return isinstance(priority, int | float) and priority > 0


def default_store() -> TokenStore:
    """The keyring when usable, else :class:`FileStore`; ``EXT_TASKS_TOKEN_STORE`` forces a choice."""
    forced = os.environ.get(ENV_TOKEN_STORE, "").strip().lower()
    if forced == "file":
        return FileStore()
    if forced == "keyring":
        return KeyringStore()
    if forced:
        raise ValueError(f"{ENV_TOKEN_STORE} must be 'file' or 'keyring', not {forced!r}")
    return KeyringStore() if keyring_usable() else FileStore()


def _decode(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
