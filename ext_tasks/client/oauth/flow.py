"""The decisions of the OAuth flow for one MCP server: which token a request carries, and what to do
when the server refuses it (401: refresh or authorize again; 403 ``insufficient_scope``: step up).

State is one issuer's: its registration and tokens, stored under ``"<server URL> <issuer>"``. When the
server's metadata names another issuer, that state is left alone and the new issuer's is used, or
obtained anew (registration included: a client identity is never shown to another issuer).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final

import httpx

from .browser import CallbackListener, OpenUrl, call_open_url
from .discovery import AuthServer, ProtectedResource, canonical, find_auth_server, find_resource
from .dpop import DpopKey, supported_by
from .errors import AuthorizationError, IssuerMismatch, LoginRequired
from .registration import Registration, pick_auth_method, register_dynamically
from .store import TokenStore
from .tokens import AuthorizationRequest, TokenEndpoint, Tokens
from .wire import Challenge

log = logging.getLogger(__name__)

OFFLINE_ACCESS: Final = "offline_access"


@dataclass(frozen=True, slots=True)
class Settings:
    """What the caller configured (secrets kept out of reprs)."""

    client_id: str | None
    client_secret: str | None
    private_key: str | None
    signing_alg: str
    client_metadata_url: str | None
    client_credentials: bool
    dpop: bool
    client_name: str
    redirect_port: int
    interactive: bool
    open_url: OpenUrl
    refresh_margin_s: float
    callback_timeout_s: float

    def __repr__(self) -> str:
        return f"Settings(client_id={self.client_id!r}, client_credentials={self.client_credentials})"


@dataclass(slots=True)
class _Context:
    resource: ProtectedResource
    server: AuthServer
    #: Both sides take DPoP with our algorithm: the authorization server binds tokens, and the MCP server
    #: challenged with the DPoP scheme or lists DPoP in its metadata (a server that only knows Bearer
    #: would refuse a bound token).
    dpop: bool = False


def merge_scopes(*scopes: str | None) -> str | None:
    """The union of space-separated scope sets, in first-seen order (``None`` when empty)."""
    merged = dict.fromkeys(item for scope in scopes if scope for item in scope.split())
    return " ".join(merged) or None


def select_scope(challenge: Challenge, resource: ProtectedResource) -> str | None:
    """The spec's order: the challenge's ``scope``, else every scope the server's metadata lists, else
    none at all (no ``scope`` parameter)."""
    if challenge.scope:
        return challenge.scope
    return merge_scopes(*resource.scopes_supported) if resource.scopes_supported else None


def check_iss(answer: dict[str, str], server: AuthServer, recorded: str) -> None:
    """RFC 9207 as the spec's table has it, compared character for character: a server that advertises
    ``iss`` must send it; a present ``iss`` must be the issuer recorded before redirecting."""
    iss = answer.get("iss")
    if iss is None:
        if server.iss_parameter_supported:
            raise IssuerMismatch("the authorization response", None, recorded)
        return
    if iss != recorded:
        raise IssuerMismatch("the authorization response", iss, recorded)


class Flow:
    def __init__(
        self,
        server_url: str,
        settings: Settings,
        store: TokenStore,
        http: httpx.AsyncClient,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.server_url = canonical(server_url)
        self.transport = transport
        self.settings = settings
        self.store = store
        self.http = http
        self.lock = asyncio.Lock()
        self.context: _Context | None = None
        self.issuer: str | None = None
        self.registration: Registration | None = None
        self.tokens: Tokens | None = None
        #: The key the grant's tokens are bound to (DPoP), kept with them.
        self.dpop_key: DpopKey | None = None
        #: The token endpoints' DPoP nonces, kept between token requests.
        self.token_nonces: dict[str, str] = {}
        self._loaded = False

    # --- the store ------------------------------------------------------------------------------

    def key(self, issuer: str) -> str:
        return f"{self.server_url} {issuer}"

    async def load(self, issuer: str | None = None) -> None:
        """Take ``issuer``'s stored state (the last issuer used for this server when ``None``)."""
        if issuer is None:
            pointer = await self.store.load(self.server_url)
            found = pointer.get("issuer") if pointer else None
            if not isinstance(found, str):
                return
            issuer = found
        self.issuer, self.registration, self.tokens, self.dpop_key = issuer, None, None, None
        entry = await self.store.load(self.key(issuer)) or {}
        client, tokens, dpop_key = entry.get("client"), entry.get("tokens"), entry.get("dpop_key")
        if isinstance(dpop_key, str):
            self.dpop_key = DpopKey.from_pem(dpop_key)
        if isinstance(client, dict):
            self.registration = Registration.from_json(client, issuer)
        if isinstance(tokens, dict):
            self.tokens = Tokens.from_json(tokens)

    async def save(self) -> None:
        assert self.issuer is not None
        entry: dict[str, Any] = {"issuer": self.issuer, "resource": self.server_url}
        if self.registration is not None and self.registration.dynamic:
            entry["client"] = self.registration.to_json()
        if self.tokens is not None:
            entry["tokens"] = self.tokens.to_json()
        if self.dpop_key is not None:
            entry["dpop_key"] = self.dpop_key.to_pem()
        await self.store.save(self.key(self.issuer), entry)
        await self.store.save(self.server_url, {"issuer": self.issuer})

    # --- what a request carries ---------------------------------------------------------------------

    async def token(self) -> Tokens | None:
        """The access token to send, refreshed first when it is about to expire (and the authorization
        server is known in this process); ``None`` to send the request without one."""
        async with self.lock:
            if not self._loaded:
                self._loaded = True
                await self.load()
            tokens = self.tokens
            if tokens is None:
                return None
            if not tokens.expired(self.settings.refresh_margin_s):
                return tokens
            if self.context is None:
                return None  # the 401 that follows runs discovery, then refreshes
            try:
                return await self._renew(self.context)
            except AuthorizationError as exc:
                log.info("%s: renewing the token failed (%s)", self.server_url, exc)
                return None

    async def unauthorized(self, challenge: Challenge, rejected: str | None, *, fresh: bool = False) -> Tokens:
        """After a 401: discovery from the challenge, then a stored token of the (new) issuer, a refresh,
        or a new authorization. ``fresh``: always a new authorization (an explicit login)."""
        async with self.lock:
            if not fresh and self.tokens is not None and self.tokens.access_token != rejected and rejected:
                return self.tokens  # another request renewed it meanwhile
            context = await self._discover(challenge)
            scope = select_scope(challenge, context.resource)
            tokens = self.tokens
            if not fresh and tokens is not None:
                unsent = tokens.access_token != rejected and not tokens.expired(self.settings.refresh_margin_s)
                if unsent:
                    return tokens
                if tokens.refresh_token or self.settings.client_credentials:
                    try:
                        return await self._renew(context)
                    except AuthorizationError as exc:
                        log.info("%s: renewing the token failed (%s)", self.server_url, exc)
                # Authorizing again: keep what was granted before along with what the server asks now.
                scope = merge_scopes(tokens.scope, scope)
            return await self._obtain(context, scope)

    async def step_up(self, challenge: Challenge) -> Tokens:
        """After a 403 ``insufficient_scope``: a new authorization for the scopes held plus those asked."""
        async with self.lock:
            context = self.context or await self._discover(challenge)
            held = self.tokens.scope if self.tokens else None
            return await self._obtain(context, merge_scopes(held, challenge.scope))

    # --- the steps ----------------------------------------------------------------------------------

    async def _discover(self, challenge: Challenge) -> _Context:
        resource = await find_resource(self.http, self.server_url, challenge)
        # The issuer in use while the server still lists it (its registration and tokens stay good), else
        # the first one listed (RFC 9728 §7.6 leaves the choice to the client).
        listed = resource.authorization_servers
        issuer = self.issuer if self.issuer in listed else listed[0]
        server = await find_auth_server(self.http, issuer)
        if issuer != self.issuer:
            log.info("%s: authorization server %s", self.server_url, issuer)
            await self.load(issuer)
        resource_takes_dpop = "dpop" in challenge.schemes or resource.dpop_required or supported_by(resource.dpop_algs)
        dpop = (
            self.settings.dpop
            and resource_takes_dpop
            and supported_by(server.listed("dpop_signing_alg_values_supported"))
        )
        self.context = _Context(resource, server, dpop)
        return self.context

    async def _renew(self, context: _Context) -> Tokens:
        tokens = self.tokens
        assert tokens is not None
        endpoint = self._endpoint(context.server, self._known_registration(context.server), dpop=context.dpop)
        if tokens.refresh_token:
            self.tokens = await endpoint.refresh(tokens, context.resource.resource)
        elif self.settings.client_credentials:
            self.tokens = await endpoint.client_credentials(context.resource.resource, tokens.scope)
        else:
            raise AuthorizationError(f"{self.server_url}: no refresh token")
        await self.save()
        return self.tokens

    async def _obtain(self, context: _Context, scope: str | None) -> Tokens:
        if self.settings.client_credentials:
            endpoint = self._endpoint(context.server, self._known_registration(context.server), dpop=context.dpop)
            self.tokens = await endpoint.client_credentials(context.resource.resource, scope)
        elif not self.settings.interactive:
            raise LoginRequired(self.server_url)
        else:
            self.tokens = await self._authorize(context, scope)
        await self.save()
        return self.tokens

    def _known_registration(self, server: AuthServer) -> Registration:
        """The client identity to show ``server`` without registering: pre-registered, a Client ID
        Metadata Document, or one this issuer gave us before."""
        found = self._registration_without_dcr(server)
        if found is None:
            raise AuthorizationError(f"{server.issuer}: no client registration to use")
        return found

    def _registration_without_dcr(self, server: AuthServer) -> Registration | None:
        settings = self.settings
        if settings.client_id is not None:
            method = pick_auth_method(
                server, secret=settings.client_secret is not None, private_key=settings.private_key is not None
            )
            return Registration(server.issuer, settings.client_id, method, settings.client_secret)
        if settings.client_metadata_url is not None and server.cimd_supported:
            return Registration(server.issuer, settings.client_metadata_url, "none")
        if self.registration is not None and self.registration.issuer == server.issuer:
            return self.registration
        return None

    def _endpoint(self, server: AuthServer, registration: Registration, *, dpop: bool = False) -> TokenEndpoint:
        return TokenEndpoint(
            server,
            registration,
            private_key=self.settings.private_key,
            signing_alg=self.settings.signing_alg,
            transport=self.transport,
            dpop=self._dpop_key() if dpop else None,
            nonces=self.token_nonces,
        )

    def _dpop_key(self) -> DpopKey:
        """The grant's DPoP key (made on first use, then kept with its tokens)."""
        if self.dpop_key is None:
            self.dpop_key = DpopKey()
        return self.dpop_key

    async def _authorize(self, context: _Context, scope: str | None) -> Tokens:
        server = context.server
        if "S256" not in (server.listed("code_challenge_methods_supported") or ()):
            # The spec: without advertised PKCE support a client must not go on.
            raise AuthorizationError(f"{server.issuer}: the authorization server does not advertise PKCE S256")
        offered = server.listed("scopes_supported") or ()
        if scope and OFFLINE_ACCESS in offered:
            # Refresh tokens spare the person another login; only asked for along with real scopes, so
            # that a server with no scopes to name still gets no scope parameter.
            scope = merge_scopes(scope, OFFLINE_ACCESS)
        registration = self._registration_without_dcr(server)
        listener = await self._listen(registration)
        try:
            if registration is None or registration.redirect_uri not in (None, listener.redirect_uri):
                registration = await register_dynamically(
                    self.http, server, listener.redirect_uri, self.settings.client_name
                )
                self.registration = registration
                await self.save()
            endpoint = self._endpoint(server, registration, dpop=context.dpop)
            request = endpoint.authorization_request(listener.redirect_uri, context.resource.resource, scope)
            listener.expect(request.state)
            await call_open_url(self.settings.open_url, request.url)
            answer = await listener.wait()
        finally:
            await listener.close()
        return await self._exchange(endpoint, request, answer, context, scope)

    async def _listen(self, registration: Registration | None) -> CallbackListener:
        """A started listener: on the registered port when there is one and it is free (servers compare
        redirect URIs exactly), else on the configured port (0: any free one; then we register anew)."""
        ports = [self.settings.redirect_port]
        if registration is not None and registration.redirect_uri:
            registered = httpx.URL(registration.redirect_uri).port
            if registered and registered != self.settings.redirect_port:
                ports.insert(0, registered)
        for port in ports:
            listener = CallbackListener(port, wait_timeout_s=self.settings.callback_timeout_s)
            try:
                await listener.start()
            except OSError:
                continue
            return listener
        raise AuthorizationError(f"cannot listen on 127.0.0.1:{ports[-1]} for the authorization answer")

    async def _exchange(
        self,
        endpoint: TokenEndpoint,
        request: AuthorizationRequest,
        answer: dict[str, str],
        context: _Context,
        scope: str | None,
    ) -> Tokens:
        # The issuer is checked before anything else in the answer is looked at, errors included.
        check_iss(answer, context.server, request.issuer)
        if "error" in answer:
            raise AuthorizationError(f"{request.issuer}: authorization refused: {answer['error']}")
        code = answer.get("code")
        if not code:
            raise AuthorizationError(f"{request.issuer}: the authorization answer has no code")
        return await endpoint.exchange_code(request, code, context.resource.resource, scope)

    # --- logging out --------------------------------------------------------------------------------

    async def forget(self) -> bool:
        """Revoke the stored tokens (refresh token first: it outlives the access token) where the
        issuer offers revocation, then delete the stored entry. True when the issuer confirmed it."""
        async with self.lock:
            if self.issuer is None:
                await self.load()
            issuer, tokens = self.issuer, self.tokens
            revoked = False
            if issuer is not None and tokens is not None:
                try:
                    server = await find_auth_server(self.http, issuer)
                    if server.endpoint("revocation_endpoint") is not None:
                        endpoint = self._endpoint(server, self._known_registration(server))
                        if tokens.refresh_token:
                            await endpoint.revoke(tokens.refresh_token, "refresh_token")
                            revoked = True
                        try:
                            await endpoint.revoke(tokens.access_token, "access_token")
                        except AuthorizationError:
                            # A JWT access token may not be revocable (unsupported_token_type): it expires
                            # soon, and the refresh token that could renew it is what had to go.
                            if not revoked:
                                raise
                        revoked = True
                except AuthorizationError as exc:
                    log.warning("%s: revoking the tokens failed (%s); forgetting them anyway", self.server_url, exc)
            if issuer is not None:
                await self.store.delete(self.key(issuer))
            await self.store.delete(self.server_url)
            self.issuer, self.registration, self.tokens, self.context, self.dpop_key = None, None, None, None, None
            self._loaded = True
            return revoked
