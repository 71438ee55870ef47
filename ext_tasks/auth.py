"""Who is calling: every request resolves to a :class:`Principal` before the engine sees it.

The default is one anonymous principal. A bearer-token map (``EXT_TASKS_TOKENS="tokenA=alice,tokenB=bob"``
or a file of ``token=principal`` lines) gives each caller its own principal; anything else can plug in
through the :class:`Authenticator` protocol. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from .protocol.errors import INVALID_REQUEST, ProtocolError


@dataclass(frozen=True, slots=True)
class Principal:
    id: str
    anonymous: bool = False


ANONYMOUS = Principal(id="anonymous", anonymous=True)


class Caller(msgspec.Struct, frozen=True):
    """Who sent a request: its principal here, and its credentials, which a proxy forwards upstream."""

    principal: Principal
    authorization: str | None = None


class Unauthenticated(ProtocolError):
    """No or unknown credentials where credentials are required (HTTP 401)."""

    code = INVALID_REQUEST
    http_status = 401

    def http_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Authenticator(Protocol):
    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal:
        """The principal for a request, or raise :class:`Unauthenticated`."""
        ...


class AnonymousAuthenticator:
    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal:
        return ANONYMOUS


class BearerTokenAuthenticator:
    """Maps ``Authorization: Bearer <token>`` to a configured principal."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ValueError("a bearer-token authenticator needs at least one token")
        self._tokens = [(token.encode(), principal) for token, principal in tokens.items()]

    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal:
        values = headers.get("authorization") or ()
        if len(values) != 1 or not values[0].startswith("Bearer "):
            raise Unauthenticated("Unauthorized: a bearer token is required")
        presented = values[0][len("Bearer ") :].strip().encode()
        found: str | None = None
        for token, principal in self._tokens:
            # Compare against every token so the time taken does not reveal which one matched.
            if hmac.compare_digest(token, presented):
                found = principal
        if found is None:
            raise Unauthenticated("Unauthorized: unknown bearer token")
        return Principal(id=found)


def parse_token_map(text: str) -> dict[str, str]:
    """``token=principal`` pairs separated by commas or newlines; ``#`` starts a comment line."""
    tokens: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        token, sep, principal = item.partition("=")
        if not sep or not token.strip() or not principal.strip():
            raise ValueError("token map entries must look like token=principal")
        tokens[token.strip()] = principal.strip()
    return tokens
