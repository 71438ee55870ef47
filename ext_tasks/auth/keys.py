"""One issuer's signing keys (its JWKS): found through its metadata or configured, fetched once, kept,
and fetched again when needed; never more than one fetch at a time, never a request blocked for longer
than one bounded fetch.

Rules:

* **One fetch at a time.** Whoever needs the keys while a fetch is under way waits for that one
  (bounded by the fetch timeout); none starts its own. A thousand requests naming a new key id make one
  fetch.
* **Unknown key id.** The keys are fetched again once, and at most once per ``refetch_s`` (counted from
  the last fetch of any kind), then the key is looked up again; still unknown: :class:`NoKey` (the
  token is refused, 401).
* **Never fetched.** While no keys could ever be had, requests get :class:`AuthUnavailable` (503) with
  the time until the next try: failed fetches are retried after 1, 2, 4 ... s, up to ``refetch_s``,
  and in between refused at once, so an authorization server that is down is not asked by every request.
* **Old keys** (older than ``max_age_s``) are fetched again in the background on their next use, rate
  limited like the rest; the old keys serve meanwhile, and stay if that fetch fails.
* **Which key.** Only public members are read (``kty``, ``n``/``e``, ``crv``/``x``/``y``), so a private
  or symmetric key published by mistake is never used. A key serves only the algorithms of its type: RSA
  (2048 bits or more) for RS*/PS*, EC of the matching curve for ES*, OKP for EdDSA; when it states an
  ``alg``, only that one; a key whose ``use`` is not ``sig`` serves none. A token without ``kid`` is
  verified only when exactly one key fits its algorithm.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import jwt
from jwt import PyJWK

from ..metrics import AUTH_KEY_FETCHES
from .challenge import AuthUnavailable
from .fetch import Fetcher, FetchFailed, discover
from .metadata import check_url

logger = logging.getLogger("ext_tasks.auth")

#: Per algorithm: the key type, and the curves allowed (None: any; RSA has none).
KEY_TYPES: Final[Mapping[str, tuple[str, frozenset[str] | None]]] = {
    **{f"{family}{bits}": ("RSA", None) for family in ("RS", "PS") for bits in (256, 384, 512)},
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}
_PUBLIC_MEMBERS: Final = {"RSA": ("n", "e"), "EC": ("crv", "x", "y"), "OKP": ("crv", "x")}
_MIN_RSA_BITS: Final = 2048
#: Keys kept of one set at most (a JWKS has a handful; more is a mistake or an attack).
MAX_KEYS: Final = 100
Jwk = dict[str, str]


class NoKey(Exception):
    """No key of the set fits the token (unknown ``kid``, or none for its algorithm); ``str()`` says which."""


def fits(jwk: Jwk, algorithm: str) -> bool:
    kty, curves = KEY_TYPES.get(algorithm, ("", None))
    if jwk["kty"] != kty or jwk.get("alg", algorithm) != algorithm:
        return False
    return curves is None or jwk.get("crv") in curves


def _public(raw: Any) -> Jwk | None:
    """The public members of a JWK (and its kid and alg), or None when it is no usable signature key."""
    if not isinstance(raw, dict) or raw.get("use", "sig") != "sig" or raw.get("kty") not in _PUBLIC_MEMBERS:
        return None
    kty = raw["kty"]
    jwk = {"kty": kty}
    for member in (*_PUBLIC_MEMBERS[kty], "kid", "alg"):
        value = raw.get(member)
        if value is not None:
            if not isinstance(value, str):
                return None
            jwk[member] = value
    if any(member not in jwk for member in _PUBLIC_MEMBERS[kty]):
        return None
    algorithm = jwk.get("alg") or next((alg for alg in KEY_TYPES if fits(jwk, alg)), None)
    if algorithm is None or not fits(jwk, algorithm):
        return None
    try:
        key = PyJWK(jwk, algorithm=algorithm).key
    except (jwt.PyJWTError, ValueError, TypeError):
        return None
    if kty == "RSA" and getattr(key, "key_size", 0) < _MIN_RSA_BITS:
        return None
    return jwk


def usable_keys(document: Mapping[str, Any]) -> list[Jwk]:
    """The usable signature keys of a JWKS document; :class:`FetchFailed` when it has none."""
    raw_keys = document.get("keys")
    if not isinstance(raw_keys, list):
        raise FetchFailed("the JWKS has no 'keys' list")
    keys = [jwk for raw in raw_keys[:MAX_KEYS] if (jwk := _public(raw)) is not None]
    if not keys:
        raise FetchFailed(f"the JWKS has no usable signature key (of {len(raw_keys)})")
    if len(keys) < len(raw_keys):
        logger.info("JWKS: %d of %d keys skipped (not public signature keys of a supported type)",
                    len(raw_keys) - len(keys), len(raw_keys))  # fmt: skip
    return keys


class IssuerKeys:
    """The keys of one issuer, from ``jwks_url`` or from the ``jwks_uri`` of its metadata."""

    def __init__(
        self,
        issuer: str,
        fetcher: Fetcher,
        *,
        jwks_url: str | None = None,
        max_age_s: float = 3600.0,
        refetch_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._fetcher = fetcher
        self._configured_url = jwks_url
        self._jwks_uri = jwks_url
        self._max_age_s = max_age_s
        self._refetch_s = refetch_s
        self._monotonic = monotonic
        self._keys: list[Jwk] | None = None
        self._kids: frozenset[str] = frozenset()
        self._built: dict[tuple[str | None, str], PyJWK] = {}
        self._loaded_at = -math.inf
        self._last_attempt = -math.inf
        self._next_attempt = -math.inf
        self._failures = 0
        self._inflight: asyncio.Task[None] | None = None
        #: Fetches of the key set started (discovery included), for tests and operators.
        self.fetches = 0

    async def key(self, kid: str | None, algorithm: str) -> PyJWK:
        """The key to verify a token signed with ``algorithm`` by key ``kid``.

        Raises:
            NoKey: no key fits (after one refetch for an unknown ``kid``, if the rate limit allows).
            AuthUnavailable: no keys could ever be fetched for this issuer.
        """
        if self._keys is None:
            await self._first_keys()
        found = self._lookup(kid, algorithm)
        if found is not None:
            if self._monotonic() - self._loaded_at >= self._max_age_s and self._may_fetch():
                self._start()  # in the background: these keys serve meanwhile
            return found
        if kid is None or kid in self._kids:
            raise NoKey("no key of the set fits the token's algorithm" if kid else "the token names no key id")
        if self._inflight is not None or self._may_fetch():
            await self._join()
            found = self._lookup(kid, algorithm)
            if found is not None:
                return found
        raise NoKey("unknown key id")

    async def _first_keys(self) -> None:
        if self._inflight is None and (wait := self._next_attempt - self._monotonic()) > 0:
            raise AuthUnavailable("Service unavailable: the authorization server's keys cannot be fetched",
                                  retry_after_s=wait)  # fmt: skip
        await self._join()
        if self._keys is None:
            wait = self._next_attempt - self._monotonic()
            raise AuthUnavailable(
                "Service unavailable: the authorization server's keys cannot be fetched", retry_after_s=wait
            )

    def _lookup(self, kid: str | None, algorithm: str) -> PyJWK | None:
        cached = self._built.get((kid, algorithm))
        if cached is not None:
            return cached
        keys = self._keys or []
        fitting = [jwk for jwk in keys if (kid is None or jwk.get("kid") == kid) and fits(jwk, algorithm)]
        if not fitting or (kid is None and len(fitting) > 1):
            return None
        built = PyJWK(fitting[0], algorithm=algorithm)
        self._built[(kid, algorithm)] = built
        return built

    def _may_fetch(self) -> bool:
        return self._monotonic() - self._last_attempt >= self._refetch_s

    def _start(self) -> asyncio.Task[None]:
        self._inflight = asyncio.create_task(self._refresh(), name=f"jwks {self.issuer}")
        return self._inflight

    async def _join(self) -> None:
        """Wait for the fetch under way (or a new one), at most the fetch timeout; never cancels it."""
        task = self._inflight or self._start()
        await asyncio.wait({task}, timeout=self._fetcher.timeout_s + 0.1)

    async def _refresh(self) -> None:
        self._last_attempt = self._monotonic()
        self.fetches += 1
        try:
            async with asyncio.timeout(self._fetcher.timeout_s):
                keys = usable_keys(await self._fetcher.get_json(await self._keys_url()))
        except TimeoutError:
            self._failed(f"no answer within {self._fetcher.timeout_s:g} s")
        except FetchFailed as exc:
            self._failed(str(exc))
        except Exception:  # a fetch never takes the server down; the old keys stay
            logger.exception("fetching the keys of issuer %s failed", self.issuer)
            self._failed("internal error")
        else:
            self._loaded(keys)
        finally:
            self._inflight = None

    async def _keys_url(self) -> str:
        if self._jwks_uri is None:
            found = (await discover(self._fetcher, self.issuer)).get("jwks_uri")
            if not isinstance(found, str):
                raise FetchFailed("the issuer's metadata names no jwks_uri")
            try:
                self._jwks_uri = check_url(found, "jwks_uri")
            except ValueError as exc:
                raise FetchFailed(str(exc)) from None
        return self._jwks_uri

    def _loaded(self, keys: list[Jwk]) -> None:
        self._keys = keys
        self._kids = frozenset(jwk["kid"] for jwk in keys if "kid" in jwk)
        self._built = {}
        self._loaded_at = self._monotonic()
        self._failures = 0
        self._next_attempt = -math.inf
        AUTH_KEY_FETCHES.labels("ok").inc()
        logger.debug("keys of issuer %s fetched: %d", self.issuer, len(keys))

    def _failed(self, reason: str) -> None:
        self._failures += 1
        pause = min(self._refetch_s, 2.0 ** min(self._failures - 1, 16))
        self._next_attempt = self._monotonic() + pause
        self._jwks_uri = self._configured_url  # discover again next time
        AUTH_KEY_FETCHES.labels("failed").inc()
        if self._keys is None:
            logger.warning("cannot fetch the keys of issuer %s (%s); its tokens are answered 503 until it "
                           "succeeds; next try in %g s", self.issuer, reason, pause)  # fmt: skip
        else:
            logger.warning("cannot fetch the keys of issuer %s again (%s); the keys fetched before stay in "
                           "use", self.issuer, reason)  # fmt: skip

    async def aclose(self) -> None:
        task = self._inflight
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
