"""JWT access tokens (RFC 9068, RFC 7519), verified here with PyJWT against their issuer's keys.

The order, each step refusing before the next runs:

1. The token is a JWS in compact form whose header and claims decode (else it is not a JWT here: it may
   still be an opaque token for introspection).
2. The header's ``alg`` is on the allow-list (``EXT_TASKS_AUTH_ALGORITHMS``, asymmetric only): ``none``
   and ``HS256`` are refused *before any key is touched*, so a public key can never serve as an HMAC
   secret.
3. The unverified ``iss`` selects the issuer, exactly one of those configured, and so its key set; a key
   must fit the algorithm (:mod:`.keys`).
4. The signature, ``iss`` (exactly), ``exp`` (required), ``nbf`` and ``iat`` (with the leeway), by PyJWT.
5. ``aud`` names this resource (RFC 8707; a string or a list): a token for another resource is the
   token-passthrough case MCP forbids. A sender-constrained token (``cnf``: DPoP, mTLS) is refused, as
   only bearer tokens are accepted here.

A refusal is :class:`TokenRefused` with a fixed phrase for the challenge's ``error_description`` and a
reason for the log; neither repeats the token.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import jwt
import msgspec

from .keys import IssuerKeys, NoKey
from .metadata import audience_matches
from .principals import Principal


class TokenRefused(Exception):
    """A token judged invalid; ``description`` goes to the client, ``reason`` to the log."""

    def __init__(self, description: str, reason: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.reason = reason or description


Parsed = tuple[dict[str, Any], dict[str, Any]]


def parse(token: str) -> Parsed | None:
    """The header and the (unverified) claims of a compact JWS, or None when the token is not one.

    Only to choose the way and the key: read here without PyJWT, whose strict decoding (done once, in
    :meth:`JwtVerifier.verify`) costs about 50 µs a pass."""
    segments = token.split(".")
    if len(segments) != 3:
        return None
    try:
        header, claims = (msgspec.json.decode(_unpadded(segment)) for segment in segments[:2])
    except (ValueError, msgspec.DecodeError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return header, claims


def _unpadded(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.InvalidIssuerError, "the token is from an unknown issuer"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim (exp, iss)"),
    (jwt.InvalidAlgorithmError, "the token's algorithm is not allowed"),
)


class JwtVerifier:
    """Verifies JWTs of the configured issuers (``keys``: one key set per issuer identifier)."""

    def __init__(
        self,
        keys: Mapping[str, IssuerKeys],
        *,
        resource: str,
        algorithms: tuple[str, ...],
        leeway_s: float,
        audiences: tuple[str, ...] = (),
    ) -> None:
        self.keys = dict(keys)
        self._resource = resource
        self._audiences = frozenset(audiences)
        self._algorithms = frozenset(algorithms)
        self._leeway_s = leeway_s
        #: Signature checks made (a cached token makes none), for tests and operators.
        self.verifications = 0

    def issuer_keys(self, parsed: Parsed) -> IssuerKeys | None:
        """The key set of the token's (unverified) issuer, if it is one of those configured."""
        issuer = parsed[1].get("iss")
        return self.keys.get(issuer) if isinstance(issuer, str) else None

    async def verify(self, token: str, parsed: Parsed, keys: IssuerKeys) -> tuple[Principal, float]:
        """The principal of a valid token and the time it expires; :class:`TokenRefused` otherwise
        (``AuthUnavailable`` from the key set when its keys could never be fetched)."""
        header, _ = parsed
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self._algorithms:
            raise TokenRefused("the token's algorithm is not allowed", f"alg {str(algorithm)[:20]!r} not allowed")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("the token is malformed", "kid is not a string")
        try:
            key = await keys.key(kid, algorithm)
        except NoKey as exc:
            raise TokenRefused("the token's signing key is unknown", str(exc)) from None
        self.verifications += 1
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[algorithm],
                issuer=keys.issuer,
                leeway=self._leeway_s,
                options={"require": ["exp", "iss"], "verify_aud": False},
            )
        except jwt.PyJWTError as exc:
            description = next((text for kind, text in _REFUSALS if isinstance(exc, kind)), "the token is malformed")
            raise TokenRefused(description, f"{type(exc).__name__}") from None
        return self._principal(keys.issuer, claims), float(claims["exp"])

    def _principal(self, issuer: str, claims: dict[str, Any]) -> Principal:
        if not audience_matches(claims.get("aud"), self._resource, self._audiences):
            raise TokenRefused("the token was issued for another resource", "aud does not name this resource")
        if "cnf" in claims:
            raise TokenRefused("only bearer tokens are accepted", "sender-constrained token (cnf)")
        try:
            return Principal.from_claims(issuer, claims)
        except ValueError as exc:
            raise TokenRefused("the token names no subject", str(exc)) from None
