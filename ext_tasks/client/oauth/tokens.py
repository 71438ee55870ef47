"""The token endpoint, through authlib: the authorization URL with PKCE S256, the code exchange, refresh,
client credentials, revocation (RFC 7009), and the client authentication methods ``client_secret_basic``,
``client_secret_post``, ``none`` and ``private_key_jwt`` (RFC 7523, signed with ``RS256`` or ``ES256``).

Every request carries ``resource`` (RFC 8707). A JWT client assertion names the issuer as its audience
(what RFC 7523bis and the spec's client-credentials extension ask), not the token endpoint URL that
authlib uses by default. With a DPoP key, each token request carries a proof (authlib has no DPoP: the
proof is our header, and a ``use_dpop_nonce`` answer is retried here with the server's nonce).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from authlib.common.security import generate_token
from authlib.integrations.base_client import OAuthError
from authlib.oauth2.rfc7523 import PrivateKeyJWT
from joserfc.jwk import ECKey, RSAKey

with warnings.catch_warnings():
    # authlib 1.9 prefers the httpx2 fork and warns when it runs on httpx; httpx is what this client (and
    # the transport handed to authlib) is built on, so the warning would only confuse users.
    warnings.filterwarnings("ignore", message="The httpx module is deprecated")
    from authlib.integrations.httpx_client import AsyncOAuth2Client

from .discovery import AuthServer
from .dpop import NONCE_ERROR, DpopKey
from .errors import AuthorizationError
from .registration import Registration
from .wire import MAX_DOCUMENT_BYTES

TOKEN_TIMEOUT_S: Final = 30.0
_FORM_HEADERS: Final = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8"}


class TokenEndpointError(AuthorizationError):
    """The token endpoint refused: ``error`` is its OAuth error code."""

    def __init__(self, message: str, error: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class Tokens:
    """What the token endpoint granted. ``scope`` is the scope asked for (the step-up union is computed
    from it), ``granted`` what the server said it gave, if it said."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    scope: str | None = None
    granted: str | None = None
    #: ``DPoP`` for a token bound to the grant's DPoP key (sent with the DPoP scheme), else ``Bearer``.
    token_type: str = "Bearer"  # noqa: S105 (a token type, not a secret)
    #: When the grant was received: with ``expires_at`` it gives the token's lifetime.
    issued_at: float | None = None

    @property
    def dpop(self) -> bool:
        return self.token_type.lower() == "dpop"

    def expired(self, margin_s: float) -> bool:
        """Due for a refresh: within ``margin_s`` of its expiry, or within half its lifetime when that is
        shorter (a token living 30 s would otherwise be refreshed before every request)."""
        if self.expires_at is None:
            return False
        if self.issued_at is not None and self.expires_at > self.issued_at:
            margin_s = min(margin_s, (self.expires_at - self.issued_at) / 2)
        return time.time() + margin_s >= self.expires_at

    def to_json(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "scope": self.scope,
            "granted": self.granted,
            "token_type": self.token_type,
            "issued_at": self.issued_at,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Tokens | None:
        access = value.get("access_token")
        if not isinstance(access, str) or not access:
            return None
        refresh, expires = value.get("refresh_token"), value.get("expires_at")
        scope, granted, kind = value.get("scope"), value.get("granted"), value.get("token_type")
        return cls(
            access,
            refresh if isinstance(refresh, str) else None,
            _number(expires),
            scope if isinstance(scope, str) else None,
            granted if isinstance(granted, str) else None,
            kind if isinstance(kind, str) else "Bearer",
            _number(value.get("issued_at")),
        )


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """One authorization code request: what the callback and the exchange are checked against."""

    url: str
    state: str
    code_verifier: str = field(repr=False)
    redirect_uri: str
    issuer: str


class TokenEndpoint:
    """One client (``registration``) at one authorization server (``server``)."""

    def __init__(
        self,
        server: AuthServer,
        registration: Registration,
        *,
        private_key: str | None = None,
        signing_alg: str = "RS256",
        transport: httpx.AsyncBaseTransport | None = None,
        dpop: DpopKey | None = None,
        nonces: dict[str, str] | None = None,
    ) -> None:
        self.server = server
        self.registration = registration
        self._private_key = private_key
        self._signing_alg = signing_alg
        self._transport = transport
        self._dpop = dpop
        #: Each token endpoint's last ``DPoP-Nonce`` (RFC 9449 §8), shared by the caller between requests.
        self._nonces = nonces if nonces is not None else {}

    def _client(self, redirect_uri: str | None = None) -> AsyncOAuth2Client:
        method = self.registration.auth_method
        secret: Any = self.registration.client_secret
        if method == "private_key_jwt":
            if self._private_key is None:
                raise AuthorizationError(f"{self.server.issuer}: private_key_jwt needs a private key")
            # authlib reads a PEM string as an RSA key: an EC key is handed over already parsed.
            key_class = ECKey if self._signing_alg.startswith("ES") else RSAKey
            secret = key_class.import_key(self._private_key)
        client = AsyncOAuth2Client(
            client_id=self.registration.client_id,
            client_secret=secret,
            token_endpoint_auth_method=method,
            revocation_endpoint_auth_method=method,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=TOKEN_TIMEOUT_S,
            follow_redirects=False,
            transport=self._transport,
            event_hooks={"response": [_refuse_large, self._note_nonce]},
        )
        if method == "private_key_jwt":
            client.register_client_auth_method(PrivateKeyJWT(self.server.issuer, alg=self._signing_alg))
        return client

    def authorization_request(self, redirect_uri: str, resource: str, scope: str | None) -> AuthorizationRequest:
        endpoint = self.server.endpoint("authorization_endpoint")
        if endpoint is None:
            raise AuthorizationError(f"{self.server.issuer}: the metadata has no authorization_endpoint")
        verifier = generate_token(64)
        client = self._client(redirect_uri)
        url, state = client.create_authorization_url(endpoint, code_verifier=verifier, scope=scope, resource=resource)
        return AuthorizationRequest(url, state, verifier, redirect_uri, self.server.issuer)

    async def _note_nonce(self, response: httpx.Response) -> None:
        nonce = response.headers.get("dpop-nonce")
        if nonce:
            self._nonces[self._token_url] = nonce

    async def _token_request(self, send: Callable[[dict[str, str]], Awaitable[Any]]) -> Any:
        """One token request, with a fresh DPoP proof when we hold a key, sent again once with the
        server's nonce if it answers ``use_dpop_nonce``."""
        for last in (False, True):
            headers = dict(_FORM_HEADERS)
            if self._dpop is not None:
                headers["DPoP"] = self._dpop.proof("POST", self._token_url, nonce=self._nonces.get(self._token_url))
            try:
                return await _call(self.server, send(headers))
            except TokenEndpointError as refused:
                if last or refused.error != NONCE_ERROR or self._dpop is None or self._token_url not in self._nonces:
                    raise
        raise AssertionError("unreachable")

    async def exchange_code(self, request: AuthorizationRequest, code: str, resource: str, scope: str | None) -> Tokens:
        async with self._client(request.redirect_uri) as client:
            token = await self._token_request(
                lambda headers: client.fetch_token(
                    self._token_url,
                    headers=headers,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=request.code_verifier,
                    resource=resource,
                )
            )
        return _tokens(token, scope)

    async def refresh(self, tokens: Tokens, resource: str) -> Tokens:
        assert tokens.refresh_token is not None
        refresh_token = tokens.refresh_token
        async with self._client() as client:
            token = await self._token_request(
                lambda headers: client.refresh_token(
                    self._token_url, headers=headers, refresh_token=refresh_token, resource=resource
                )
            )
        refreshed = _tokens(token, tokens.scope)
        # RFC 6749 §6: without a new refresh token, the old one stays valid.
        return refreshed if refreshed.refresh_token else _with_refresh(refreshed, tokens.refresh_token)

    async def client_credentials(self, resource: str, scope: str | None) -> Tokens:
        async with self._client() as client:
            extra = {"scope": scope} if scope else {}
            token = await self._token_request(
                lambda headers: client.fetch_token(
                    self._token_url, headers=headers, grant_type="client_credentials", resource=resource, **extra
                )
            )
        return _tokens(token, scope)

    async def revoke(self, token: str, hint: str) -> None:
        endpoint = self.server.endpoint("revocation_endpoint")
        if endpoint is None:
            return
        async with self._client() as client:
            response = await _call(self.server, client.revoke_token(endpoint, token=token, token_type_hint=hint))
        if isinstance(response, httpx.Response) and response.status_code >= 400:
            raise AuthorizationError(f"{endpoint}: revocation refused (HTTP {response.status_code})")

    @property
    def _token_url(self) -> str:
        url = self.server.endpoint("token_endpoint")
        assert url is not None  # discovery refuses metadata without one
        return url


async def _call(server: AuthServer, pending: Any) -> Any:
    """authlib's answer, or an :class:`AuthorizationError` naming the OAuth error code (never a token)."""
    try:
        return await pending
    except AuthorizationError:
        raise
    except httpx.HTTPError as exc:
        raise AuthorizationError(f"{server.issuer}: token endpoint: {type(exc).__name__}") from exc
    except (OAuthError, ValueError, KeyError, TypeError) as exc:  # an OAuth error, or not a token response
        error = str(getattr(exc, "error", None) or type(exc).__name__)
        description = getattr(exc, "description", None)
        raise TokenEndpointError(
            f"{server.issuer}: token endpoint: {error}" + (f" ({description})" if description else ""), error
        ) from None


async def _refuse_large(response: httpx.Response) -> None:
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_DOCUMENT_BYTES:
        raise AuthorizationError(f"{response.request.url}: the answer is larger than {MAX_DOCUMENT_BYTES} bytes")


def _tokens(token: Mapping[str, Any], scope: str | None) -> Tokens:
    access = token.get("access_token")
    if not isinstance(access, str) or not access:
        raise AuthorizationError("the token endpoint answered without an access_token")
    expires_at = token.get("expires_at")
    refresh, granted, kind = token.get("refresh_token"), token.get("scope"), token.get("token_type")
    return Tokens(
        access,
        refresh if isinstance(refresh, str) else None,
        _number(expires_at),
        scope,
        granted if isinstance(granted, str) else None,
        kind if isinstance(kind, str) else "Bearer",
        time.time(),
    )


def _with_refresh(tokens: Tokens, refresh_token: str) -> Tokens:
    return dataclasses.replace(tokens, refresh_token=refresh_token)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
