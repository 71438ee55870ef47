"""An issuer's keys: discovery (RFC 8414, then OpenID), rotation, one fetch for many requests, the
refetch rate limit, and an authorization server that hangs, answers garbage or too much: requests are
refused within the bound, the server never crashes, and it recovers when the issuer does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from ext_tasks.auth import AuthUnavailable, Unauthenticated
from ext_tasks.auth.fetch import metadata_urls
from ext_tasks.auth.keys import usable_keys
from ext_tasks.auth.oauth import OAuthAuthenticator
from ext_tasks.options import AuthOptions
from tests.support.auth_server import JWKS_PATH, RESOURCE, AuthServer, ManualClock, authenticate, rsa_key

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.3


def build(server: AuthServer, clock: ManualClock | None = None, **overrides: Any) -> OAuthAuthenticator:
    options = AuthOptions(
        auth_issuers=(server.issuer,), auth_resource=RESOURCE, auth_fetch_timeout_s=TIMEOUT_S, **overrides
    )
    return OAuthAuthenticator.from_options(options, monotonic=clock or ManualClock())


@pytest.fixture
async def server() -> AsyncIterator[AuthServer]:
    async with AuthServer() as running:
        yield running


# --- discovery --------------------------------------------------------------------------------------


def test_metadata_urls_follow_the_order_of_mcp_discovery() -> None:
    assert metadata_urls("https://auth.example.com/tenant1") == [
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.example.com/.well-known/openid-configuration/tenant1",
        "https://auth.example.com/tenant1/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://tenant.auth0.example/") == [
        "https://tenant.auth0.example/.well-known/oauth-authorization-server",
        "https://tenant.auth0.example/.well-known/openid-configuration",
    ]


async def test_keys_are_found_through_rfc_8414_metadata(server: AuthServer) -> None:
    async with aclosing(build(server)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
    assert server.hits == {"/.well-known/oauth-authorization-server": 1, JWKS_PATH: 1}


async def test_keys_of_an_issuer_with_a_path_are_found_through_openid_discovery_last() -> None:
    async with AuthServer(path="/realms/mcp", discovery="openid") as server, aclosing(build(server)) as authenticator:
        principal = await authenticate(authenticator, server.issue(aud=RESOURCE))
    assert principal.issuer == server.issuer
    assert list(server.hits) == [
        "/.well-known/oauth-authorization-server/realms/mcp",
        "/.well-known/openid-configuration/realms/mcp",
        "/realms/mcp/.well-known/openid-configuration",
        JWKS_PATH,
    ]


async def test_metadata_naming_another_issuer_is_not_used(server: AuthServer) -> None:
    server.metadata_issuer = "https://evil.example"
    async with aclosing(build(server)) as authenticator:
        with pytest.raises(AuthUnavailable):
            await authenticate(authenticator, server.issue(aud=RESOURCE))
    assert server.hits[JWKS_PATH] == 0


async def test_a_configured_jwks_url_needs_no_discovery(server: AuthServer) -> None:
    async with aclosing(build(server, auth_jwks_url=server.base + JWKS_PATH)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
    assert server.hits == {JWKS_PATH: 1}


# --- rotation, one fetch at a time, the rate limit ----------------------------------------------------


async def test_a_key_rotated_in_is_fetched_once_and_accepted(server: AuthServer) -> None:
    clock = ManualClock()
    async with aclosing(build(server, clock)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
        clock.now += 31  # past the refetch interval
        new = server.rotate()

        principal = await authenticate(authenticator, server.issue(key=new, aud=RESOURCE, sub="bob"))
    assert principal.subject == "bob"
    assert server.hits[JWKS_PATH] == 2


async def test_two_hundred_requests_naming_a_new_key_make_one_fetch(server: AuthServer) -> None:
    clock = ManualClock()
    async with aclosing(build(server, clock)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
        clock.now += 31
        new = server.rotate()
        tokens = [server.issue(key=new, aud=RESOURCE, sub=f"user-{index}") for index in range(200)]

        with anyio.fail_after(5):
            principals = await asyncio.gather(*(authenticate(authenticator, token) for token in tokens))
    assert len({principal.id for principal in principals}) == 200
    assert server.hits[JWKS_PATH] == 2  # the first fetch, and one for the new key


async def test_unknown_key_ids_refetch_at_most_once_per_interval(server: AuthServer) -> None:
    clock = ManualClock()
    async with aclosing(build(server, clock, auth_keys_refetch_s=30.0)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
        new = server.rotate()
        token = server.issue(key=new, aud=RESOURCE)

        with pytest.raises(Unauthenticated) as caught:
            await authenticate(authenticator, token)  # fetched 0 s ago: no refetch yet
        assert server.hits[JWKS_PATH] == 1
        assert "signing key is unknown" in caught.value.challenge

        clock.now += 30
        assert (await authenticate(authenticator, token)).subject == "alice"
        assert server.hits[JWKS_PATH] == 2

        forged = server.issue(aud=RESOURCE, headers={"kid": "never-published"})
        for _ in range(5):
            with pytest.raises(Unauthenticated):
                await authenticate(authenticator, forged)
    assert server.hits[JWKS_PATH] == 2  # a flood of unknown kids costs no fetch within the interval


async def test_old_keys_are_refreshed_in_the_background_while_they_keep_serving(server: AuthServer) -> None:
    clock = ManualClock()
    async with aclosing(build(server, clock, auth_keys_max_age_s=3600.0)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
        clock.now += 3601
        server.modes[JWKS_PATH] = "hang"

        started = time.perf_counter()
        principal = await authenticate(authenticator, server.issue(aud=RESOURCE, sub="bob"))  # old key: at once
        assert time.perf_counter() - started < 0.2
        assert principal.subject == "bob"
        await asyncio.sleep(0)  # the background fetch starts
        assert authenticator.verifier is not None
        assert authenticator.verifier.keys[server.issuer].fetches == 2


# --- a hostile or absent key server -----------------------------------------------------------------


async def test_a_hanging_jwks_endpoint_refuses_within_the_bound(server: AuthServer) -> None:
    server.modes[JWKS_PATH] = "hang"
    async with aclosing(build(server)) as authenticator:
        started = time.perf_counter()
        with anyio.fail_after(TIMEOUT_S + 1.0), pytest.raises(AuthUnavailable) as caught:
            await authenticate(authenticator, server.issue(aud=RESOURCE))
        elapsed = time.perf_counter() - started
    assert elapsed < TIMEOUT_S + 0.5
    assert caught.value.http_status == 503
    assert int(caught.value.http_headers()["Retry-After"]) >= 1


@pytest.mark.parametrize("mode", ["garbage", "huge", "not-an-object", "500"])
async def test_a_jwks_answer_that_cannot_be_used_is_503_and_the_server_recovers(
    server: AuthServer, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    server.modes[JWKS_PATH] = mode
    token = server.issue(aud=RESOURCE)
    async with aclosing(build(server, clock)) as authenticator:
        with pytest.raises(AuthUnavailable):
            await authenticate(authenticator, token)
        with pytest.raises(AuthUnavailable):  # within the back-off pause: refused at once, not fetched
            await authenticate(authenticator, token)
        assert server.hits[JWKS_PATH] == 1

        del server.modes[JWKS_PATH]
        clock.now += 1
        principal = await authenticate(authenticator, token)
    assert principal.subject == "alice"
    assert any("cannot fetch the keys of issuer" in record.message for record in caplog.records)


async def test_many_requests_while_the_key_server_hangs_make_one_fetch_and_all_end_in_time(
    server: AuthServer,
) -> None:
    server.modes[JWKS_PATH] = "hang"
    token = server.issue(aud=RESOURCE)
    async with aclosing(build(server)) as authenticator:
        with anyio.fail_after(TIMEOUT_S + 1.0):
            outcomes = await asyncio.gather(
                *(authenticate(authenticator, token) for _ in range(50)), return_exceptions=True
            )
    assert all(isinstance(outcome, AuthUnavailable) for outcome in outcomes)
    assert server.hits[JWKS_PATH] == 1


async def test_keys_fetched_before_stay_in_use_when_a_refetch_fails(server: AuthServer) -> None:
    clock = ManualClock()
    async with aclosing(build(server, clock)) as authenticator:
        await authenticate(authenticator, server.issue(aud=RESOURCE))
        clock.now += 31
        server.modes[JWKS_PATH] = "500"
        with pytest.raises(Unauthenticated):  # an unknown kid: refused (401, not 503: keys exist)
            await authenticate(authenticator, server.issue(aud=RESOURCE, headers={"kid": "new"}))
        assert (await authenticate(authenticator, server.issue(aud=RESOURCE, sub="bob"))).subject == "bob"


def test_only_public_signature_keys_of_a_supported_type_are_kept() -> None:
    rsa = dict(rsa_key().jwk)
    document = {
        "keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {**rsa, "kid": "enc", "use": "enc"},
            {**rsa, "kid": "private", "d": "AQAB", "p": "AQAB"},
            {"kty": "RSA", "kid": "short", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "kid": "broken", "crv": "P-256", "x": "AA", "y": 5},
            "not a key",
        ]
    }

    keys = usable_keys(document)

    assert [key["kid"] for key in keys] == ["private"]
    assert "d" not in keys[0] and "p" not in keys[0]  # only the public members are kept
