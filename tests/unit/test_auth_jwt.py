"""JWT access tokens, verified against a real authorization server on loopback (``AuthServer``): what
is accepted, what is refused and how, and that a refusal never touched a key it should not have."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from ext_tasks.auth import InsufficientScope, Principal, Unauthenticated
from ext_tasks.auth.oauth import MAX_TOKEN_CHARS, OAuthAuthenticator
from ext_tasks.options import AuthOptions
from tests.support.auth_server import JWKS_PATH, RESOURCE, AuthServer, ManualClock, authenticate, bearer, ec_key

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[AuthServer]:
    async with AuthServer() as running:
        yield running


def build(*issuers: str, tokens: dict[str, str] | None = None, **overrides: Any) -> OAuthAuthenticator:
    options = AuthOptions(auth_issuers=issuers, auth_resource=RESOURCE, auth_fetch_timeout_s=2.0, **overrides)
    return OAuthAuthenticator.from_options(options, tokens)


@pytest.fixture
async def authenticator(server: AuthServer) -> AsyncIterator[OAuthAuthenticator]:
    built = build(server.issuer)
    yield built
    await built.aclose()


def hs256(claims: dict[str, Any], secret: bytes, header: dict[str, Any]) -> str:
    """An HS256 JWS made by hand (PyJWT itself refuses a PEM key as an HMAC secret)."""
    signing_input = b".".join(jwt.utils.base64url_encode(json.dumps(part).encode()) for part in (header, claims))
    signature = hmac.new(secret, signing_input, hashlib.sha256).digest()
    return (signing_input + b"." + jwt.utils.base64url_encode(signature)).decode()


async def refusal(authenticator: OAuthAuthenticator, token: str) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as caught:
        await authenticate(authenticator, token)
    assert caught.value.error == "invalid_token"
    return caught.value


# --- accepted ---------------------------------------------------------------------------------------


async def test_a_valid_token_gives_the_principal_of_its_issuer_and_subject(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    token = server.issue(aud=RESOURCE, scope="tools:read tasks:write", azp="desktop-app", tenant="t1")

    principal = await authenticate(authenticator, token)

    assert principal.id == f"{server.issuer}#alice"
    assert (principal.issuer, principal.subject, principal.client_id) == (server.issuer, "alice", "desktop-app")
    assert principal.scopes == frozenset({"tools:read", "tasks:write"})
    assert principal.claims["tenant"] == "t1"
    assert not principal.anonymous
    assert principal.lacks(["tools:read", "admin", "admin"]) == ["admin"]
    with pytest.raises(TypeError):
        principal.claims["tenant"] = "t2"  # type: ignore[index]


async def test_an_ec_token_and_an_audience_list_with_uppercase_host_are_accepted(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    token = server.issue(key=server.keys[1], aud=["https://other.example", "HTTPS://MCP.EXAMPLE.COM/mcp"])

    principal = await authenticate(authenticator, token)

    assert principal.subject == "alice"
    assert principal.scopes == frozenset()


async def test_a_configured_extra_audience_is_accepted_exactly(server: AuthServer) -> None:
    """Entra ID's v2 tokens name the API's application id, not the resource: configured, it is accepted."""
    app_id = "6e74172b-be56-4843-9ff4-e66a39bb12e3"
    async with aclosing(build(server.issuer, auth_audiences=(app_id,))) as authenticator:
        principal = await authenticate(authenticator, server.issue(aud=app_id))
        error = await refusal(authenticator, server.issue(aud=app_id.upper()))
    assert principal.subject == "alice"
    assert "another resource" in error.challenge


async def test_a_client_credentials_token_without_sub_is_its_client(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    token = server.issue(aud=RESOURCE, sub=None, client_id="billing-bot", scp=["tools:read"])

    principal = await authenticate(authenticator, token)

    assert (principal.id, principal.client_id) == (f"{server.issuer}#billing-bot", "billing-bot")
    assert principal.scopes == frozenset({"tools:read"})


async def test_a_token_seen_before_is_answered_from_the_cache_without_a_signature_check(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    token = server.issue(aud=RESOURCE)
    first = await authenticate(authenticator, token)

    again = authenticator.authenticate(bearer(token))

    assert isinstance(again, Principal)  # no coroutine at all
    assert again == first
    assert authenticator.verifications == 1
    assert authenticator.cache.hits == 1
    assert server.hits[JWKS_PATH] == 1


async def test_a_cached_token_is_verified_again_once_the_keys_age_is_reached(server: AuthServer) -> None:
    clock = ManualClock(time.time())
    options = AuthOptions(auth_issuers=(server.issuer,), auth_resource=RESOURCE, auth_keys_max_age_s=600.0)
    async with aclosing(OAuthAuthenticator.from_options(options, now=clock)) as authenticator:
        token = server.issue(aud=RESOURCE, lifetime_s=3600)
        await authenticate(authenticator, token)
        clock.now += 599
        assert isinstance(authenticator.authenticate(bearer(token)), Principal)
        clock.now += 2
        await authenticate(authenticator, token)
    assert authenticator.verifications == 2


async def test_the_cache_is_bounded_and_forgets_the_least_recently_used(server: AuthServer) -> None:
    async with aclosing(build(server.issuer, auth_token_cache_size=2)) as authenticator:
        tokens = [server.issue(aud=RESOURCE, sub=f"user-{index}") for index in range(3)]
        for token in tokens:
            await authenticate(authenticator, token)
        assert len(authenticator.cache) == 2
        assert authenticator.verifications == 3
        await authenticate(authenticator, tokens[0])  # forgotten: verified again
        assert authenticator.verifications == 4


async def test_several_issuers_are_accepted_each_with_its_own_keys() -> None:
    async with (
        AuthServer() as first,
        AuthServer(path="/tenant2") as second,
        aclosing(build(first.issuer, second.issuer)) as authenticator,
    ):
        one = await authenticate(authenticator, first.issue(aud=RESOURCE))
        two = await authenticate(authenticator, second.issue(aud=RESOURCE))
        # A token signed by the second server's key, claiming to be from the first, fails there.
        forged = second.issue(aud=RESOURCE, iss=first.issuer, headers={"kid": first.keys[0].kid})
        error = await refusal(authenticator, forged)
    assert (one.id, two.id) == (f"{first.issuer}#alice", f"{second.issuer}#alice")
    assert one != two
    assert "signature" in error.challenge


# --- refused ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "description"),
    [
        ({"lifetime_s": -120}, "the token has expired"),
        ({"nbf_in_s": 600}, "the token is not valid yet"),  # from when the test runs, not when collected
        ({"aud": "https://mcp.example.com/other"}, "the token was issued for another resource"),
        ({"aud": "https://mcp.example.com/mcp/"}, "the token was issued for another resource"),
        ({"aud": None}, "the token was issued for another resource"),
        ({"exp": None}, "the token lacks a required claim (exp, iss)"),
        ({"cnf": {"jkt": "abc"}}, "only bearer tokens are accepted"),
        ({"sub": None}, "the token names no subject"),
    ],
)
async def test_a_token_failing_a_claim_check_is_refused_with_invalid_token(
    server: AuthServer, authenticator: OAuthAuthenticator, claims: dict[str, Any], description: str
) -> None:
    if "nbf_in_s" in claims:
        claims = {**claims, "nbf": int(time.time()) + claims.pop("nbf_in_s")}
    token = server.issue(**{"aud": RESOURCE, **claims})

    error = await refusal(authenticator, token)

    assert f'error_description="{description}"' in error.challenge
    assert token not in error.challenge and token not in error.message


async def test_a_token_within_the_leeway_is_accepted(server: AuthServer, authenticator: OAuthAuthenticator) -> None:
    token = server.issue(aud=RESOURCE, lifetime_s=-5, nbf=int(time.time()) + 5)

    assert (await authenticate(authenticator, token)).subject == "alice"


async def test_a_token_of_an_issuer_not_configured_is_refused_without_any_fetch(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    token = server.issue(aud=RESOURCE, iss="https://evil.example")

    error = await refusal(authenticator, token)

    assert "unknown issuer" in error.challenge or "not from a known issuer" in error.challenge
    assert sum(server.hits.values()) == 0


async def test_a_bad_signature_is_refused(server: AuthServer, authenticator: OAuthAuthenticator) -> None:
    other = ec_key()
    token = server.issue(key=other, aud=RESOURCE, headers={"kid": server.keys[1].kid})

    error = await refusal(authenticator, token)

    assert 'error_description="the token\'s signature does not verify"' in error.challenge


async def test_an_unsigned_token_is_refused_before_any_key_is_fetched(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    claims = {"iss": server.issuer, "sub": "mallory", "aud": RESOURCE, "exp": int(time.time()) + 300}
    token = jwt.encode(claims, "", algorithm="none")

    error = await refusal(authenticator, token)

    assert "algorithm is not allowed" in error.challenge
    assert server.hits[JWKS_PATH] == 0


async def test_an_hmac_token_keyed_with_the_public_key_is_refused_before_any_key_is_fetched(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    """The classic confusion: HS256 with the issuer's public RSA key (which anyone has) as the secret."""
    public_pem = (
        server.keys[0]
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    claims = {"iss": server.issuer, "sub": "mallory", "aud": RESOURCE, "exp": int(time.time()) + 300}
    forged = hs256(claims, public_pem, {"alg": "HS256", "typ": "JWT", "kid": server.keys[0].kid})

    error = await refusal(authenticator, forged)

    assert "algorithm is not allowed" in error.challenge
    assert server.hits[JWKS_PATH] == 0


async def test_an_algorithm_off_the_configured_list_is_refused(server: AuthServer) -> None:
    async with aclosing(build(server.issuer, auth_algorithms=("ES256",))) as authenticator:
        error = await refusal(authenticator, server.issue(aud=RESOURCE))  # RS256
    assert "algorithm is not allowed" in error.challenge


async def test_a_key_whose_own_alg_differs_from_the_token_is_not_used(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    # The RSA key says RS256; a PS256 token naming it is refused (no key fits), not verified with it.
    token = server.issue(aud=RESOURCE, headers={"alg": "PS256"})
    token = jwt.encode(
        jwt.decode(token, options={"verify_signature": False}),
        server.keys[0].private,
        algorithm="PS256",
        headers={"kid": server.keys[0].kid},
    )

    error = await refusal(authenticator, token)

    assert "signing key is unknown" in error.challenge


async def test_garbage_and_oversized_tokens_are_refused(server: AuthServer, authenticator: OAuthAuthenticator) -> None:
    for token in ("not-a-jwt", "a.b.c", "x" * (MAX_TOKEN_CHARS + 1)):
        error = await refusal(authenticator, token)
        assert "Bearer" in error.challenge
    assert sum(server.hits.values()) == 0


async def test_a_missing_or_malformed_header_is_401_without_an_error_code(authenticator: OAuthAuthenticator) -> None:
    for headers in ({}, {"authorization": ["Basic YTpi"]}, {"authorization": ["Bearer a", "Bearer b"]}):
        with pytest.raises(Unauthenticated) as caught:
            authenticator.authenticate(headers)
        assert caught.value.error is None
        assert "error=" not in caught.value.challenge


# --- scopes and static tokens -----------------------------------------------------------------------


async def test_a_token_without_the_server_wide_scopes_is_403_naming_them_all(server: AuthServer) -> None:
    lacking = server.issue(aud=RESOURCE, scope="mcp:tools")
    async with aclosing(build(server.issuer, auth_scopes=("mcp:tools", "mcp:tasks"))) as authenticator:
        with pytest.raises(InsufficientScope) as caught:
            await authenticate(authenticator, lacking)
        # Cached now, and refused again from the cache.
        with pytest.raises(InsufficientScope):
            authenticator.authenticate(bearer(lacking))
        enough = await authenticate(authenticator, server.issue(aud=RESOURCE, scope="mcp:tasks mcp:tools extra"))
    assert caught.value.http_status == 403
    assert caught.value.scopes == ("mcp:tools", "mcp:tasks")
    assert 'error="insufficient_scope", scope="mcp:tools mcp:tasks"' in caught.value.challenge
    assert enough.subject == "alice"


async def test_static_tokens_work_beside_oauth_and_are_unrestricted(server: AuthServer) -> None:
    async with aclosing(
        build(server.issuer, tokens={"static-token-1": "ops"}, auth_scopes=("mcp:tools",))
    ) as authenticator:
        static = authenticator.authenticate(bearer("static-token-1"))
        oauth = await authenticate(authenticator, server.issue(aud=RESOURCE, scope="mcp:tools"))
        await refusal(authenticator, "static-token-2")
    assert isinstance(static, Principal)
    assert (static.id, static.scopes, static.lacks(["anything"])) == ("ops", None, [])
    assert oauth.id == f"{server.issuer}#alice"
