"""Opaque tokens, judged by a real introspection endpoint (RFC 7662) on loopback: what is accepted,
what is refused, how long a verdict is kept (so a revoked token is refused once its entry lapses), and
an endpoint that cannot be asked."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from ext_tasks.auth import AuthUnavailable, Principal, Unauthenticated
from ext_tasks.auth.introspection import basic_credentials
from ext_tasks.auth.oauth import OAuthAuthenticator
from ext_tasks.options import AuthOptions
from tests.support.auth_server import (
    CLIENT_ID,
    CLIENT_SECRET,
    INTROSPECTION_PATH,
    JWKS_PATH,
    RESOURCE,
    AuthServer,
    ManualClock,
    authenticate,
    basic,
    bearer,
)

pytestmark = pytest.mark.anyio

OPAQUE = "opaque-token-0123456789"


@pytest.fixture
async def server() -> AsyncIterator[AuthServer]:
    async with AuthServer() as running:
        yield running


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(time.time())


def build(server: AuthServer, clock: ManualClock, **overrides: Any) -> OAuthAuthenticator:
    options = AuthOptions(
        auth_issuers=(server.issuer,),
        auth_resource=RESOURCE,
        auth_introspection_url=server.base + INTROSPECTION_PATH,
        auth_client_id=CLIENT_ID,
        auth_client_secret=CLIENT_SECRET,  # pydantic makes it a SecretStr
        auth_fetch_timeout_s=0.3,
        **overrides,
    )
    return OAuthAuthenticator.from_options(options, now=clock, monotonic=clock)


@pytest.fixture
async def authenticator(server: AuthServer, clock: ManualClock) -> AsyncIterator[OAuthAuthenticator]:
    built = build(server, clock, auth_introspection_cache_s=60.0)
    yield built
    await built.aclose()


def active(server: AuthServer, **fields: Any) -> dict[str, Any]:
    answer = {
        "active": True,
        "iss": server.issuer,
        "sub": "carol",
        "aud": RESOURCE,
        "client_id": "cli",
        "scope": "tools:read",
        "exp": int(time.time()) + 3600,
        **fields,
    }
    return {name: value for name, value in answer.items() if value is not None}


def test_client_credentials_are_form_encoded_before_base64() -> None:
    assert basic_credentials(CLIENT_ID, CLIENT_SECRET) == basic()
    assert basic_credentials("a b", "c:d") == "Basic " + "YStiOmMlM0Fk"


async def test_an_active_token_gives_its_principal(server: AuthServer, authenticator: OAuthAuthenticator) -> None:
    server.introspection[OPAQUE] = active(server)

    principal = await authenticate(authenticator, OPAQUE)

    assert (principal.id, principal.client_id) == (f"{server.issuer}#carol", "cli")
    assert principal.scopes == frozenset({"tools:read"})
    assert principal.claims["active"] is True
    assert authenticator.introspector is not None and authenticator.introspector.calls == 1
    assert server.hits[JWKS_PATH] == 0


async def test_an_answer_without_iss_is_the_first_issuers(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    server.introspection[OPAQUE] = active(server, iss=None)

    assert (await authenticate(authenticator, OPAQUE)).issuer == server.issuer


@pytest.mark.parametrize(
    ("fields", "description"),
    [
        ({"active": False}, "the token is not active"),
        ({"aud": None}, "the token was issued for another resource"),
        ({"aud": ["https://other.example/mcp"]}, "the token was issued for another resource"),
        ({"iss": "https://evil.example"}, "the token is from an unknown issuer"),
        ({"exp": int(time.time()) - 120}, "the token has expired"),
        ({"token_type": "refresh_token"}, "only bearer tokens are accepted"),
        ({"cnf": {"jkt": "x"}}, "only bearer tokens are accepted"),
        ({"sub": None, "client_id": None}, "the token names no subject"),
    ],
)
async def test_an_answer_failing_a_check_is_401_invalid_token(
    server: AuthServer, authenticator: OAuthAuthenticator, fields: dict[str, Any], description: str
) -> None:
    server.introspection[OPAQUE] = active(server, **fields)

    with pytest.raises(Unauthenticated) as caught:
        await authenticate(authenticator, OPAQUE)

    assert caught.value.error == "invalid_token"
    assert f'error_description="{description}"' in caught.value.challenge


async def test_verdicts_are_kept_so_a_revoked_token_is_refused_once_its_entry_lapses(
    server: AuthServer, clock: ManualClock
) -> None:
    server.introspection[OPAQUE] = active(server)
    async with aclosing(build(server, clock, auth_introspection_cache_s=5.0)) as authenticator:
        await authenticate(authenticator, OPAQUE)
        server.introspection[OPAQUE] = {"active": False}  # revoked at the authorization server
        clock.now += 4
        assert isinstance(authenticator.authenticate(bearer(OPAQUE)), Principal)  # still the kept verdict
        clock.now += 1.5
        with pytest.raises(Unauthenticated):
            await authenticate(authenticator, OPAQUE)
        with pytest.raises(Unauthenticated):  # the refusal is kept too
            authenticator.authenticate(bearer(OPAQUE))
    assert server.hits[INTROSPECTION_PATH] == 2


async def test_a_verdict_is_kept_no_longer_than_the_token_lives(server: AuthServer, clock: ManualClock) -> None:
    server.introspection[OPAQUE] = active(server, exp=int(clock.now) + 10)
    async with aclosing(build(server, clock, auth_introspection_cache_s=60.0)) as authenticator:
        await authenticate(authenticator, OPAQUE)
        clock.now += 11
        server.introspection[OPAQUE] = {"active": False}
        with pytest.raises(Unauthenticated):
            await authenticate(authenticator, OPAQUE)


async def test_concurrent_requests_with_one_new_token_make_one_call(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    server.introspection[OPAQUE] = active(server)

    with anyio.fail_after(5):
        principals = await asyncio.gather(*(authenticate(authenticator, OPAQUE) for _ in range(100)))

    assert {principal.id for principal in principals} == {f"{server.issuer}#carol"}
    assert server.hits[INTROSPECTION_PATH] == 1


@pytest.mark.parametrize("mode", ["hang", "500", "garbage"])
async def test_an_endpoint_that_cannot_be_asked_is_503_within_the_bound(
    server: AuthServer, authenticator: OAuthAuthenticator, mode: str
) -> None:
    server.modes[INTROSPECTION_PATH] = mode

    started = time.perf_counter()
    with anyio.fail_after(2), pytest.raises(AuthUnavailable) as caught:
        await authenticate(authenticator, OPAQUE)

    assert time.perf_counter() - started < 1.0
    assert caught.value.http_status == 503


async def test_wrong_client_credentials_are_503_not_a_refused_token(server: AuthServer, clock: ManualClock) -> None:
    options = AuthOptions(
        auth_issuers=(server.issuer,),
        auth_resource=RESOURCE,
        auth_introspection_url=server.base + INTROSPECTION_PATH,
        auth_client_id=CLIENT_ID,
        auth_client_secret="wrong",
    )
    server.introspection[OPAQUE] = active(server)
    async with aclosing(OAuthAuthenticator.from_options(options, now=clock)) as authenticator:
        with pytest.raises(AuthUnavailable):
            await authenticate(authenticator, OPAQUE)


async def test_a_jwt_of_an_unknown_issuer_is_introspected_when_an_endpoint_is_configured(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    token = server.issue(iss="https://elsewhere.example", aud=RESOURCE)
    server.introspection[token] = active(server, sub="dave")

    assert (await authenticate(authenticator, token)).subject == "dave"
    assert server.hits[JWKS_PATH] == 0


async def test_a_jwt_of_an_unknown_issuer_the_endpoint_does_not_take_is_401_and_kept(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    # oidc-provider answers any JWT with 400 unsupported_token_type: that refuses the token, it is no outage.
    server.modes[INTROSPECTION_PATH] = "unsupported"
    token = server.issue(iss="https://elsewhere.example", aud=RESOURCE)

    for _ in range(2):
        with pytest.raises(Unauthenticated) as caught:
            await authenticate(authenticator, token)
        assert caught.value.error == "invalid_token"
        assert 'error_description="the token is not from a known issuer"' in caught.value.challenge

    assert server.hits[INTROSPECTION_PATH] == 1
    assert server.hits[JWKS_PATH] == 0


async def test_another_400_of_the_endpoint_is_still_503(server: AuthServer, authenticator: OAuthAuthenticator) -> None:
    server.modes[INTROSPECTION_PATH] = "invalid-request"

    with pytest.raises(AuthUnavailable):
        await authenticate(authenticator, OPAQUE)


async def test_a_jwt_of_a_known_issuer_whose_keys_are_down_stays_503_when_the_endpoint_takes_no_jwt(
    server: AuthServer, authenticator: OAuthAuthenticator
) -> None:
    server.modes[JWKS_PATH] = "500"
    server.modes[INTROSPECTION_PATH] = "unsupported"
    token = server.issue(aud=RESOURCE)

    with pytest.raises(AuthUnavailable):
        await authenticate(authenticator, token)

    assert server.hits[INTROSPECTION_PATH] == 1


async def test_neither_the_token_nor_the_secret_is_logged(
    server: AuthServer, authenticator: OAuthAuthenticator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.introspection[OPAQUE] = {"active": False}
    with pytest.raises(Unauthenticated):
        await authenticate(authenticator, OPAQUE)
    server.modes[INTROSPECTION_PATH] = "500"
    with pytest.raises(AuthUnavailable):
        await authenticate(authenticator, OPAQUE + "-2")

    text = caplog.text + repr(authenticator.introspector)
    assert caplog.records
    assert OPAQUE not in text and CLIENT_SECRET not in text
