"""Opaque access tokens, judged by the authorization server's introspection endpoint (RFC 7662).

This server authenticates there with its own client credentials (``client_secret_basic``, RFC 6749
§2.3.1: both parts form-encoded, then base64). The answer is accepted only when:

* ``active`` is ``true``;
* ``aud`` names this resource. An answer **without** ``aud`` is refused: nothing else says the token was
  issued for this server rather than passed on from another (MCP's token-passthrough rule, RFC 8707).
  Configure the authorization server to put the resource in its introspection answers;
* ``iss``, when present, is one of the configured issuers (when absent, the token is taken as the first
  configured issuer's: the one whose introspection endpoint ``EXT_TASKS_AUTH_INTROSPECTION_URL`` is);
* ``exp`` and ``nbf``, when present, hold (with the leeway); ``token_type``, when present, is a bearer
  token, and no ``cnf`` binds it to a key (DPoP, mTLS).

Answers are kept (by the token's hash, :mod:`.cache`), refusals too, until ``exp`` but never longer than
``EXT_TASKS_AUTH_INTROSPECTION_CACHE_S``: a revoked token is refused at the latest when its entry
lapses. Concurrent requests with the same new token make one call. An endpoint that cannot be asked
makes :class:`AuthUnavailable` (503): the token may be fine. An endpoint answering 400
``unsupported_token_type`` (oidc-provider's answer for any JWT, its own or another issuer's) says it
vouches for no token of that kind: a refusal (:data:`UNSUPPORTED`), not a failure.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote_plus

from .cache import Refusal, Verdict
from .challenge import AuthUnavailable
from .fetch import Fetcher, FetchFailed
from .metadata import audience_matches
from .principals import Principal

logger = logging.getLogger("ext_tasks.auth")

#: The reason of the refusal of a token the endpoint does not introspect (400 ``unsupported_token_type``).
UNSUPPORTED: Final = "the introspection endpoint does not take this kind of token (unsupported_token_type)"

#: What an introspection call resolves to: a verdict and until when it holds, or None when the endpoint
#: could not be asked.
Judged = tuple[Verdict, float] | None


def basic_credentials(client_id: str, client_secret: str) -> str:
    pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Introspector:
    def __init__(
        self,
        url: str,
        *,
        client_id: str,
        client_secret: str,
        fetcher: Fetcher,
        issuers: tuple[str, ...],
        resource: str,
        audiences: tuple[str, ...] = (),
        leeway_s: float,
        cache_s: float,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self._authorization = basic_credentials(client_id, client_secret)
        self._fetcher = fetcher
        self._issuers = issuers
        self._resource = resource
        self._audiences = frozenset(audiences)
        self._leeway_s = leeway_s
        self._cache_s = cache_s
        self._now = now
        self._pending: dict[bytes, asyncio.Task[Judged]] = {}
        #: Calls made to the endpoint, for tests and operators.
        self.calls = 0

    def __repr__(self) -> str:
        return f"Introspector({self.url!r})"  # never the credentials

    async def judge(self, token: str, key: bytes) -> tuple[Verdict, float]:
        """The verdict on ``token`` (whose hash is ``key``) and until when it holds.

        Raises:
            AuthUnavailable: the endpoint could not be asked.
        """
        task = self._pending.get(key)
        if task is None:
            task = asyncio.create_task(self._ask(token), name="introspection")
            self._pending[key] = task
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        judged = await asyncio.shield(task)
        if judged is None:
            raise AuthUnavailable("Service unavailable: the authorization server cannot be asked about the token")
        return judged

    async def _ask(self, token: str) -> Judged:
        self.calls += 1
        form = {"token": token, "token_type_hint": "access_token"}
        try:
            answer = await self._fetcher.post_form(self.url, form, authorization=self._authorization)
        except FetchFailed as exc:
            if exc.error == "unsupported_token_type":
                return Refusal("the token is not from a known issuer", UNSUPPORTED), self._now() + self._cache_s
            logger.warning("token introspection failed (%s)", exc)
            return None
        except Exception:  # never take the server down; the request gets 503
            logger.exception("token introspection failed")
            return None
        return self.judged(answer)

    def judged(self, answer: Mapping[str, Any]) -> tuple[Verdict, float]:
        """The verdict on an introspection answer, and until when it holds."""
        now = self._now()
        until = now + self._cache_s
        refusal = self._refusal(answer, now)
        if refusal is not None:
            return refusal, until if refusal.reason != "nbf" else now
        issuer = answer.get("iss", self._issuers[0])
        try:
            principal = Principal.from_claims(issuer, answer)
        except ValueError as exc:
            return Refusal("the token names no subject", str(exc)), until
        exp = _number(answer.get("exp"))
        return principal, until if exp is None else min(exp, until)

    def _refusal(self, answer: Mapping[str, Any], now: float) -> Refusal | None:
        if answer.get("active") is not True:
            return Refusal("the token is not active", "inactive")
        token_type = answer.get("token_type")
        bearer = token_type is None or (
            isinstance(token_type, str) and token_type.lower() in ("bearer", "access_token")
        )
        if not bearer or "cnf" in answer:
            return Refusal("only bearer tokens are accepted", "not a bearer token")
        issuer = answer.get("iss", self._issuers[0])
        if issuer not in self._issuers:
            return Refusal("the token is from an unknown issuer", "iss not configured")
        if not audience_matches(answer.get("aud"), self._resource, self._audiences):
            return Refusal("the token was issued for another resource", "aud absent or not this resource")
        exp, nbf = answer.get("exp"), answer.get("nbf")
        if (exp is not None and _number(exp) is None) or (nbf is not None and _number(nbf) is None):
            return Refusal("the token is malformed", "exp or nbf not a number")
        if (expires := _number(exp)) is not None and expires + self._leeway_s <= now:
            return Refusal("the token has expired", "expired")
        if (starts := _number(nbf)) is not None and starts - self._leeway_s > now:
            return Refusal("the token is not valid yet", "nbf")
        return None
