"""The OAuth 2.1 resource server's authenticator (MCP 2026-07-28 authorization): bearer access tokens
from the configured issuers, static tokens beside them, one cache in front of both kinds of checks.

A request's way, cheapest first:

1. No ``Authorization: Bearer`` header (or a malformed one, or several): 401 with the challenge
   (``resource_metadata`` and the required ``scope``), no ``error`` (RFC 6750 §3.1).
2. A static token (``EXT_TASKS_TOKENS``), matched in constant time: its principal, unrestricted.
3. A token judged before (its SHA-256 in :class:`~.cache.TokenCache`): that verdict, returned without
   a coroutine. Most requests end here.
4. A JWT of a configured issuer: verified locally (:mod:`.verify`); if that issuer's keys can never be
   fetched and an introspection endpoint is configured, introspected instead (still 503 when the endpoint
   introspects no JWT).
5. Anything else: introspected (:mod:`.introspection`) when an endpoint is configured, else refused. An
   endpoint that does not take the token (400 ``unsupported_token_type``, as oidc-provider answers a JWT
   of another issuer) refuses it: 401, not 503.

Refused tokens: 401 ``error="invalid_token"``. Valid tokens without the server-wide scopes
(``EXT_TASKS_AUTH_SCOPES``): 403 ``error="insufficient_scope"`` naming them all. Authorization server
out of reach before any key was had: 503 with ``Retry-After``. Logged at debug level with the reason and
the token's unverified ``iss`` and client at most; a token or secret is never logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

import httpx

from ..metrics import AUTH_REFUSALS
from ..options import AuthOptions
from .cache import Refusal, TokenCache, Verdict, token_key
from .challenge import AuthUnavailable, Challenge, InsufficientScope, Unauthenticated, invalid_token
from .checks import check_auth_options
from .fetch import Fetcher
from .introspection import UNSUPPORTED, Introspector
from .keys import IssuerKeys
from .metadata import canonical_resource, metadata_url
from .principals import Principal, StaticTokens, bearer_token
from .verify import JwtVerifier, Parsed, TokenRefused, parse

logger = logging.getLogger("ext_tasks.auth")

#: The longest token looked at; longer ones are refused unread (JWTs are a few KiB at most).
MAX_TOKEN_CHARS: Final = 16 * 1024


def _shown(value: object) -> str:
    """An unverified claim for the log: quoted, cut short, never a control character."""
    return repr(value[:80]) if isinstance(value, str) else "-"


class OAuthAuthenticator:
    """The principal of a request bearing an OAuth access token or a static token.

    Build it with :meth:`from_options`; :meth:`aclose` at shutdown stops the fetches under way.
    """

    def __init__(
        self,
        challenge: Challenge,
        *,
        verifier: JwtVerifier | None,
        introspector: Introspector | None,
        fetcher: Fetcher,
        static: StaticTokens | None = None,
        cache_size: int = 10_000,
        jwt_kept_s: float = 3600.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.challenge = challenge
        self.verifier = verifier
        self.introspector = introspector
        self._fetcher = fetcher
        self._static = static
        self._required = frozenset(challenge.scopes)
        self.cache = TokenCache(cache_size, now=now)
        self._jwt_kept_s = jwt_kept_s
        self._now = now

    @classmethod
    def from_options(
        cls,
        options: AuthOptions,
        tokens: Mapping[str, str] | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> OAuthAuthenticator:
        """The authenticator the settings describe (``ValueError`` when they are wrong); ``tokens`` are
        the static ones accepted beside OAuth. ``transport``, ``now`` and ``monotonic`` are for tests."""
        check_auth_options(options)
        assert options.auth_resource is not None
        resource = canonical_resource(options.auth_resource)
        fetcher = Fetcher(timeout_s=options.auth_fetch_timeout_s, transport=transport)
        keys = {
            issuer: IssuerKeys(
                issuer,
                fetcher,
                jwks_url=options.auth_jwks_url,
                max_age_s=options.auth_keys_max_age_s,
                refetch_s=options.auth_keys_refetch_s,
                monotonic=monotonic,
            )
            for issuer in options.auth_issuers
        }
        verifier = JwtVerifier(
            keys,
            resource=resource,
            audiences=options.auth_audiences,
            algorithms=options.auth_algorithms,
            leeway_s=options.auth_leeway_s,
        )
        introspector = None
        if options.auth_introspection_url is not None:
            assert options.auth_client_id is not None and options.auth_client_secret is not None
            introspector = Introspector(
                options.auth_introspection_url,
                client_id=options.auth_client_id,
                client_secret=options.auth_client_secret.get_secret_value(),
                fetcher=fetcher,
                issuers=options.auth_issuers,
                resource=resource,
                audiences=options.auth_audiences,
                leeway_s=options.auth_leeway_s,
                cache_s=options.auth_introspection_cache_s,
                now=now,
            )
        return cls(
            Challenge(metadata_url(resource), tuple(options.auth_scopes)),
            verifier=verifier,
            introspector=introspector,
            fetcher=fetcher,
            static=StaticTokens(tokens) if tokens else None,
            cache_size=options.auth_token_cache_size,
            # A verified JWT is kept no longer than the keys that verified it are trusted unfetched: a key
            # withdrawn by its issuer stops vouching for cached tokens by then.
            jwt_kept_s=options.auth_keys_max_age_s,
            now=now,
        )

    @property
    def verifications(self) -> int:
        """JWT signature checks made (a token found in the cache makes none)."""
        return self.verifier.verifications if self.verifier is not None else 0

    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Principal | Awaitable[Principal]:
        token = bearer_token(headers)
        if token is None:
            AUTH_REFUSALS.labels("missing").inc()
            raise Unauthenticated(challenge=self.challenge)
        if self._static is not None and (found := self._static.match(token)) is not None:
            return found
        key = token_key(token)
        verdict = self.cache.get(key)
        if verdict is None:
            return self._judged(token, key)
        return self._accepted(verdict)

    def _accepted(self, verdict: Verdict) -> Principal:
        if isinstance(verdict, Refusal):
            AUTH_REFUSALS.labels("invalid").inc()
            raise invalid_token(verdict.description, self.challenge, reason=verdict.reason)
        if self._required and verdict.scopes is not None and not self._required <= verdict.scopes:
            AUTH_REFUSALS.labels("scope").inc()
            logger.debug(
                "token refused: lacks %s (client %s)", verdict.lacks(self._required), _shown(verdict.client_id)
            )
            raise InsufficientScope(self.challenge.scopes, challenge=self.challenge)
        return verdict

    async def _judged(self, token: str, key: bytes) -> Principal:
        try:
            verdict, until = await self._judge(token, key)
        except TokenRefused as exc:
            verdict, until = Refusal(exc.description, exc.reason), 0.0  # a JWT refused is not kept
        except AuthUnavailable:
            AUTH_REFUSALS.labels("unavailable").inc()
            raise
        if isinstance(verdict, Refusal) and logger.isEnabledFor(logging.DEBUG):
            claims = parsed[1] if (parsed := parse(token)) is not None else {}
            logger.debug("token refused: %s (iss %s, client %s)", verdict.reason, _shown(claims.get("iss")),
                         _shown(claims.get("client_id") or claims.get("azp")))  # fmt: skip
        self.cache.put(key, verdict, until)
        return self._accepted(verdict)

    async def _judge(self, token: str, key: bytes) -> tuple[Verdict, float]:
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRefused("the token is malformed", f"longer than {MAX_TOKEN_CHARS} characters")
        parsed = parse(token)
        if parsed is not None and self.verifier is not None:
            keys = self.verifier.issuer_keys(parsed)
            if keys is not None:
                return await self._verified(token, key, parsed, keys)
        if self.introspector is None:
            raise TokenRefused("the token is not from a known issuer",
                               "not a JWT of a configured issuer, and no introspection endpoint")  # fmt: skip
        return await self.introspector.judge(token, key)

    async def _verified(self, token: str, key: bytes, parsed: Parsed, keys: IssuerKeys) -> tuple[Verdict, float]:
        assert self.verifier is not None
        try:
            principal, expires = await self.verifier.verify(token, parsed, keys)
        except AuthUnavailable:
            if self.introspector is None:
                raise
            judged = await self.introspector.judge(token, key)
            if isinstance(judged[0], Refusal) and judged[0].reason == UNSUPPORTED:
                raise  # the endpoint introspects no JWT: the keys are the only way, and they cannot be had
            return judged
        return principal, min(expires, self._now() + self._jwt_kept_s)

    async def aclose(self) -> None:
        if self.verifier is not None:
            for keys in self.verifier.keys.values():
                await keys.aclose()
        await self._fetcher.aclose()
