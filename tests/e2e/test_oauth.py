"""The OAuth 2.1 resource server end to end: three instances behind nginx on one Valkey, and a real
authorization server (oidc-provider, the session's ``oidc_provider``) issuing the tokens.

Every refusal is checked by its status, its body and its exact ``WWW-Authenticate``; a case that matters
per instance is asked of each of the three directly (they must all answer alike), the rest through nginx.

- the Protected Resource Metadata (both paths), the same bytes from every instance;
- no token (401, the metadata URL and the base scope); a provider JWT served (tools, a task to its end,
  ``tasks/get`` on every instance, the task's tool seeing the caller's grant);
- refused tokens, each 401 ``invalid_token``: expired, another resource's, another issuer's, tampered,
  ``alg: none``, HS256 keyed with the public key, signed by a key the issuer never published;
- key rotation at the provider: a token of the new key accepted by every instance, without restart;
- step-up: a tool needing ``deploy:production``, 403 ``insufficient_scope`` naming it, then served;
- introspection (a second fleet, whose resource gets opaque tokens): served, then refused on every
  instance once the introspection cache lapses after a revocation;
- a JWKS endpoint that hangs, and one that answers garbage: 503 with ``Retry-After``, within the bound;
- two users (alice and bob, logged in through the authorization code flow) kept apart on every task
  method of both eras, bob getting exactly what an unknown id gets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_REQUEST
from tests.support.auth_server import AuthServer
from tests.support.cluster import spawn_server, wait_for, wait_listening
from tests.support.legacy import Session
from tests.support.oauth_fleet import (
    BASE_SCOPE,
    DEPLOY_SCOPE,
    TERMINAL,
    TOOLS,
    OAuthFleet,
    bearer,
    result,
    rpc,
    running_oauth_fleet,
    start_task,
    task_in,
)
from tests.support.oidc_provider import JWT_RESOURCE, PUBLIC_CLIENT, OidcProvider, generate_key
from tests.support.processes import ServerProcess, stop

pytestmark = pytest.mark.e2e

#: Keys are fetched again for an unknown key id at most this often (the default is 30 s).
KEYS_REFETCH_S = 1.0
#: How long an introspection answer is trusted on the opaque fleet.
INTROSPECTION_CACHE_S = 1.0
#: The JWKS fetch bound of the servers facing a hostile JWKS endpoint.
FETCH_TIMEOUT_S = 1.0
PLAIN_SCOPES = f"{BASE_SCOPE} tasks:write"
UNAUTHORIZED = {"code": INVALID_REQUEST, "message": "Unauthorized: a bearer token is required"}
INVALID = {"code": INVALID_REQUEST, "message": "Unauthorized: the bearer token is invalid or expired"}


@pytest.fixture(scope="module")
def fleet(oidc_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthFleet]:
    env = {"EXT_TASKS_AUTH_KEYS_REFETCH_S": str(KEYS_REFETCH_S)}
    with running_oauth_fleet(tmp_path_factory.mktemp("oauth"), oidc_provider, env=env) as running:
        yield running


@pytest.fixture(scope="module")
def opaque_fleet(oidc_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthFleet]:
    env = {"EXT_TASKS_AUTH_INTROSPECTION_CACHE_S": str(INTROSPECTION_CACHE_S)}
    directory = tmp_path_factory.mktemp("oauth-opaque")
    with running_oauth_fleet(directory, oidc_provider, token_format="opaque", env=env) as running:
        yield running


def challenge(fleet: OAuthFleet, *, error: str | None = None, description: str | None = None) -> str:
    """The ``WWW-Authenticate`` of a 401 from ``fleet``."""
    parts = [f'resource_metadata="{fleet.metadata_url}"']
    if error:
        parts.append(f'error="{error}"')
    parts.append(f'scope="{BASE_SCOPE}"')
    if description:
        parts.append(f'error_description="{description}"')
    return "Bearer " + ", ".join(parts)


def machine_token(fleet: OAuthFleet, scope: str = PLAIN_SCOPES) -> str:
    """A JWT from the provider (client credentials, the ``machine`` client) for ``fleet``."""
    return fleet.provider.client_credentials_token(scope, fleet.resource)


def segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, claims = (
        json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in token.split(".")[:2]
    )
    return header, claims


# --- Discovery --------------------------------------------------------------------------------------


def test_every_instance_serves_the_same_metadata_at_both_paths(fleet: OAuthFleet) -> None:
    bodies = set()
    for base in [fleet.url, *fleet.instances]:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            response = httpx.get(base.removesuffix("/mcp") + path, timeout=10.0)
            assert response.status_code == 200, (base, path)
            assert response.headers["content-type"].startswith("application/json")
            assert response.headers["access-control-allow-origin"] == "*"
            bodies.add(response.content)
    assert len(bodies) == 1
    document = json.loads(bodies.pop())
    assert document == {
        "resource": fleet.resource,
        "authorization_servers": [fleet.provider.issuer],
        "scopes_supported": [BASE_SCOPE, DEPLOY_SCOPE],
        "bearer_methods_supported": ["header"],
    }
    # The provider it names publishes its metadata, so a client can go on from here.
    discovered = httpx.get(f"{fleet.provider.issuer}/.well-known/oauth-authorization-server", timeout=10.0).json()
    assert discovered["issuer"] == fleet.provider.issuer


@pytest.mark.parametrize("authorization", [None, "Basic bWFjaGluZTpzZWNyZXQ=", "Bearer"])
def test_a_request_without_a_bearer_token_gets_the_challenge(fleet: OAuthFleet, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for url in [fleet.url, *fleet.instances]:
        with httpx.Client(timeout=10.0, headers=headers) as client:
            response = client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == challenge(fleet)
        assert response.json() == {"jsonrpc": "2.0", "error": UNAUTHORIZED, "id": None}


# --- A valid token ----------------------------------------------------------------------------------


def test_a_provider_jwt_is_served_and_its_task_runs_to_its_end_with_the_callers_grant(fleet: OAuthFleet) -> None:
    token = machine_token(fleet)
    header, claims = unverified(token)
    assert (header["typ"], claims["aud"], claims["sub"]) == ("at+jwt", fleet.resource, "machine")

    tools = result(fleet.url, "tools/list", token=token)["tools"]
    assert sorted(tool["name"] for tool in tools) == ["approve", "echo", "greet", "sleepy", "whoami"]  # no deploy
    echoed = result(fleet.url, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, token=token)
    assert echoed["content"] == [{"type": "text", "text": "hi"}]

    task_id = start_task(fleet.url, "whoami", {}, token=token)
    done = task_in(fleet.url, task_id, TERMINAL, token=token)
    assert done["status"] == "completed", done
    seen = json.loads(done["result"]["content"][0]["text"])
    pids = {server.process.pid for server in fleet.cluster.servers}
    assert seen.pop("pid") in pids
    assert seen == {
        "issuer": fleet.provider.issuer,
        "subject": "machine",
        "client_id": "machine",
        "scopes": sorted(PLAIN_SCOPES.split()),
    }
    for url in fleet.instances:
        task = result(url, "tasks/get", {"taskId": task_id}, token=token)
        assert (task["taskId"], task["status"], task["result"]) == (task_id, "completed", done["result"])


# --- Refused tokens ---------------------------------------------------------------------------------


def refused_tokens(fleet: OAuthFleet) -> dict[str, tuple[str, str]]:
    """Per case: the token, and the ``error_description`` it is refused with."""
    provider = fleet.provider
    base = {"aud": fleet.resource, "sub": "mallory", "client_id": "machine", "scope": PLAIN_SCOPES}
    genuine = provider.mint(base)
    header, claims = unverified(genuine)
    public_pem = (
        provider.signing_key()
        .private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    hs256_header = {**header, "alg": "HS256"}
    hs256_input = f"{segment(hs256_header)}.{segment(claims)}"
    hs256_signature = hmac.new(public_pem, hs256_input.encode(), hashlib.sha256).digest()
    return {
        "expired": (
            provider.mint({**base, "iat": int(time.time()) - 600, "exp": int(time.time()) - 120}),
            "the token has expired",
        ),
        "another-resource": (
            provider.client_credentials_token(PLAIN_SCOPES, JWT_RESOURCE),
            "the token was issued for another resource",
        ),
        "another-issuer": (
            provider.mint({**base, "iss": "http://127.0.0.1:9/other"}),
            "the token is not from a known issuer",
        ),
        "tampered": (
            f"{segment(header)}.{segment({**claims, 'sub': 'admin'})}.{genuine.rsplit('.', 1)[1]}",
            "the token's signature does not verify",
        ),
        "alg-none": (
            f"{segment({**header, 'alg': 'none'})}.{segment(claims)}.",
            "the token's algorithm is not allowed",
        ),
        "hs256-public-key": (
            f"{hs256_input}.{base64.urlsafe_b64encode(hs256_signature).rstrip(b'=').decode()}",
            "the token's algorithm is not allowed",
        ),
        "unpublished-key": (provider.mint(base, key=generate_key("RS256")), "the token's signing key is unknown"),
    }


def test_refused_tokens_get_401_invalid_token_from_every_instance(fleet: OAuthFleet) -> None:
    cases = refused_tokens(fleet)
    asked = 0
    for case, (token, description) in cases.items():
        for url in [fleet.url, *fleet.instances]:
            response, message = rpc(url, "tools/list", token=token)
            asked += 1
            assert response.status_code == 401, (case, url, message, fleet.logs()[-3000:])
            assert response.headers["www-authenticate"] == challenge(
                fleet, error="invalid_token", description=description
            ), case
            assert message == {"jsonrpc": "2.0", "error": INVALID, "id": None}, case
    assert asked == len(cases) * 4
    assert "mallory" not in fleet.logs() and cases["expired"][0] not in fleet.logs()  # no token or claim logged


def test_a_token_of_rotated_keys_is_accepted_by_every_instance_without_restart(fleet: OAuthFleet) -> None:
    before = machine_token(fleet)
    for url in fleet.instances:  # every instance has the keys of before
        assert rpc(url, "tools/list", token=before)[0].status_code == 200

    new_kids = fleet.provider.rotate_keys()
    after = machine_token(fleet)
    assert unverified(after)[0]["kid"] == new_kids[0]

    started = time.monotonic()
    for url in fleet.instances:
        # An instance fetches the keys again for the unknown kid, at most every KEYS_REFETCH_S: poll.
        wait_for(
            lambda url=url: rpc(url, "tools/list", token=after)[0].status_code == 200,  # type: ignore[misc]
            KEYS_REFETCH_S + 5,
            interval_s=0.1,
            message=lambda url=url: f"the new key accepted by {url}\n{fleet.logs()[-3000:]}",  # type: ignore[misc]
        )
    assert time.monotonic() - started < KEYS_REFETCH_S + 5
    for url in fleet.instances:  # the previous key is still published: its tokens still pass
        assert rpc(url, "tools/list", token=before)[0].status_code == 200
    assert [server.process.poll() for server in fleet.cluster.servers] == [None, None, None]


# --- Step-up ----------------------------------------------------------------------------------------


def test_a_tool_needing_a_scope_the_token_lacks_is_403_then_served_with_it(fleet: OAuthFleet) -> None:
    plain = machine_token(fleet)
    arguments = {"service": "billing"}
    call = {"name": "deploy", "arguments": arguments}
    for url in [fleet.url, *fleet.instances]:
        response, message = rpc(url, "tools/call", call, token=plain)
        assert response.status_code == 403
        assert response.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{fleet.metadata_url}", error="insufficient_scope", scope="{DEPLOY_SCOPE}"'
        )
        message.pop("id")
        assert message == {
            "jsonrpc": "2.0",
            "error": {
                "code": INVALID_REQUEST,
                "message": f"Forbidden: the token lacks a scope this request needs ({DEPLOY_SCOPE})",
                "data": {"requiredScopes": [DEPLOY_SCOPE]},
            },
        }

    stepped = machine_token(fleet, f"{PLAIN_SCOPES} {DEPLOY_SCOPE}")
    listed = {tool["name"] for tool in result(fleet.url, "tools/list", token=stepped)["tools"]}
    assert "deploy" in listed
    task_id = start_task(fleet.url, "deploy", arguments, token=stepped)
    done = task_in(fleet.url, task_id, TERMINAL, token=stepped)
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [{"type": "text", "text": "billing deployed to production for machine"}]


# --- Introspection ----------------------------------------------------------------------------------


def test_an_opaque_token_is_served_then_refused_everywhere_once_revoked(opaque_fleet: OAuthFleet) -> None:
    provider = opaque_fleet.provider
    token = machine_token(opaque_fleet)
    assert token.count(".") == 0  # opaque: only the provider can tell what it is
    assert provider.introspect(token)["aud"] == opaque_fleet.resource

    task_id = start_task(opaque_fleet.url, "whoami", {}, token=token)
    done = task_in(opaque_fleet.url, task_id, TERMINAL, token=token)
    seen = json.loads(done["result"]["content"][0]["text"])
    assert (seen["issuer"], seen["subject"], seen["client_id"]) == (provider.issuer, "machine", "machine")
    for url in opaque_fleet.instances:  # every instance has judged (and keeps) the token
        assert rpc(url, "tools/list", token=token)[0].status_code == 200

    provider.revoke(token)
    revoked = time.monotonic()
    expected = challenge(opaque_fleet, error="invalid_token", description="the token is not active")

    def refused(url: str) -> httpx.Response | None:
        response = rpc(url, "tools/list", token=token)[0]
        return response if response.status_code == 401 else None

    for url in opaque_fleet.instances:
        response = wait_for(
            lambda url=url: refused(url),  # type: ignore[misc]
            INTROSPECTION_CACHE_S + 5,
            interval_s=0.1,
            message=lambda url=url: f"the revoked token refused by {url}\n{opaque_fleet.logs()[-3000:]}",  # type: ignore[misc]
        )
        assert response.headers["www-authenticate"] == expected
    # Refused by all three within the cache's lifetime of the revocation (and the polling's steps; the
    # default lifetime is 60 s).
    assert time.monotonic() - revoked < INTROSPECTION_CACHE_S + 3


# --- A hostile JWKS endpoint ------------------------------------------------------------------------


@contextlib.contextmanager
def threaded_auth_server() -> Iterator[AuthServer]:
    """``tests.support.auth_server.AuthServer`` in an event loop of its own thread (these tests are sync)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="auth-server", daemon=True)
    thread.start()
    server = AuthServer()
    asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(5)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


HOSTILE_RESOURCE = "https://hostile-jwks.example.test/mcp"


@pytest.fixture(scope="module")
def hostile_jwks(
    oidc_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    """Two single servers of the provider's issuer whose JWKS URL is a hostile endpoint: one that never
    answers, one that answers garbage."""
    directory = tmp_path_factory.mktemp("hostile-jwks")
    with threaded_auth_server() as hostile:
        hostile.modes.update({"/hang": "hang", "/garbage": "garbage"})
        servers = {}
        try:
            for mode in ("hang", "garbage"):
                env = {
                    "EXT_TASKS_AUTH_ISSUERS": oidc_provider.issuer,
                    "EXT_TASKS_AUTH_RESOURCE": HOSTILE_RESOURCE,
                    "EXT_TASKS_AUTH_SCOPES": BASE_SCOPE,
                    "EXT_TASKS_AUTH_JWKS_URL": f"{hostile.base}/{mode}",
                    "EXT_TASKS_AUTH_FETCH_TIMEOUT_S": str(FETCH_TIMEOUT_S),
                }
                servers[mode] = spawn_server(directory, tools=TOOLS, env=env)
            for server in servers.values():
                wait_listening(server)
            yield servers
        finally:
            for server in servers.values():
                stop(server.process)


@pytest.mark.parametrize("mode", ["hang", "garbage"])
def test_a_hostile_jwks_endpoint_costs_a_bounded_503(
    hostile_jwks: dict[str, ServerProcess], oidc_provider: OidcProvider, mode: str
) -> None:
    server = hostile_jwks[mode]
    token = oidc_provider.mint({"aud": HOSTILE_RESOURCE, "sub": "alice", "scope": BASE_SCOPE})
    timings = []
    for _ in range(2):
        started = time.monotonic()
        response, message = rpc(server.url, "tools/list", token=token)
        timings.append(time.monotonic() - started)
        assert response.status_code == 503, (message, server.log()[-2000:])
        assert int(response.headers["retry-after"]) >= 1
        assert "www-authenticate" not in response.headers  # the token may be fine: no challenge
        assert message["error"]["code"] == INTERNAL_ERROR
        assert message["error"]["message"] == "Service unavailable: the authorization server's keys cannot be fetched"
    # The first request waited for one fetch at most; the next is refused at once (no fetch per request).
    assert timings[0] < FETCH_TIMEOUT_S + 1.0, timings
    assert timings[1] < 0.5, timings
    if mode == "garbage":
        assert timings[0] < 0.5, timings
    # Requests without a token are not held up by it.
    started = time.monotonic()
    assert rpc(server.url, "tools/list")[0].status_code == 401
    assert time.monotonic() - started < 0.5
    assert "cannot fetch the keys of issuer" in server.log()


# --- Two users --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def users(fleet: OAuthFleet) -> dict[str, str]:
    """Access tokens of alice and bob: each logged in through the authorization code flow (PKCE, the
    provider's public client, the browser played), for this fleet."""
    tokens = {}
    for name in ("alice", "bob"):
        granted = fleet.provider.authorization_code_tokens(
            scope=PLAIN_SCOPES, resource=fleet.resource, client=PUBLIC_CLIENT, login_hint=name
        )
        assert unverified(granted.access_token)[1]["sub"] == name
        tokens[name] = granted.access_token
    return tokens


def without_id(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "id"}


@contextlib.contextmanager
def cancelled_at_the_end(url: str, token: str, task_ids: list[str]) -> Iterator[list[str]]:
    """The tasks of ``task_ids`` (filled in by the block) cancelled when the block ends, however it ends:
    a fleet whose workers still run tasks takes its shutdown grace to stop."""
    try:
        yield task_ids
    finally:
        for task_id in task_ids:
            rpc(url, "tasks/cancel", {"taskId": task_id}, token=token)


def test_two_users_are_kept_apart_on_every_2026_task_method(fleet: OAuthFleet, users: dict[str, str]) -> None:
    alice, bob = users["alice"], users["bob"]
    with cancelled_at_the_end(fleet.url, alice, []) as started:
        waiting = start_task(fleet.url, "approve", {"label": "release"}, token=alice)
        started.append(waiting)
        running = start_task(fleet.url, "sleepy", {"seconds": 60}, token=alice)
        started.append(running)
        task_in(fleet.url, waiting, frozenset({"input_required"}), token=alice)
        answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
        compared = 0
        for task_id in (waiting, running):
            unknown = secrets.token_urlsafe(18)
            for method, params in (
                ("tasks/get", {}),
                ("tasks/update", {"inputResponses": answer}),
                ("tasks/cancel", {}),
            ):
                foreign = rpc(fleet.url, method, {"taskId": task_id, **params}, token=bob)
                never = rpc(fleet.url, method, {"taskId": unknown, **params}, token=bob)
                assert foreign[0].status_code == never[0].status_code, method
                assert without_id(foreign[1]) == without_id(never[1]), method
                assert "error" in foreign[1], (method, foreign[1])
                compared += 1

        # MRTR: alice's requestState is worth nothing to bob, exactly like a forged one.
        asked = result(fleet.url, "tools/call", {"name": "greet", "arguments": {}}, token=alice)
        state = asked["requestState"]
        named = {"name": {"action": "accept", "content": {"name": "Bob"}}}
        retry = {"name": "greet", "arguments": {}, "inputResponses": named}
        stolen = rpc(fleet.url, "tools/call", {**retry, "requestState": state}, token=bob)
        forged = rpc(fleet.url, "tools/call", {**retry, "requestState": state[:-4] + "AAAA"}, token=bob)
        assert stolen[0].status_code == forged[0].status_code
        assert without_id(stolen[1]) == without_id(forged[1])
        assert stolen[1]["error"]["message"] == "Invalid or expired requestState"
        compared += 1

        # Alice's own state and tasks are untouched by all that.
        ada = {"name": {"action": "accept", "content": {"name": "Ada"}}}
        greeted = result(fleet.url, "tools/call", {**retry, "requestState": state, "inputResponses": ada}, token=alice)
        assert greeted["content"] == [{"type": "text", "text": "Hello, Ada!"}]
        assert result(fleet.url, "tasks/get", {"taskId": waiting}, token=alice)["status"] == "input_required"
        assert result(fleet.url, "tasks/get", {"taskId": running}, token=alice)["status"] == "working"
        result(fleet.url, "tasks/update", {"taskId": waiting, "inputResponses": answer}, token=alice)
        assert task_in(fleet.url, waiting, TERMINAL, token=alice)["status"] == "completed"
        result(fleet.url, "tasks/cancel", {"taskId": running}, token=alice)
        assert task_in(fleet.url, running, TERMINAL, token=alice)["status"] == "cancelled"
        assert compared == 7


def test_two_users_are_kept_apart_on_every_2025_task_method(fleet: OAuthFleet, users: dict[str, str]) -> None:
    alice = Session(fleet.url, token=users["alice"], client_name="alice")
    bob = Session(fleet.url, token=users["bob"], client_name="bob")
    with (
        cancelled_at_the_end(fleet.url, users["alice"], []) as started,
        contextlib.closing(alice),
        contextlib.closing(bob),
    ):
        legacy_task = alice.start_task("sleepy", {"seconds": 60})
        started.append(legacy_task)
        modern_task = start_task(fleet.url, "sleepy", {"seconds": 60}, token=users["alice"])
        started.append(modern_task)
        # tasks/list shows the tasks the principal's 2025-11-25 sessions created.
        alices = {task["taskId"] for task in alice.call("tasks/list", {})["result"]["tasks"]}
        assert legacy_task in alices

        compared = 0
        for task_id in (legacy_task, modern_task):
            unknown = secrets.token_urlsafe(18)
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                foreign, never = bob.post(method, {"taskId": task_id}), bob.post(method, {"taskId": unknown})
                assert foreign.status_code == never.status_code, method
                assert without_id(foreign.json()) == without_id(never.json()), method
                assert "error" in foreign.json(), (method, foreign.json())
                compared += 1
        listed = bob.call("tasks/list", {})["result"]["tasks"]
        assert listed == []

        # Alice's session is hers: bob naming it is told what an unknown session is told.
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
        stolen = httpx.post(fleet.url, json=ping, headers={**alice.headers, **bearer(users["bob"])}, timeout=10.0)
        made_up = {**alice.headers, **bearer(users["bob"]), "Mcp-Session-Id": "no-such-session"}
        unknown_session = httpx.post(fleet.url, json=ping, headers=made_up, timeout=10.0)
        assert stolen.status_code == unknown_session.status_code == 404
        assert stolen.json() == unknown_session.json()

        assert alice.status(legacy_task) == alice.status(modern_task) == "working"
        for task_id in (legacy_task, modern_task):
            assert alice.call("tasks/cancel", {"taskId": task_id})["result"]["status"] == "cancelled"
        assert compared == 6
