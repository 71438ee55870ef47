"""Who is calling: every request resolves to a :class:`Principal` before the engine sees it.

The default is one anonymous principal. A bearer-token map (``EXT_TASKS_TOKENS="tokenA=alice,tokenB=bob"``
or a file of ``token=principal`` lines) gives each caller its own principal; anything else can plug in
through the :class:`Authenticator` protocol. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from .protocol.errors import INVALID_REQUEST, ProtocolError


@dataclass(frozen=True, slots=True)
class Principal:
    id: str
    anonymous: bool = False
    issuer: str | None = None
    subject: str | None = None
    client_id: str | None = None
    scopes: frozenset[str] | None = None
    claims: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def lacks(self, required: Iterable[str]) -> list[str]:
        return [] if self.scopes is None else [scope for scope in required if scope not in self.scopes]


class InsufficientScope(ProtocolError):
    code = INVALID_REQUEST
    http_status = 403

    def __init__(self, scopes: Sequence[str]) -> None:
        super().__init__("Forbidden: insufficient scope")
        self.scopes = list(scopes)

    def http_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{" ".join(self.scopes)}"'}


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


#: The most a task keeps of its owner's credentials (``TaskRecord.grant``); past it the claims are left out.
MAX_GRANT_BYTES = 4096


def grant_of(principal: Principal) -> dict[str, Any] | None:
    """What a task keeps of ``principal`` so its tool sees the same principal on any worker: nothing for
    a static-token or anonymous caller (the id says it all), the OAuth issuer, subject, client, scopes
    and, within :data:`MAX_GRANT_BYTES`, the claims otherwise."""
    if principal.scopes is None and principal.issuer is None:
        return None
    grant: dict[str, Any] = {
        "issuer": principal.issuer,
        "subject": principal.subject,
        "client_id": principal.client_id,
        "scopes": None if principal.scopes is None else sorted(principal.scopes),
    }
    with_claims = {**grant, "claims": dict(principal.claims)}
    try:
        fits = len(msgspec.json.encode(with_claims)) <= MAX_GRANT_BYTES
    except (TypeError, ValueError, msgspec.EncodeError):  # a plug-in's claims that are not JSON
        fits = False
    return with_claims if fits else grant


def principal_from_grant(owner: str, grant: Mapping[str, Any] | None) -> Principal:
    """The principal a task was created by, from its owner and :func:`grant_of`."""
    if not grant:
        return Principal(id=owner, anonymous=owner == ANONYMOUS.id)
    scopes = grant.get("scopes")
    return Principal(
        id=owner,
        issuer=grant.get("issuer"),
        subject=grant.get("subject"),
        client_id=grant.get("client_id"),
        scopes=None if scopes is None else frozenset(scopes),
        claims=grant.get("claims") or {},
    )
