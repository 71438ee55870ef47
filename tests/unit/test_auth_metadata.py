"""OAuth at the HTTP edge, through the real Litestar app over ASGI: the Protected Resource Metadata at
both well-known paths (and 404 when OAuth is off), and the exact ``WWW-Authenticate`` of every refusal:
401 without a token, 401 invalid_token, 403 insufficient_scope from the authenticator and from a tool
deep in the engine, 503 while the issuer's keys cannot be had."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

import httpx
import pytest

from ext_tasks import ToolRegistry
from ext_tasks.auth import Authenticator, InsufficientScope, Principal, Unauthenticated
from ext_tasks.auth.metadata import ProtectedResource
from ext_tasks.auth.oauth import OAuthAuthenticator
from ext_tasks.config import Settings
from ext_tasks.engine import Engine
from ext_tasks.http import App, create_app
from ext_tasks.options import AuthOptions
from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_REQUEST
from ext_tasks.protocol.resume import ResumeCodec
from tests.support.auth_server import JWKS_PATH, RESOURCE, AuthServer
from tests.unit.test_http import connect, json_rpc_error, post

pytestmark = pytest.mark.anyio

METADATA_URL = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


async def echo(text: str) -> str:
    """Returns its argument."""
    return text


async def write_files() -> str:
    """Needs a scope of its own, which the caller's token lacks."""
    raise InsufficientScope(["files:write", "mcp:tools"])


def make_app(settings: Settings, authenticator: Authenticator, tool_scopes: tuple[str, ...] = ()) -> App:
    registry = ToolRegistry("auth-test", version="1.0.0")
    registry.tool()(echo)
    registry.tool()(write_files)
    engine = Engine(registry, ResumeCodec([b"a" * 32], audience="auth-test"))
    return create_app(engine, settings, authenticator, tool_scopes=tool_scopes)


def auth_settings(server: AuthServer, **overrides: Any) -> Settings:
    options = {"auth_issuers": (server.issuer,), "auth_resource": RESOURCE, "auth_fetch_timeout_s": 0.5, **overrides}
    return Settings(auth=AuthOptions(**options))


@pytest.fixture
async def server() -> AsyncIterator[AuthServer]:
    async with AuthServer() as running:
        yield running


@pytest.fixture
async def oauth(server: AuthServer) -> AsyncIterator[httpx.AsyncClient]:
    settings = auth_settings(server, auth_scopes=("mcp:tools",), auth_resource_name="Example MCP")
    authenticator = OAuthAuthenticator.from_options(settings.auth, {"ops-token": "ops"})
    async with connect(make_app(settings, authenticator, tool_scopes=("files:write",))) as http:
        yield http
    await authenticator.aclose()


# --- the metadata -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"])
async def test_the_metadata_is_served_at_the_path_form_and_the_bare_path(
    oauth: httpx.AsyncClient, server: AuthServer, path: str
) -> None:
    response = await oauth.get(path, headers={"Origin": "https://app.example"})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["cache-control"] == "public, max-age=300"
    assert response.json() == {
        "resource": RESOURCE,
        "authorization_servers": [server.issuer],
        "scopes_supported": ["mcp:tools", "files:write"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Example MCP",
    }


async def test_a_browser_preflight_for_the_metadata_is_allowed(oauth: httpx.AsyncClient) -> None:
    response = await oauth.options(
        "/.well-known/oauth-protected-resource/mcp",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "mcp-protocol-version"},
    )  # fmt: skip

    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
    assert "GET" in response.headers["access-control-allow-methods"]


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"])
async def test_without_oauth_there_is_no_metadata(path: str) -> None:
    from ext_tasks.auth import AnonymousAuthenticator

    async with connect(make_app(Settings(), AnonymousAuthenticator())) as http:
        response = await http.get(path)

    assert response.status_code == 404


def test_scopes_supported_may_be_configured_and_is_left_out_when_empty() -> None:
    base = {"auth_issuers": ("https://as.example",), "auth_resource": "https://MCP.example.com"}
    configured = ProtectedResource.from_options(AuthOptions(**base, auth_scopes_supported=("a", "b")), ["c"])
    bare = ProtectedResource.from_options(AuthOptions(**base))
    assert configured is not None and bare is not None

    assert json.loads(configured.document)["scopes_supported"] == ["a", "b"]
    assert "scopes_supported" not in json.loads(bare.document)
    assert json.loads(bare.document)["resource"] == "https://mcp.example.com"
    assert bare.paths == ("/.well-known/oauth-protected-resource",)
    assert (
        bare.challenge.render()
        == 'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource"'
    )
    assert ProtectedResource.from_options(AuthOptions()) is None


# --- the challenges ---------------------------------------------------------------------------------


async def test_a_request_without_a_token_is_401_naming_the_metadata_and_the_scope(oauth: httpx.AsyncClient) -> None:
    response = await post(oauth)

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{METADATA_URL}", scope="mcp:tools"'
    assert json_rpc_error(response)["code"] == INVALID_REQUEST


async def test_a_malformed_authorization_header_is_401_without_an_error_code(oauth: httpx.AsyncClient) -> None:
    response = await post(oauth, extra_headers={"Authorization": "Basic b3BzOg=="})

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{METADATA_URL}", scope="mcp:tools"'


async def test_without_required_scopes_the_challenge_has_no_scope(server: AuthServer) -> None:
    settings = auth_settings(server)
    authenticator = OAuthAuthenticator.from_options(settings.auth)
    async with connect(make_app(settings, authenticator)) as http:
        response = await post(http)
    await authenticator.aclose()

    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{METADATA_URL}"'


async def test_an_expired_token_is_401_invalid_token(oauth: httpx.AsyncClient, server: AuthServer) -> None:
    token = server.issue(aud=RESOURCE, scope="mcp:tools", lifetime_s=-300)

    response = await post(oauth, extra_headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{METADATA_URL}", error="invalid_token", scope="mcp:tools", '
        'error_description="the token has expired"'
    )
    assert json_rpc_error(response) == {
        "code": INVALID_REQUEST,
        "message": "Unauthorized: the bearer token is invalid or expired",
    }


async def test_a_token_without_the_server_wide_scope_is_403(oauth: httpx.AsyncClient, server: AuthServer) -> None:
    token = server.issue(aud=RESOURCE, scope="other")

    response = await post(oauth, extra_headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{METADATA_URL}", error="insufficient_scope", scope="mcp:tools"'
    )
    assert json_rpc_error(response)["data"] == {"requiredScopes": ["mcp:tools"]}


async def test_a_valid_token_is_served_and_a_403_from_a_tool_names_the_metadata(
    oauth: httpx.AsyncClient, server: AuthServer
) -> None:
    headers = {"Authorization": f"Bearer {server.issue(aud=RESOURCE, scope='mcp:tools')}"}

    listed = await post(oauth, extra_headers=headers)
    refused = await post(oauth, "tools/call", {"name": "write_files", "arguments": {}}, extra_headers=headers)

    assert listed.status_code == 200
    assert refused.status_code == 403
    assert refused.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{METADATA_URL}", error="insufficient_scope", scope="files:write mcp:tools"'
    )
    assert json_rpc_error(refused)["code"] == INVALID_REQUEST


async def test_a_static_token_is_served_beside_oauth(oauth: httpx.AsyncClient) -> None:
    response = await post(oauth, extra_headers={"Authorization": "Bearer ops-token"})

    assert response.status_code == 200


async def test_while_the_issuers_keys_cannot_be_had_requests_get_503_with_retry_after(
    oauth: httpx.AsyncClient, server: AuthServer
) -> None:
    server.modes[JWKS_PATH] = "500"

    response = await post(oauth, extra_headers={"Authorization": f"Bearer {server.issue(aud=RESOURCE)}"})

    assert response.status_code == 503
    assert int(response.headers["retry-after"]) >= 1
    assert json_rpc_error(response)["code"] == INTERNAL_ERROR


class HeaderAuthenticator:
    """A plug-in that needs I/O: it answers with an awaitable, which the edge awaits."""

    def authenticate(self, headers: Mapping[str, Sequence[str]]) -> Awaitable[Principal]:
        return self._principal(headers.get("x-user", [""])[0])

    async def _principal(self, user: str) -> Principal:
        await asyncio.sleep(0)
        if not user:
            raise Unauthenticated()
        return Principal(id=user)


async def test_an_authenticator_answering_with_an_awaitable_is_awaited() -> None:
    async with connect(make_app(Settings(), HeaderAuthenticator())) as http:
        served = await post(http, extra_headers={"X-User": "erin"})
        refused = await post(http)

    assert served.status_code == 200
    assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
