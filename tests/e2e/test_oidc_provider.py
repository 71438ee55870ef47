"""The test authorization server itself (``tests.support.oidc_provider``: oidc-provider on Node 22) does
what the authorization tests rely on: discovery, client credentials tokens for a resource (JWT, verified
with its JWKS, or opaque, introspected and revoked), the authorization code flow with PKCE played without
a human, Dynamic Client Registration, and key rotation.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest

from tests.support.oidc_provider import (
    CONFIDENTIAL_CLIENT,
    ES256_RESOURCE,
    JWT_RESOURCE,
    MACHINE_CLIENT,
    MACHINE_POST_CLIENT,
    OPAQUE_RESOURCE,
    PUBLIC_CLIENT,
    ClientSpec,
    OAuthError,
    OidcProvider,
    pkce_challenge,
)

pytestmark = pytest.mark.e2e

#: An MCP server on loopback that no configuration lists: the provider's loopback rule covers it.
LOOPBACK_MCP = "http://127.0.0.1:8931/mcp"


def verify(provider: OidcProvider, token: str, audience: str) -> dict[str, Any]:
    """What a resource server does with a JWT access token: the key from the JWKS, then the checks."""
    key = jwt.PyJWKClient(provider.jwks_url, cache_keys=False).get_signing_key_from_jwt(token)
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=["RS256", "ES256"],
        audience=audience,
        issuer=provider.issuer,
        options={"require": ["exp", "iat", "sub", "aud", "iss"]},
    )
    return claims


def test_discovery_advertises_what_mcp_clients_need(oidc_provider: OidcProvider) -> None:
    metadata = httpx.get(oidc_provider.discovery_url).json()
    issuer = oidc_provider.issuer
    assert metadata["issuer"] == issuer
    assert metadata["token_endpoint"] == f"{issuer}/token"
    assert metadata["jwks_uri"] == f"{issuer}/jwks"
    assert {"registration_endpoint", "introspection_endpoint", "revocation_endpoint"} <= metadata.keys()
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["authorization_response_iss_parameter_supported"] is True
    assert metadata["response_types_supported"] == ["code"]
    assert {"authorization_code", "refresh_token", "client_credentials"} <= set(metadata["grant_types_supported"])
    assert {"client_secret_basic", "client_secret_post", "none"} <= set(
        metadata["token_endpoint_auth_methods_supported"]
    )
    assert {"tasks:read", "tasks:write", "offline_access"} <= set(metadata["scopes_supported"])
    # oidc-provider 9 serves the RFC 8414 path too, with the same document.
    assert httpx.get(f"{issuer}/.well-known/oauth-authorization-server").json() == metadata


@pytest.mark.parametrize("client", [MACHINE_CLIENT, MACHINE_POST_CLIENT], ids=lambda client: client.auth_method)
def test_client_credentials_jwt_is_for_the_resource(oidc_provider: OidcProvider, client: ClientSpec) -> None:
    token = oidc_provider.client_credentials_token("tasks:read tasks:unknown", JWT_RESOURCE, client=client)
    header = jwt.get_unverified_header(token)
    assert header["typ"] == "at+jwt"
    assert header["kid"] == oidc_provider.signing_key("RS256").kid
    claims = verify(oidc_provider, token, JWT_RESOURCE)
    # A scope the resource does not know is dropped, not refused.
    assert claims["scope"] == "tasks:read"
    assert claims["client_id"] == claims["sub"] == client.client_id
    assert claims["aud"] == JWT_RESOURCE
    with pytest.raises(jwt.InvalidAudienceError):
        verify(oidc_provider, token, OPAQUE_RESOURCE)


def test_resource_choice_default_loopback_es256_and_unknown(oidc_provider: OidcProvider) -> None:
    assert verify(oidc_provider, oidc_provider.client_credentials_token("tasks:read", None), JWT_RESOURCE)
    assert verify(oidc_provider, oidc_provider.client_credentials_token("tasks:read", LOOPBACK_MCP), LOOPBACK_MCP)
    es256 = oidc_provider.client_credentials_token("tasks:write", ES256_RESOURCE)
    assert jwt.get_unverified_header(es256)["kid"] == oidc_provider.signing_key("ES256").kid
    assert verify(oidc_provider, es256, ES256_RESOURCE)["scope"] == "tasks:write"
    with pytest.raises(OAuthError) as refused:
        oidc_provider.client_credentials_token("tasks:read", "https://unknown.example.test/mcp")
    assert refused.value.error == "invalid_target"


def test_opaque_token_introspected_then_revoked(oidc_provider: OidcProvider) -> None:
    token = oidc_provider.client_credentials_token("tasks:read", OPAQUE_RESOURCE)
    assert token.count(".") == 0
    # The resource server's client introspects a token issued to another client.
    answer = oidc_provider.introspect(token)
    assert answer["active"] is True
    assert answer["aud"] == OPAQUE_RESOURCE
    assert answer["client_id"] == MACHINE_CLIENT.client_id
    assert answer["scope"] == "tasks:read"
    assert answer["iss"] == oidc_provider.issuer
    # Any other client sees nothing of it.
    assert oidc_provider.introspect(token, client=MACHINE_POST_CLIENT) == {"active": False}
    oidc_provider.revoke(token)
    assert oidc_provider.introspect(token) == {"active": False}
    # JWT access tokens cannot be introspected (they are checked with the JWKS).
    with pytest.raises(OAuthError) as refused:
        oidc_provider.introspect(oidc_provider.client_credentials_token("tasks:read", JWT_RESOURCE))
    assert refused.value.error == "unsupported_token_type"


def test_authorization_code_with_pkce_and_refresh(oidc_provider: OidcProvider) -> None:
    tokens = oidc_provider.authorization_code_tokens(
        scope="tasks:read tasks:write offline_access", resource=LOOPBACK_MCP
    )
    claims = verify(oidc_provider, tokens.access_token, LOOPBACK_MCP)
    assert claims["sub"] == "alice"
    assert claims["client_id"] == PUBLIC_CLIENT.client_id
    assert claims["scope"] == "tasks:read tasks:write"
    assert tokens.refresh_token is not None
    # The refresh needs no resource: the granted one is used; a public client's refresh token rotates.
    refreshed = oidc_provider.refresh(tokens.refresh_token)
    assert verify(oidc_provider, refreshed.access_token, LOOPBACK_MCP)["sub"] == "alice"
    assert refreshed.refresh_token not in (None, tokens.refresh_token)
    # A confidential client, another account (login_hint), an OpenID scope with its ID token.
    other = oidc_provider.authorization_code_tokens(
        scope="openid tasks:read", resource=JWT_RESOURCE, client=CONFIDENTIAL_CLIENT, login_hint="bob"
    )
    assert verify(oidc_provider, other.access_token, JWT_RESOURCE)["sub"] == "bob"
    assert other.id_token is not None


def test_play_browser_stops_at_the_client_redirect(oidc_provider: OidcProvider) -> None:
    """What a test does with a real client: take its authorization URL, land where its callback would.
    Without ``scope`` (as an MCP client that found none to ask for), every scope of the resource."""
    redirect_uri = "http://127.0.0.1:45678/callback"  # registered port-less: any loopback port will do
    verifier = "v" * 50
    url = oidc_provider.authorization_url(
        client=PUBLIC_CLIENT,
        redirect_uri=redirect_uri,
        code_challenge=pkce_challenge(verifier),
        state="xyz",
        resource=LOOPBACK_MCP,
    )
    landed = oidc_provider.play_browser(url)
    assert landed.startswith(redirect_uri + "?")
    answer = {name: values[0] for name, values in parse_qs(urlsplit(landed).query).items()}
    assert answer["state"] == "xyz"
    assert answer["iss"] == oidc_provider.issuer  # RFC 9207
    form = {"grant_type": "authorization_code", "code": answer["code"], "redirect_uri": redirect_uri}
    tokens = oidc_provider.token_request(PUBLIC_CLIENT, {**form, "code_verifier": verifier})
    assert verify(oidc_provider, tokens.access_token, LOOPBACK_MCP)["scope"] == "tasks:read tasks:write"


def test_dynamic_client_registration(oidc_provider: OidcProvider) -> None:
    """As an MCP client registers: public, native, its callback on the port it listens on, its scopes."""
    registered = oidc_provider.register_client(
        {
            "client_name": "an MCP client",
            "redirect_uris": ["http://127.0.0.1:40001/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
            "scope": "tasks:read offline_access",
        }
    )
    client = ClientSpec(registered["client_id"], None, grant_types=("authorization_code",), auth_method="none")
    # A native client's loopback redirect may take another port (RFC 8252 §7.3).
    tokens = oidc_provider.authorization_code_tokens(
        scope="tasks:read", resource=LOOPBACK_MCP, client=client, redirect_uri="http://127.0.0.1:40002/callback"
    )
    assert verify(oidc_provider, tokens.access_token, LOOPBACK_MCP)["client_id"] == registered["client_id"]


def test_key_rotation(oidc_provider: OidcProvider) -> None:
    before = oidc_provider.client_credentials_token("tasks:read", JWT_RESOURCE)
    old_kid = oidc_provider.signing_key().kid
    opaque = oidc_provider.client_credentials_token("tasks:read", OPAQUE_RESOURCE)

    new_kids = oidc_provider.rotate_keys()

    assert oidc_provider.signing_key().kid == new_kids[0] != old_kid
    published = [key["kid"] for key in oidc_provider.public_jwks()["keys"]]
    assert published[: len(new_kids)] == new_kids
    assert old_kid in published
    after = oidc_provider.client_credentials_token("tasks:read", JWT_RESOURCE)
    assert jwt.get_unverified_header(after)["kid"] == new_kids[0]
    assert verify(oidc_provider, after, JWT_RESOURCE)
    assert verify(oidc_provider, before, JWT_RESOURCE)  # the old key is still published
    # The provider reloaded in place: what it issued before is still known.
    assert oidc_provider.introspect(opaque)["active"] is True
    # Hand-made tokens: the current key, or an old one by kid.
    minted = oidc_provider.mint({"sub": "carol", "aud": LOOPBACK_MCP, "client_id": "hand", "scope": "tasks:read"})
    assert jwt.get_unverified_header(minted)["kid"] == new_kids[0]
    assert verify(oidc_provider, minted, LOOPBACK_MCP)["sub"] == "carol"
    expired = oidc_provider.mint({"sub": "carol", "aud": LOOPBACK_MCP, "exp": 1}, kid=old_kid)
    with pytest.raises(jwt.ExpiredSignatureError):
        verify(oidc_provider, expired, LOOPBACK_MCP)
