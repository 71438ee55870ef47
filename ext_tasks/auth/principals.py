"""Who is calling: every request resolves to a :class:`Principal` before the engine sees it.

The default is one anonymous principal. A bearer-token map (``EXT_TASKS_TOKENS="tokenA=alice,tokenB=bob"``
or a file of ``token=principal`` lines) gives each caller its own principal; OAuth access tokens
(:mod:`.oauth`) give one per issuer and subject; anything else can plug in through the
:class:`Authenticator` protocol. Tokens are compared in constant time and never logged.

Scopes: an OAuth principal carries the scopes of its token (``scopes``, maybe empty). Anonymous and
static-token principals carry ``scopes=None``, *unrestricted*: they pass every scope check
(:meth:`Principal.lacks` finds nothing missing), as they did before OAuth existed.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import msgspec

from .challenge import Unauthenticated


def _no_claims() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller. ``id`` is what tasks, budgets and ``requestState`` are bound to.

    For an OAuth principal ``id`` is ``f"{issuer}#{subject}"``: an issuer identifier has no fragment
    (RFC 8414 §2), so the first ``#`` always splits it back, and the same subject of two issuers is two
    principals. ``subject`` is the token's ``sub``, or its client id where it has none (RFC 9068 §2.2's
    convention for client-credentials tokens). ``claims`` are the token's (read-only; not compared,
    hashed or shown in ``repr``).
    """

    id: str
    anonymous: bool = False
    issuer: str | None = None
    subject: str | None = None
    #: The OAuth client the token was issued to (``client_id``, else ``azp``), for logs.
    client_id: str | None = None
    #: The token's scopes; ``None``: unrestricted (anonymous and static-token principals).
    scopes: frozenset[str] | None = None
    claims: Mapping[str, Any] = field(default_factory=_no_claims, compare=False, hash=False, repr=False)

    def lacks(self, required: Iterable[str]) -> list[str]:
        """The scopes of ``required`` this principal does not have, in order (none when unrestricted)."""
        if self.scopes is None:
            return []
        return [scope for scope in dict.fromkeys(required) if scope not in self.scopes]

    @classmethod
    def from_claims(cls, issuer: str, claims: Mapping[str, Any]) -> Principal:
        """The principal of a verified token's claims (a JWT's, or an introspection answer's), issued by
        ``issuer``; ``ValueError`` when it names neither a subject nor a client."""
        client_id = _text(claims.get("client_id")) or _text(claims.get("azp"))
        subject = _text(claims.get("sub")) or client_id
        if subject is None:
            raise ValueError("the token names no subject (sub) and no client (client_id, azp)")
        return cls(
            id=f"{issuer}#{subject}",
            issuer=issuer,
            subject=subject,
            client_id=client_id,
            scopes=token_scopes(claims),
            claims=MappingProxyType(dict(claims)),
        )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def token_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes a token grants: ``scope`` (RFC 9068, RFC 7662: space-separated), else ``scp`` (Entra ID
    and Okta: space-separated, or a list). Anything else grants nothing."""
    value = claims.get("scope")
    if value is None:
        value = claims.get("scp")
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item and " " not in item)
    return frozenset()


ANONYMOUS = Principal(id="anonymous", anonymous=True)


class Caller(msgspec.Struct, frozen=True):
    """Who sent a request: its principal here, and its credentials, which a proxy forwards upstream."""

    principal: Principal
    authorization: str | None = None


class Authenticator(Protocol):
    """The plug-in point: the principal of a request's headers.

    Return the :class:`Principal` itself when it is known at once (static tokens, a cached OAuth token:
    no coroutine is made), or an awaitable of it when it needs I/O (fetching keys, introspection); the
    HTTP edge awaits only then. Refuse with :class:`Unauthenticated` (401), :class:`InsufficientScope`
    (403) or :class:`AuthUnavailable` (503), raised or from the awaitable.
    """

    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal | Awaitable[Principal]: ...


class AnonymousAuthenticator:
    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal:
        return ANONYMOUS


def bearer_token(headers: Mapping[str, Sequence[str]]) -> str | None:
    """The token of one ``Authorization: Bearer <token>`` header (the scheme in any case, RFC 7235
    §2.1); ``None`` when there is none, several, or another scheme."""
    values = headers.get("authorization")
    if not values or len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class StaticTokens:
    """The configured ``token -> principal`` map, matched in constant time."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ValueError("a bearer-token authenticator needs at least one token")
        self._tokens = [(token.encode(), Principal(id=principal)) for token, principal in tokens.items()]

    def match(self, presented: str) -> Principal | None:
        wanted = presented.encode()
        found: Principal | None = None
        for token, principal in self._tokens:
            # Compare against every token so the time taken does not reveal which one matched.
            if hmac.compare_digest(token, wanted):
                found = principal
        return found


class BearerTokenAuthenticator:
    """Maps ``Authorization: Bearer <token>`` to a configured principal."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = StaticTokens(tokens)

    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal:
        presented = bearer_token(headers)
        if presented is None:
            raise Unauthenticated("Unauthorized: a bearer token is required")
        found = self._tokens.match(presented)
        if found is None:
            # As before OAuth: a bare challenge (no metadata to point to, nothing to tell a guesser).
            raise Unauthenticated("Unauthorized: unknown bearer token")
        return found


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


def grant_of(principal: Principal) -> str | None:
    """What a task keeps of ``principal`` so its tool sees the same principal on any worker, as JSON
    text: nothing for a static-token or anonymous caller (the id says it all), the OAuth issuer, subject,
    client, scopes and, within :data:`MAX_GRANT_BYTES`, the claims otherwise. Text, not an object: only
    a worker starting the run reads it, so the many reads of a task (``tasks/get``) never decode it."""
    if principal.scopes is None and principal.issuer is None:
        return None
    grant: dict[str, Any] = {
        "issuer": principal.issuer,
        "subject": principal.subject,
        "client_id": principal.client_id,
        "scopes": None if principal.scopes is None else sorted(principal.scopes),
    }
    try:
        with_claims = msgspec.json.encode({**grant, "claims": dict(principal.claims)})
    except (TypeError, ValueError, msgspec.EncodeError):  # a plug-in's claims that are not JSON
        with_claims = b""
    if 0 < len(with_claims) <= MAX_GRANT_BYTES:
        return with_claims.decode()
    return msgspec.json.encode(grant).decode()


def principal_from_grant(owner: str, grant: str | None) -> Principal:
    """The principal a task was created by, from its owner and :func:`grant_of`."""
    if not grant:
        return Principal(id=owner, anonymous=owner == ANONYMOUS.id)
    kept: dict[str, Any] = msgspec.json.decode(grant)
    scopes = kept.get("scopes")
    return Principal(
        id=owner,
        issuer=kept.get("issuer"),
        subject=kept.get("subject"),
        client_id=kept.get("client_id"),
        scopes=None if scopes is None else frozenset(scopes),
        claims=MappingProxyType(dict(kept.get("claims") or {})),
    )
