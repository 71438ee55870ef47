"""Tokens already judged, so a token seen before costs a hash and a dict lookup, not a signature check
or a call to the authorization server.

Rules:

* The key is the token's SHA-256; the token itself is never kept.
* An entry lasts until its deadline, set by whoever judged the token: a JWT's ``exp`` (no leeway) but
  never longer than ``EXT_TASKS_AUTH_KEYS_MAX_AGE_S`` (a key its issuer withdrew stops vouching for it by
  then), an introspection answer's ``exp`` but never longer than ``EXT_TASKS_AUTH_INTROSPECTION_CACHE_S``.
  An expired entry is never returned.
* Bounded: least recently used entries go first past ``size``.
* Refusals are kept too (introspection's ``active: false``), as a :class:`Refusal`, so a client
  retrying with a revoked token does not make this server ask again each time.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .principals import Principal


@dataclass(frozen=True, slots=True)
class Refusal:
    """A token judged invalid: the ``error_description`` to send, and why (for the log)."""

    description: str
    reason: str


Verdict = Principal | Refusal


def token_key(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenCache:
    def __init__(self, size: int, *, now: Callable[[], float] = time.time) -> None:
        self.size = size
        self._now = now
        self._entries: OrderedDict[bytes, tuple[Verdict, float]] = OrderedDict()
        #: Lookups answered from the cache, for tests and operators.
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Verdict | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        verdict, deadline = entry
        if deadline <= self._now():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return verdict

    def put(self, key: bytes, verdict: Verdict, deadline: float) -> None:
        if deadline <= self._now():
            return
        self._entries[key] = (verdict, deadline)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
