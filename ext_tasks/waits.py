"""A bound on the long waits one principal may hold open in this process.

A wait is a request that lasts until something happens: ``subscriptions/listen``, a legacy session's GET
stream, a legacy ``tasks/result``. Each holds a coroutine, a queue and a share of the process's store
subscriptions for as long as the client keeps it open, so a client that opens them without end could
pin the process. Past the cap the request is refused with HTTP 429, ``Retry-After`` and -31429; a wait
ends (and frees its place) when its client goes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

from .metrics import OPEN_WAITS
from .protocol.errors import LimitExceeded

#: Open waits per principal and process unless configured (``EXT_TASKS_MAX_WAITS``; 0: no cap).
DEFAULT_MAX_WAITS: Final = 256


class WaitLimit:
    def __init__(self, cap: int = DEFAULT_MAX_WAITS) -> None:
        self.cap = cap
        self._open: dict[str, int] = {}

    def open(self, principal: str) -> int:
        return self._open.get(principal, 0)

    @contextlib.contextmanager
    def hold(self, principal: str) -> Iterator[None]:
        """One place for ``principal`` while the block runs; :class:`LimitExceeded` if none is free."""
        count = self._open.get(principal, 0)
        if 0 < self.cap <= count:
            raise LimitExceeded(
                f"Too many open waits for this caller (the limit is {self.cap}: subscriptions/listen, legacy "
                "GET streams and tasks/result); close one first",
                limit="max_waits",
                retry_after_s=1,
            )
        self._open[principal] = count + 1
        OPEN_WAITS.inc()
        try:
            yield
        finally:
            OPEN_WAITS.dec()
            left = self._open[principal] - 1
            if left:
                self._open[principal] = left
            else:
                del self._open[principal]
