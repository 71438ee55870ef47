"""The notifications of one request on their way to its SSE stream: a bounded buffer that never makes the
tool wait.

A tool reports progress and logs while it runs; the stream sends them as fast as the client reads. The
two are decoupled by this buffer, and something has to give when the client reads slower than the tool
reports (or not at all, holding the connection open). Pacing the tool by its reader would let any
client stall a tool forever by not reading, pinning its work and everything it holds, so the buffer
keeps at most :data:`CAPACITY` notifications and, when full, drops one:

* the oldest **progress** notification first: a newer one supersedes it (progress is a running figure,
  and the client keeps the latest whichever it saw);
* only when it holds no progress at all, the oldest message (a log line): the newest lines say most
  about where the request is when the client catches up.

The final response never goes through here (the stream takes it from the finished work), so it is
always delivered, after whatever notifications are still buffered. Every drop is counted in
``ext_tasks_notifications_dropped_total{kind}``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Final

from .metrics import notification_dropped

Message = dict[str, Any]

#: Notifications buffered per request. Enough for a reading client never to lose one to a burst of a
#: few hundred; small enough that a client that never reads holds a few hundred KiB at most.
CAPACITY: Final = 256
_PROGRESS: Final = "notifications/progress"


class Outbox:
    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("an outbox holds at least one message")
        self._capacity = capacity
        self._messages: deque[Message] = deque()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._messages)

    def put(self, message: Message) -> None:
        """Buffer ``message`` (never waits); when full, drop one first as the module says."""
        if len(self._messages) >= self._capacity:
            self._drop_one()
        self._messages.append(message)
        self._ready.set()

    async def get(self) -> Message:
        """The oldest buffered message, waiting for one if there is none."""
        while not self._messages:
            self._ready.clear()
            await self._ready.wait()
        return self._messages.popleft()

    def take_all(self) -> list[Message]:
        """Every buffered message, oldest first (the work is done: what is left goes before the response)."""
        left = list(self._messages)
        self._messages.clear()
        return left

    def _drop_one(self) -> None:
        for index, message in enumerate(self._messages):
            if message.get("method") == _PROGRESS:
                del self._messages[index]
                notification_dropped("progress")
                return
        dropped = self._messages.popleft()
        notification_dropped("log" if dropped.get("method") == "notifications/message" else "other")
