"""A real OAuth 2.1 / OpenID authorization server for the authorization tests: panva's ``oidc-provider``
(OpenID Certified; pinned in ``oidc/package.json``) run by ``oidc/provider.mjs`` on Node 22, on a free
loopback port, stopped by its PID.

::

    with running_oidc_provider(tmp_path) as provider:
        provider.issuer                         # http://127.0.0.1:PORT
        provider.client_credentials_token("tasks:read", JWT_RESOURCE)     # a JWT whose aud is the resource
        provider.authorization_code_tokens(scope="tasks:read", resource=url)  # PKCE, the browser played
        provider.play_browser(authorization_url)  # for a real client's URL: where it would land, with the code
        provider.mint({"aud": url, "exp": 0})   # a hand-made token signed with the provider's current key
        provider.rotate_keys()                  # new signing keys first, the previous ones still published

The provider knows:

- the resources of ``resources`` (``DEFAULT_RESOURCES``: a JWT one (RS256), an ES256 one and an opaque
  one), and any ``http://127.0.0.1:<port>/...`` or ``http://localhost:<port>/...`` resource with the spec
  ``loopback_resource``: tests start their MCP servers on free ports, which no configuration can list in
  advance. A token's ``aud`` is the resource exactly as requested (RFC 8707); a request for an unknown
  resource fails with ``invalid_target``; a request without one gets ``default_resource``;
- the clients of ``clients`` (``DEFAULT_CLIENTS``, below), and any client that registers itself (open
  Dynamic Client Registration at ``registration_endpoint``);
- accounts: any. The interaction logs in ``default_account`` ("alice"), or the authorization request's
  ``login_hint``, and consents to everything asked, without a page. An authorization request without
  ``scope`` gets every scope of its resource (RFC 6749 §3.3 lets the server pick a default; oidc-provider
  alone would refuse it with ``access_denied``).

What oidc-provider does that a test may not expect:

- Version 9 serves the same metadata at both RFC 8414's ``/.well-known/oauth-authorization-server`` and
  OpenID discovery's ``/.well-known/openid-configuration`` (older versions had only the latter).
- ``offline_access`` is advertised but dropped from any request without ``prompt=consent`` (OpenID Core
  §11); refresh tokens are issued anyway, to every client allowed the ``refresh_token`` grant.
- JWT access tokens (``typ: at+jwt``, RFC 9068) carry ``iss``, ``sub`` (the account, or the client id for
  client credentials), ``aud`` (the resource), ``client_id``, ``scope``, ``iat``, ``exp`` and ``jti``; no ``nbf``.
  Scopes the resource does not list are dropped from the token silently, not refused.
- JWT access tokens cannot be introspected or revoked (``unsupported_token_type``): they live until ``exp``.
  Opaque ones can: a token's own client and the ``introspector`` clients (the resource server's) may.
- Its state is in memory: a new provider knows none of the previous one's clients or tokens.
  ``rotate_keys`` and ``add_resource`` reload the configuration in the same process and keep them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import parse_qs, quote, urlencode, urljoin, urlsplit

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from .cluster import wait_for
from .node import node22, require_packages
from .processes import free_port, stop

OIDC_DIR = Path(__file__).parent / "oidc"
PROVIDER_SCRIPT = OIDC_DIR / "provider.mjs"
SETUP_HINT = (
    "run bash scripts/test.sh (it fetches Node 22 and runs npm ci in tests/support/oidc), or just "
    "`npx -y -p node@22 -c 'cd tests/support/oidc && npm ci'`"
)
START_TIMEOUT_S = 15.0
HTTP_TIMEOUT_S = 10.0
#: The test-only route of provider.mjs that re-reads the configuration file (same process, same state).
RELOAD_PATH = "/__test__/reload"

Alg: TypeAlias = Literal["RS256", "ES256"]
TokenFormat: TypeAlias = Literal["jwt", "opaque"]
AuthMethod: TypeAlias = Literal["client_secret_basic", "client_secret_post", "none"]
PrivateKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

#: One signing key of each: RS256 (RSA 2048) signs by default, ES256 (P-256) for resources that ask for it.
ALGS: tuple[Alg, ...] = ("RS256", "ES256")


# --- What the provider is configured with -----------------------------------------------------------


@dataclass(frozen=True)
class ResourceSpec:
    """A protected resource (RFC 8707): the scopes it knows and the access tokens it gets."""

    scopes: tuple[str, ...] = ("tasks:read", "tasks:write")
    token_format: TokenFormat = "jwt"
    alg: Alg = "RS256"
    access_token_ttl_s: int = 3600

    def config(self) -> dict[str, Any]:
        return {
            "scopes": list(self.scopes),
            "accessTokenFormat": self.token_format,
            "alg": self.alg,
            "accessTokenTTL": self.access_token_ttl_s,
        }


@dataclass(frozen=True)
class ClientSpec:
    """A pre-registered client. ``client_secret`` None with ``auth_method="none"``: a public client.
    ``application_type="native"`` lets a loopback redirect URI take any port (RFC 8252 §7.3): register
    ``http://127.0.0.1/callback`` and use ``http://127.0.0.1:PORT/callback``."""

    client_id: str
    client_secret: str | None = None
    grant_types: tuple[str, ...] = ("client_credentials",)
    redirect_uris: tuple[str, ...] = ()
    auth_method: AuthMethod = "client_secret_basic"
    application_type: Literal["web", "native"] = "web"
    #: May introspect and revoke any client's tokens (a resource server's own credentials).
    introspector: bool = False

    def metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "client_id": self.client_id,
            "grant_types": list(self.grant_types),
            "response_types": ["code"] if "authorization_code" in self.grant_types else [],
            "redirect_uris": list(self.redirect_uris),
            "token_endpoint_auth_method": self.auth_method,
            "application_type": self.application_type,
        }
        if self.client_secret is not None:
            metadata["client_secret"] = self.client_secret
        return metadata


#: Resources with fixed names (not loopback, so the loopback rule never applies to them).
JWT_RESOURCE = "https://tasks.example.test/mcp"
ES256_RESOURCE = "https://es256.example.test/mcp"
OPAQUE_RESOURCE = "https://opaque.example.test/mcp"
DEFAULT_RESOURCES: Mapping[str, ResourceSpec] = {
    JWT_RESOURCE: ResourceSpec(),
    ES256_RESOURCE: ResourceSpec(alg="ES256"),
    OPAQUE_RESOURCE: ResourceSpec(token_format="opaque"),
}
#: What any http://127.0.0.1:<port>/... (or localhost) resource gets.
LOOPBACK_RESOURCE = ResourceSpec()

#: Port-less loopback callbacks: a native client may use them on any port.
LOOPBACK_CALLBACKS = ("http://127.0.0.1/callback", "http://localhost/callback")
#: A machine (client credentials, client_secret_basic).
MACHINE_CLIENT = ClientSpec("machine", "machine-secret-0123456789")
#: The same with client_secret_post.
MACHINE_POST_CLIENT = ClientSpec("machine-post", "machine-post-secret-0123456789", auth_method="client_secret_post")
#: The resource server's own credentials: introspects (and may revoke) every client's tokens.
RESOURCE_SERVER_CLIENT = ClientSpec("resource-server", "resource-server-secret-0123456789", introspector=True)
#: A public client (PKCE, no secret) with loopback callbacks, as an MCP client that ships pre-registered.
PUBLIC_CLIENT = ClientSpec(
    "mcp-public",
    None,
    grant_types=("authorization_code", "refresh_token"),
    redirect_uris=LOOPBACK_CALLBACKS,
    auth_method="none",
    application_type="native",
)
#: A confidential client of the authorization code flow (PKCE too: the provider requires it of everyone).
CONFIDENTIAL_CLIENT = ClientSpec(
    "mcp-confidential",
    "mcp-confidential-secret-0123456789",
    grant_types=("authorization_code", "refresh_token"),
    redirect_uris=LOOPBACK_CALLBACKS,
    application_type="native",
)
DEFAULT_CLIENTS: tuple[ClientSpec, ...] = (
    MACHINE_CLIENT,
    MACHINE_POST_CLIENT,
    RESOURCE_SERVER_CLIENT,
    PUBLIC_CLIENT,
    CONFIDENTIAL_CLIENT,
)


# --- Keys --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    """A private signing key the provider publishes (public part) in its JWKS and signs with."""

    kid: str
    alg: Alg
    private_key: PrivateKey

    def private_jwk(self) -> dict[str, Any]:
        if isinstance(self.private_key, rsa.RSAPrivateKey):
            jwk = RSAAlgorithm.to_jwk(self.private_key, as_dict=True)
        else:
            jwk = ECAlgorithm.to_jwk(self.private_key, as_dict=True)
        # alg and use on every key: oidc-provider then keeps the configured order when it picks one.
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


def generate_key(alg: Alg, kid: str | None = None) -> SigningKey:
    """A fresh key; not the provider's unless given to it (for tokens signed by an unknown key)."""
    private_key: PrivateKey
    if alg == "RS256":
        private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        private_key = ec.generate_private_key(ec.SECP256R1())
    return SigningKey(kid or f"{alg.lower()}-{secrets.token_hex(4)}", alg, private_key)


# --- Results and errors ------------------------------------------------------------------------------


class OAuthError(Exception):
    """An error answer of the provider (token, registration, introspection, revocation, authorization)."""

    def __init__(self, what: str, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.body = dict(body)
        self.error: str | None = body.get("error")
        super().__init__(f"{what}: HTTP {status} {json.dumps(self.body)}")


@dataclass(frozen=True)
class Tokens:
    """A token endpoint's answer."""

    access_token: str
    token_type: str
    expires_in: int
    scope: str | None
    refresh_token: str | None
    id_token: str | None
    raw: dict[str, Any]

    @classmethod
    def from_response(cls, body: dict[str, Any]) -> Tokens:
        return cls(
            access_token=body["access_token"],
            token_type=body["token_type"],
            expires_in=body["expires_in"],
            scope=body.get("scope"),
            refresh_token=body.get("refresh_token"),
            id_token=body.get("id_token"),
            raw=body,
        )


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of a PKCE verifier (RFC 7636)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _client_auth(client: ClientSpec) -> tuple[dict[str, str], dict[str, str]]:
    """The headers and form fields that authenticate ``client`` by its registered method."""
    if client.auth_method == "none":
        return {}, {"client_id": client.client_id}
    secret = client.client_secret or ""
    if client.auth_method == "client_secret_post":
        return {}, {"client_id": client.client_id, "client_secret": secret}
    # RFC 6749 §2.3.1: both parts are form-urlencoded before they are joined and base64-encoded.
    pair = f"{quote(client.client_id, safe='')}:{quote(secret, safe='')}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}, {}


def _body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"text": response.text[:2000]}
    return body if isinstance(body, dict) else {"body": body}


def _json(response: httpx.Response, what: str) -> dict[str, Any]:
    """The JSON object of a successful answer; :class:`OAuthError` for any other."""
    if not response.is_success:
        raise OAuthError(what, response.status_code, _body(response))
    return _body(response)


# --- The provider --------------------------------------------------------------------------------------


@dataclass
class OidcProvider:
    """One running oidc-provider; made by :func:`running_oidc_provider`."""

    directory: Path
    port: int
    resources: dict[str, ResourceSpec]
    loopback_resource: ResourceSpec | None
    clients: dict[str, ClientSpec]
    default_resource: str | None
    default_account: str
    #: Current keys first (one per alg), then the previous generation's (still published, never used).
    keys: list[SigningKey] = field(default_factory=list)
    #: The discovery document, read at start.
    metadata: dict[str, Any] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=HTTP_TIMEOUT_S))

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @property
    def jwks_url(self) -> str:
        url: str = self.metadata["jwks_uri"]
        return url

    @property
    def config_path(self) -> Path:
        return self.directory / "oidc-provider.json"

    @property
    def log_path(self) -> Path:
        return self.directory / "oidc-provider.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- Lifecycle ---

    def write_config(self) -> None:
        config = {
            "port": self.port,
            "jwks": {"keys": [key.private_jwk() for key in self.keys]},
            "clients": [client.metadata() for client in self.clients.values()],
            "introspectors": [client.client_id for client in self.clients.values() if client.introspector],
            "resources": {uri: spec.config() for uri, spec in self.resources.items()},
            "loopbackResource": self.loopback_resource.config() if self.loopback_resource else None,
            "defaultResource": self.default_resource,
            "defaultAccount": self.default_account,
        }
        self.config_path.write_text(json.dumps(config, indent=2))

    def start(self, node: Path, timeout_s: float = START_TIMEOUT_S) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.keys:
            self.keys = [generate_key(alg) for alg in ALGS]
        self.write_config()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(node), str(PROVIDER_SCRIPT), str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=OIDC_DIR,
            )
        self.metadata = wait_for(
            self._discovery, timeout_s, message=lambda: f"oidc-provider serving {self.discovery_url}\n{self.log()}"
        )

    def _discovery(self) -> dict[str, Any] | None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"oidc-provider exited with {self.process.returncode}:\n{self.log()}")
        try:
            response = self.http.get(self.discovery_url, timeout=0.5)
        except httpx.TransportError:
            return None
        return _json(response, "discovery") if response.status_code == 200 else None

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
        self.http.close()

    def reload(self) -> None:
        """Write the configuration and have the running process re-read it: same port, same state."""
        self.write_config()
        answer = _json(self.http.post(self.issuer + RELOAD_PATH), "reload")
        assert answer["kids"] == [key.kid for key in self.keys], (answer, self.log())

    def rotate_keys(self) -> list[str]:
        """New keys (one per alg) become the signing ones; the current ones stay published behind them
        (tokens they signed still verify); older ones are dropped. Returns the new kids. Affects every
        later user of this provider (the session's, for the ``oidc_provider`` fixture)."""
        new = [generate_key(alg) for alg in ALGS]
        self.keys = new + self.keys[: len(ALGS)]
        self.reload()
        return [key.kid for key in new]

    def add_resource(self, uri: str, spec: ResourceSpec) -> None:
        """Make ``uri`` a known resource with ``spec`` (e.g. an MCP server on a loopback port that wants
        opaque tokens); stays for every later user of this provider."""
        self.resources[uri] = spec
        self.reload()

    # --- Keys and hand-made tokens ---

    def signing_key(self, alg: Alg = "RS256") -> SigningKey:
        """The key the provider signs ``alg`` tokens with now (the first one of that alg)."""
        return next(key for key in self.keys if key.alg == alg)

    def key(self, kid: str) -> SigningKey:
        return next(key for key in self.keys if key.kid == kid)

    def public_jwks(self) -> dict[str, Any]:
        return _json(self.http.get(self.jwks_url), "jwks")

    def mint(
        self,
        claims: Mapping[str, Any],
        *,
        alg: Alg = "RS256",
        kid: str | None = None,
        key: SigningKey | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> str:
        """A JWT access token made by hand, as the provider would sign it: the current ``alg`` key, or
        the published key ``kid``, or any ``key`` (e.g. :func:`generate_key`'s, unknown to the provider).
        ``iss``, ``iat``, ``exp`` (five minutes on) and ``jti`` are filled in; ``claims`` override them,
        and a claim given as None is left out (a token without ``exp``, say)."""
        signer = key or (self.key(kid) if kid else self.signing_key(alg))
        now = int(time.time())
        payload = {"iss": self.issuer, "iat": now, "exp": now + 300, "jti": secrets.token_urlsafe(12), **claims}
        payload = {name: value for name, value in payload.items() if value is not None}
        header = {"kid": signer.kid, "typ": "at+jwt", **(headers or {})}
        return jwt.encode(payload, signer.private_key, algorithm=signer.alg, headers=header)

    # --- Endpoints ---

    def _post(self, endpoint: str, client: ClientSpec, form: Mapping[str, str | None]) -> httpx.Response:
        """POST ``form`` to the discovered ``endpoint`` as ``client``; fields given as None are left out."""
        headers, auth_form = _client_auth(client)
        data = {name: value for name, value in form.items() if value is not None}
        return self.http.post(self.metadata[endpoint], data={**data, **auth_form}, headers=headers)

    def token_request(self, client: ClientSpec, form: Mapping[str, str | None]) -> Tokens:
        """POST to the token endpoint as ``client``; fields given as None are left out."""
        response = self._post("token_endpoint", client, form)
        return Tokens.from_response(_json(response, "token request"))

    def client_credentials_token(self, scope: str, resource: str | None, *, client: ClientSpec = MACHINE_CLIENT) -> str:
        """An access token for ``client`` (client credentials grant); ``resource`` None omits it."""
        form = {"grant_type": "client_credentials", "scope": scope, "resource": resource}
        return self.token_request(client, form).access_token

    def authorization_url(
        self,
        *,
        client: ClientSpec,
        redirect_uri: str,
        code_challenge: str,
        state: str,
        scope: str | None = None,
        resource: str | None = None,
        login_hint: str | None = None,
    ) -> str:
        params = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": redirect_uri,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
            "state": state,
            "scope": scope,
            "resource": resource,
            "login_hint": login_hint,
        }
        query = urlencode({name: value for name, value in params.items() if value is not None})
        return f"{self.metadata['authorization_endpoint']}?{query}"

    def play_browser(self, authorization_url: str, *, max_redirects: int = 10) -> str:
        """Play a fresh browser (its own cookies) from ``authorization_url`` through the provider's
        redirects (the login and consent need no page); returns the URL it would then open on the client:
        the redirect URI with ``code``, ``state`` and ``iss`` (or ``error``). It is not opened."""
        with httpx.Client(timeout=HTTP_TIMEOUT_S, follow_redirects=False) as browser:
            url = authorization_url
            for _ in range(max_redirects):
                response = browser.get(url)
                if not response.is_redirect:
                    raise OAuthError(f"GET {url} (no redirect)", response.status_code, _body(response))
                url = urljoin(url, response.headers["location"])
                if not url.startswith(self.issuer + "/"):
                    return url
        raise RuntimeError(f"more than {max_redirects} redirects inside the provider, last {url}")

    def authorization_code_tokens(
        self,
        *,
        scope: str | None,
        resource: str | None,
        client: ClientSpec = PUBLIC_CLIENT,
        login_hint: str | None = None,
        redirect_uri: str | None = None,
    ) -> Tokens:
        """The authorization code flow end to end, with PKCE S256, as an MCP client does it: the browser
        played, the response's ``state`` and ``iss`` (RFC 9207) checked, the code exchanged with the same
        ``resource``. The redirect URI is on a random loopback port (the port-less callback registered)."""
        verifier = secrets.token_urlsafe(48)
        state = secrets.token_urlsafe(16)
        redirect = redirect_uri or f"http://127.0.0.1:{20000 + secrets.randbelow(40000)}/callback"
        url = self.authorization_url(
            client=client,
            redirect_uri=redirect,
            code_challenge=pkce_challenge(verifier),
            state=state,
            scope=scope,
            resource=resource,
            login_hint=login_hint,
        )
        landed = self.play_browser(url)
        answer = {name: values[0] for name, values in parse_qs(urlsplit(landed).query).items()}
        if "error" in answer:
            raise OAuthError(f"authorization response {landed}", 302, answer)
        if answer.get("state") != state or answer.get("iss") != self.issuer:
            raise RuntimeError(f"authorization response with the wrong state or iss: {landed}")
        form = {
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": redirect,
            "code_verifier": verifier,
            "resource": resource,
        }
        return self.token_request(client, form)

    def refresh(self, refresh_token: str, *, client: ClientSpec = PUBLIC_CLIENT, resource: str | None = None) -> Tokens:
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "resource": resource}
        return self.token_request(client, form)

    def register_client(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Dynamic Client Registration (RFC 7591), open: the registered client's metadata and secret."""
        return _json(self.http.post(self.metadata["registration_endpoint"], json=dict(metadata)), "registration")

    def introspect(self, token: str, *, client: ClientSpec = RESOURCE_SERVER_CLIENT) -> dict[str, Any]:
        """RFC 7662, as the resource server. Opaque tokens only: a JWT access token is refused
        (``unsupported_token_type``, raised as :class:`OAuthError`)."""
        return _json(self._post("introspection_endpoint", client, {"token": token}), "introspection")

    def revoke(
        self, token: str, *, client: ClientSpec = RESOURCE_SERVER_CLIENT, token_type_hint: str | None = None
    ) -> None:
        """RFC 7009; the resource server's client may revoke any token. Opaque ones only, as introspection.
        Revoking a refresh token revokes its whole grant (its access tokens too)."""
        form = {"token": token, "token_type_hint": token_type_hint}
        _json(self._post("revocation_endpoint", client, form), "revocation")


def pinned_packages() -> dict[str, str]:
    """The exact versions ``oidc/package.json`` pins (what ``npm ci`` must have installed)."""
    dependencies: dict[str, str] = json.loads((OIDC_DIR / "package.json").read_text())["dependencies"]
    return dependencies


@contextlib.contextmanager
def running_oidc_provider(
    directory: Path,
    *,
    resources: Mapping[str, ResourceSpec] = DEFAULT_RESOURCES,
    loopback_resource: ResourceSpec | None = LOOPBACK_RESOURCE,
    clients: tuple[ClientSpec, ...] = DEFAULT_CLIENTS,
    default_resource: str | None = JWT_RESOURCE,
    default_account: str = "alice",
    timeout_s: float = START_TIMEOUT_S,
) -> Iterator[OidcProvider]:
    """oidc-provider on a free loopback port, its configuration, keys and log in ``directory``."""
    require_packages(OIDC_DIR, pinned_packages(), SETUP_HINT)
    provider = OidcProvider(
        directory=directory,
        port=free_port(),
        resources=dict(resources),
        loopback_resource=loopback_resource,
        clients={client.client_id: client for client in clients},
        default_resource=default_resource,
        default_account=default_account,
    )
    try:
        provider.start(node22(SETUP_HINT), timeout_s)
        yield provider
    finally:
        provider.stop()
