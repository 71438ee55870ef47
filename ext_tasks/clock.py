"""The one clock of task records, queues, sessions and caps: wall-clock milliseconds since the epoch.

Wall time, not monotonic: these instants are stored (``createdAt``, ``lastUpdatedAt``, expiry scores) and
compared by other processes and other machines sharing the store. Parts that compare them take a
``clock_ms`` argument defaulting to this function, so tests can move time without sleeping.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
