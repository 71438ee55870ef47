"""The OAuth helper end to end against ``oauth_world``: what crossed the wire when a client met a
protected MCP server (discovery, registration, PKCE S256, ``resource``, scopes, ``iss``, refresh,
step-up and its bound, client credentials, logout), and that no token or secret leaks."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ext_tasks.client import Client
from ext_tasks.client.oauth import (
    AuthorizationError,
    IssuerMismatch,
    LoginRequired,
    MemoryStore,
    OAuth,
    ResourceMismatch,
    TokenStore,
    TooManyStepUps,
)
from tests.unit.oauth_world import ISSUER, MCP_URL, PRM_URL, World, s256

pytestmark = pytest.mark.anyio


def _oauth(world: World, store: TokenStore | None = None, **options: object) -> OAuth:
    settings: dict[str, object] = {"open_url": world.browser, "callback_timeout_s": 5.0, **options}
    return OAuth(MCP_URL, store=store, transport=world.transport(), **settings)  # type: ignore[arg-type]


@asynccontextmanager
async def _client(world: World, oauth: OAuth) -> AsyncIterator[Client]:
    http = httpx.AsyncClient(transport=world.transport(), auth=oauth)
    async with oauth, http, Client(MCP_URL, http=http) as client:
        yield client


async def _call(client: Client) -> None:
    await client.request("tools/list")
    await client.request("tools/call", {"name": "echo", "arguments": {}})


async def test_a_401_runs_discovery_registration_and_a_pkce_authorization() -> None:
    world = World()
    async with _client(world, _oauth(world)) as client:
        await _call(client)
    urls = [str(request.url) for request in world.requests]
    assert urls[:3] == [MCP_URL, PRM_URL, f"{ISSUER}/.well-known/oauth-authorization-server"]
    assert world.registrations[0]["application_type"] == "native"
    assert world.registrations[0]["grant_types"] == ["authorization_code", "refresh_token"]
    [authorization] = world.authorizations
    assert authorization["code_challenge_method"] == "S256"
    assert authorization["resource"] == MCP_URL
    assert authorization["redirect_uri"].startswith("http://127.0.0.1:")
    # The challenge's scope, and offline_access because the authorization server offers it.
    assert authorization["scope"] == "mcp:read offline_access"
    [(token_form, _)] = world.token_requests
    assert token_form["grant_type"] == "authorization_code"
    assert token_form["resource"] == MCP_URL
    assert s256(token_form["code_verifier"]) == authorization["code_challenge"]


@pytest.mark.parametrize(
    ("challenge_scope", "prm_scopes", "as_scopes", "expected"),
    [
        ("mcp:read", ["a", "b"], None, "mcp:read"),
        (None, ["a", "b"], None, "a b"),
        (None, None, None, None),
        (None, None, ["offline_access"], None),  # nothing else asked: still no scope parameter
        ("mcp:read", None, ["mcp:read"], "mcp:read"),  # offline_access not offered: not asked
    ],
)
async def test_scope_selection_follows_the_spec(
    challenge_scope: str | None, prm_scopes: list[str] | None, as_scopes: list[str] | None, expected: str | None
) -> None:
    world = World(challenge_scope=challenge_scope, prm_scopes=prm_scopes, as_scopes=as_scopes)
    async with _client(world, _oauth(world)) as client:
        await client.request("tools/list")
    assert world.authorizations[0].get("scope") == expected


async def test_stored_tokens_serve_the_next_process_without_a_login() -> None:
    world, store = World(), MemoryStore()
    async with _client(world, _oauth(world, store)) as client:
        await _call(client)
    async with _client(world, _oauth(world, store, interactive=False)) as client:
        await _call(client)
    assert len(world.authorizations) == 1
    assert len(world.registrations) == 1


def _near_its_end(oauth: OAuth) -> None:
    """The token held now has 30 s left of its hour: inside the 60 s margin."""
    tokens = oauth._flow.tokens
    assert tokens is not None
    now = time.time()
    oauth._flow.tokens = dataclasses.replace(tokens, issued_at=now - 3570, expires_at=now + 30)


async def test_a_token_about_to_expire_is_refreshed_first() -> None:
    world = World()
    oauth = _oauth(world)
    async with _client(world, oauth) as client:
        await _call(client)
        _near_its_end(oauth)
        await _call(client)
    grants = [form["grant_type"] for form, _ in world.token_requests]
    assert grants == ["authorization_code", "refresh_token"]
    refresh = world.token_requests[1][0]
    assert refresh["resource"] == MCP_URL
    assert len(world.authorizations) == 1


async def test_a_short_lived_token_is_not_refreshed_before_every_request() -> None:
    world = World(expires_in=30)  # shorter than the 60 s margin
    async with _client(world, _oauth(world)) as client:
        for _ in range(3):
            await _call(client)
    grants = [form["grant_type"] for form, _ in world.token_requests]
    assert grants == ["authorization_code"]
    assert len(world.authorizations) == 1


async def test_a_401_with_a_refresh_token_refreshes_instead_of_asking_the_person() -> None:
    world, store = World(), MemoryStore()
    async with _client(world, _oauth(world, store)) as client:
        await client.request("tools/list")
    world.tokens.clear()  # the server forgot every access token
    async with _client(world, _oauth(world, store, interactive=False)) as client:
        await client.request("tools/list")
    assert [form["grant_type"] for form, _ in world.token_requests] == ["authorization_code", "refresh_token"]


async def test_without_a_refresh_token_a_non_interactive_client_needs_a_login() -> None:
    world = World(issue_refresh=False)
    with pytest.raises(LoginRequired, match="ext-tasks login"):
        async with _client(world, _oauth(world, interactive=False)) as client:
            await client.request("tools/list")
    assert world.authorizations == []


async def test_step_up_asks_for_the_union_of_held_and_challenged_scopes() -> None:
    world = World(call_scope="mcp:write")
    async with _client(world, _oauth(world)) as client:
        await _call(client)
    assert [auth["scope"] for auth in world.authorizations] == [
        "mcp:read offline_access",
        "mcp:read offline_access mcp:write",
    ]


async def test_step_up_gives_up_after_max_step_ups() -> None:
    world = World(always_403=True)
    with pytest.raises(TooManyStepUps) as raised:
        async with _client(world, _oauth(world, max_step_ups=2)) as client:
            await client.request("tools/list")
    assert raised.value.attempts == 2
    assert len(world.authorizations) == 3  # the first authorization and two step-ups


@pytest.mark.parametrize(
    ("iss_supported", "iss_in_redirect"),
    [(True, "omit"), (True, "https://evil.example"), (False, "https://evil.example"), (True, ISSUER + "/")],
)
async def test_a_wrong_or_missing_iss_stops_before_the_token_request(iss_supported: bool, iss_in_redirect: str) -> None:
    world = World(iss_supported=iss_supported, iss_in_redirect=iss_in_redirect)
    with pytest.raises(IssuerMismatch):
        async with _client(world, _oauth(world)) as client:
            await client.request("tools/list")
    assert world.authorizations and world.token_requests == []


async def test_no_iss_is_fine_where_none_is_advertised() -> None:
    world = World(iss_supported=False, iss_in_redirect="omit")
    async with _client(world, _oauth(world)) as client:
        await client.request("tools/list")
    assert len(world.token_requests) == 1


async def test_metadata_naming_another_issuer_is_not_used() -> None:
    world = World(metadata_issuer="https://attacker.example")
    with pytest.raises(IssuerMismatch, match="attacker"):
        async with _client(world, _oauth(world)) as client:
            await client.request("tools/list")
    assert world.registrations == [] and world.authorizations == []


async def test_a_resource_mismatch_names_both_urls() -> None:
    world = World(prm_resource="https://evil.example/mcp")
    with pytest.raises(ResourceMismatch) as raised:
        async with _client(world, _oauth(world)) as client:
            await client.request("tools/list")
    assert "https://evil.example/mcp" in str(raised.value) and MCP_URL in str(raised.value)
    assert world.authorizations == []


async def test_client_credentials_with_a_secret_use_basic_and_no_browser() -> None:
    world = World(auth_methods=["client_secret_basic"])

    def no_browser(url: str) -> None:
        raise AssertionError("a machine client opened a browser")

    oauth = _oauth(world, client_id="machine", client_secret="s3cret", client_credentials=True, open_url=no_browser)
    async with _client(world, oauth) as client:
        await _call(client)
    [(form, authorization)] = world.token_requests
    assert form["grant_type"] == "client_credentials" and form["resource"] == MCP_URL
    assert authorization is not None and authorization.startswith("Basic ")


async def test_client_credentials_with_an_es256_key_send_an_assertion_for_the_issuer() -> None:
    world = World(auth_methods=["private_key_jwt"])
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    oauth = _oauth(world, client_id="machine", private_key=pem.decode(), signing_alg="ES256", client_credentials=True)
    async with _client(world, oauth) as client:
        await client.request("tools/list")
    [(form, _)] = world.token_requests
    assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    claims = jwt.decode(form["client_assertion"], key.public_key(), algorithms=["ES256"], audience=ISSUER)
    assert claims["iss"] == claims["sub"] == "machine"


async def test_logout_revokes_both_tokens_and_forgets_them() -> None:
    world, store = World(), MemoryStore()
    async with _client(world, _oauth(world, store)) as client:
        await client.request("tools/list")
    async with _oauth(world, store) as oauth:
        assert await oauth.logout() is True
    assert [hint for _, hint in world.revoked] == ["refresh_token", "access_token"]
    assert await store.load(MCP_URL) is None
    with pytest.raises(LoginRequired):
        async with _client(world, _oauth(world, store, interactive=False)) as client:
            await client.request("tools/list")


async def test_login_authorizes_without_an_mcp_request() -> None:
    world, store = World(), MemoryStore()
    async with _oauth(world, store) as oauth:
        await oauth.login()
    assert len(world.authorizations) == 1
    assert [json.loads(r.content)["method"] for r in world.requests if str(r.url) == MCP_URL] == ["server/discover"]
    async with _client(world, _oauth(world, store, interactive=False)) as client:
        await client.request("tools/list")


async def test_no_token_or_secret_in_reprs_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    world, store = World(expires_in=30), MemoryStore()
    oauth = _oauth(world, store, client_id="pre", client_secret="pre-secret")
    async with _client(world, oauth) as client:
        await _call(client)
    world.always_403 = True
    with pytest.raises(AuthorizationError) as raised:
        async with _client(world, _oauth(world, store, client_id="pre", client_secret="pre-secret")) as client:
            await client.request("tools/list")
    entry = await store.load(f"{MCP_URL} {ISSUER}")
    assert entry is not None
    secrets_held: list[str] = ["pre-secret", entry["tokens"]["access_token"], entry["tokens"]["refresh_token"]]
    shown = [repr(oauth), repr(store), str(raised.value), caplog.text]
    assert [[secret for secret in secrets_held if secret in text] for text in shown] == [[], [], [], []]


async def test_dpop_binds_the_tokens_and_proves_each_request_with_the_servers_nonces() -> None:
    world = World(dpop=True, as_nonce="as-nonce", rs_nonce="rs-nonce")
    oauth = _oauth(world)
    async with _client(world, oauth) as client:
        await _call(client)
        _near_its_end(oauth)
        await _call(client)
    token_proofs = [claims for where, claims in world.proofs if where == "token"]
    mcp_proofs = [claims for where, claims in world.proofs if where == "mcp"]
    # The code exchange first without the nonce, then with it; the refresh with the nonce it kept.
    assert [claims.get("nonce") for claims in token_proofs] == [None, "as-nonce", "as-nonce"]
    assert {(claims["htm"], claims["htu"]) for claims in token_proofs} == {("POST", f"{ISSUER}/token")}
    assert [form["grant_type"] for form, _ in world.token_requests] == [
        "authorization_code",
        "authorization_code",
        "refresh_token",
    ]
    assert mcp_proofs[0].get("nonce") is None and all(claims["nonce"] == "rs-nonce" for claims in mcp_proofs[1:])
    jtis = [claims["jti"] for _, claims in world.proofs]
    assert len(set(jtis)) == len(jtis)  # a fresh proof every time
    served = [
        r for r in world.requests if str(r.url) == MCP_URL and r.headers.get("authorization", "").startswith("DPoP ")
    ]
    assert len(served) >= 3


@pytest.mark.parametrize("world", [World(), World(dpop=True, rs_scheme="Bearer")], ids=["no-dpop", "bearer-only-mcp"])
async def test_without_dpop_on_both_sides_tokens_stay_bearer(world: World) -> None:
    async with _client(world, _oauth(world)) as client:
        await client.request("tools/list")
    assert world.proofs == [] and world.dpop_tokens == set()


async def test_a_new_login_after_expiry_keeps_the_scopes_held() -> None:
    world, store = World(call_scope="mcp:write", issue_refresh=False), MemoryStore()
    async with _client(world, _oauth(world, store)) as client:
        await _call(client)  # logged in for mcp:read, stepped up to mcp:write
    world.tokens.clear()
    async with _client(world, _oauth(world, store)) as client:
        await client.request("tools/list")
    assert world.authorizations[-1]["scope"] == "mcp:read offline_access mcp:write"
