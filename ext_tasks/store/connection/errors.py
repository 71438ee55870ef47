"""The one error every store answers when Valkey cannot serve a command now. Free of valkey-py, so the
engine and the workers can catch it without importing the client."""

from __future__ import annotations

from ...protocol.errors import Busy


class TaskStoreUnavailable(Busy):
    """The store cannot be reached: requests fail fast with -32603, HTTP 503 and ``Retry-After``
    instead of hanging."""

    def __init__(self, detail: str) -> None:
        super().__init__("Task store unavailable; retry later")
        self.detail = detail
