"""``OAuth``: OAuth 2.1 for one MCP server as an ``httpx.Auth``, so ``Client(url, auth=OAuth(url))``
authorizes itself when the server asks.

Per request: the stored access token (refreshed shortly before it expires) goes in
``Authorization: Bearer`` (or ``DPoP``, with a fresh proof, when the token is bound to a key: RFC 9449),
and only to the server's origin. A 401 runs discovery and then a refresh or
a new authorization, once per request; a 403 ``insufficient_scope`` re-authorizes with the union of the
scopes held and asked, at most ``max_step_ups`` times per request, then raises :class:`TooManyStepUps`.
The OAuth traffic itself (metadata, registration, token endpoint) goes through a client of its own,
never through the authenticated one.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from typing import Final

import httpx

from ...protocol.versions import MODERN_VERSIONS
from .browser import WAIT_TIMEOUT_S, OpenUrl, open_in_browser
from .discovery import canonical
from .dpop import NONCE_ERROR
from .errors import TooManyStepUps
from .flow import Flow, Settings
from .store import MemoryStore, TokenStore
from .tokens import Tokens
from .wire import Challenge, origin, parse_challenge

SIGNING_ALGS: Final = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"})


class OAuth(httpx.Auth):
    requires_request_body = True  # a refused request is sent again once authorized

    def __init__(
        self,
        server_url: str,
        *,
        store: TokenStore | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        private_key: str | None = None,
        signing_alg: str = "RS256",
        client_metadata_url: str | None = None,
        client_credentials: bool = False,
        dpop: bool = True,
        client_name: str = "ext-tasks",
        redirect_port: int = 0,
        interactive: bool = True,
        open_url: OpenUrl | None = None,
        max_step_ups: int = 2,
        refresh_margin_s: float = 60.0,
        callback_timeout_s: float = WAIT_TIMEOUT_S,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``server_url``: the MCP endpoint. ``store``: where tokens and registrations are kept
        (:class:`MemoryStore` by default; :func:`default_store` for the keyring or a private file).

        The client identity, in the spec's order: ``client_id`` (with ``client_secret``, or
        ``private_key``, a PEM, for ``private_key_jwt`` signed with ``signing_alg``) when pre-registered;
        else ``client_metadata_url`` (an HTTPS URL serving a Client ID Metadata Document) when the
        authorization server supports those; else Dynamic Client Registration as ``client_name``.

        ``client_credentials``: a machine client (extension ``io.modelcontextprotocol/oauth-client-
        credentials``): tokens come from the client credentials grant, no browser involved; needs
        ``client_id`` and a secret or a private key. Otherwise a person authorizes in a browser:
        ``open_url`` is called with the authorization URL (default: print it to stderr and open a
        browser unless ``EXT_TASKS_OAUTH_BROWSER=none``); the answer comes back to
        ``http://127.0.0.1:<redirect_port>/callback`` (0: any free port) within ``callback_timeout_s``.
        ``interactive=False``: raise :class:`LoginRequired` instead of opening a browser.
        ``dpop``: bind tokens to a key of ours (RFC 9449) where the authorization server offers DPoP
        with ES256.

        ``max_step_ups``: re-authorizations per request for ``insufficient_scope``. ``refresh_margin_s``:
        refresh this long before expiry. ``timeout_s``: each OAuth request. ``transport``: for the OAuth
        traffic (tests)."""
        if client_credentials and (client_id is None or (client_secret is None and private_key is None)):
            raise ValueError("client_credentials needs client_id and a client_secret or a private_key")
        if private_key is not None and client_id is None:
            raise ValueError("private_key needs client_id")
        if signing_alg not in SIGNING_ALGS:
            raise ValueError(f"signing_alg must be one of {sorted(SIGNING_ALGS)}")
        self.server_url = canonical(server_url)
        self.max_step_ups = max_step_ups
        self.store = store if store is not None else MemoryStore()
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), follow_redirects=False, transport=transport)
        settings = Settings(
            client_id=client_id,
            client_secret=client_secret,
            private_key=private_key,
            signing_alg=signing_alg,
            client_metadata_url=client_metadata_url,
            client_credentials=client_credentials,
            dpop=dpop,
            client_name=client_name,
            redirect_port=redirect_port,
            interactive=interactive,
            open_url=open_url or open_in_browser,
            refresh_margin_s=refresh_margin_s,
            callback_timeout_s=callback_timeout_s,
        )
        self._flow = Flow(self.server_url, settings, self.store, self._http, transport)
        #: The MCP server's last ``DPoP-Nonce`` (RFC 9449 §9).
        self._nonce: str | None = None

    def __repr__(self) -> str:
        return f"OAuth({self.server_url!r}, store={self.store!r})"

    async def __aenter__(self) -> OAuth:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("OAuth authorizes httpx.AsyncClient requests only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        if origin(request.url) != origin(httpx.URL(self.server_url)):
            yield request  # a token is for its server only
            return
        tokens = await self._flow.token()
        self._present(request, tokens)
        response = yield request
        renewed = nonce_sent = False
        step_ups = 0
        while True:
            challenge = parse_challenge(response)
            self._nonce = response.headers.get("dpop-nonce") or self._nonce
            if response.status_code == 401 and challenge.error == NONCE_ERROR and not nonce_sent:
                nonce_sent = True  # the same token again, its proof signed with the server's nonce
            elif response.status_code == 401 and not renewed:
                renewed = True
                tokens = await self._flow.unauthorized(challenge, tokens.access_token if tokens else None)
            elif response.status_code == 403 and challenge.insufficient_scope:
                if step_ups >= self.max_step_ups:
                    raise TooManyStepUps(step_ups, challenge.scope or "")
                step_ups += 1
                tokens = await self._flow.step_up(challenge)
            else:
                return
            self._present(request, tokens)
            response = yield request

    def _present(self, request: httpx.Request, tokens: Tokens | None) -> None:
        """The request's credentials: none, a bearer token, or a DPoP-bound token with a fresh proof."""
        request.headers.pop("DPoP", None)
        key = self._flow.dpop_key
        if tokens is None:
            request.headers.pop("Authorization", None)
        elif tokens.dpop and key is not None:
            request.headers["Authorization"] = f"DPoP {tokens.access_token}"
            url = str(request.url)
            request.headers["DPoP"] = key.proof(
                request.method, url, access_token=tokens.access_token, nonce=self._nonce
            )
        else:
            request.headers["Authorization"] = f"Bearer {tokens.access_token}"

    async def login(self, http: httpx.AsyncClient | None = None) -> None:
        """Authorize now, without an MCP request: an unauthenticated probe of the server (sent through
        ``http`` when given) for its challenge, then discovery and a new authorization, stored."""
        probe = {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}}
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN_VERSIONS[0],
            "Mcp-Method": "server/discover",
        }
        try:  # httpx.Auth(): the probe goes without credentials, whatever auth ``http`` carries
            response = await (http or self._http).post(self.server_url, json=probe, headers=headers, auth=httpx.Auth())
        except httpx.HTTPError:
            challenge = Challenge()  # discovery through the well-known URIs may still work
        else:
            challenge = parse_challenge(response) if response.status_code == 401 else Challenge()
        await self._flow.unauthorized(challenge, None, fresh=True)

    async def logout(self) -> bool:
        """Revoke the stored tokens at their issuer (RFC 7009, when it offers revocation) and delete
        them. True when the issuer confirmed the revocation; the tokens are forgotten either way."""
        return await self._flow.forget()
