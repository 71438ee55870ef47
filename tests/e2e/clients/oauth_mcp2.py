"""The real ``mcp==2.3.0`` client against an OAuth-protected server; run with that package's interpreter.

    python oauth_mcp2.py URL --issuer ISSUER --client-id ID [--client-secret SECRET]
                         [--grant client_credentials|authorization_code] [--redirect-uri URI]

The client is given only the server's URL and its own registration at the authorization server (the
issuer it is registered with, its id and secret): it finds the authorization server from the server's
``401`` (``resource_metadata`` → Protected Resource Metadata → the issuer's metadata), gets a token with
the SDK's own providers, and retries. Grants:

- ``client_credentials`` (the default): ``ClientCredentialsOAuthProvider``, the SDK's implementation of
  the ``io.modelcontextprotocol/oauth-client-credentials`` extension (``client_secret_basic``);
- ``authorization_code``: ``OAuthClientProvider`` with PKCE S256 and a pre-registered public client. The
  browser is the caller's: the script prints ``{"authorize": URL}`` on a line of its own, and reads the
  URL the authorization server finally redirected to (with ``code``, ``state`` and ``iss``) on stdin.

It then lists the tools, calls the task tool ``whoami`` (polled to its end by the ``resultType: "task"``
claim of ``mcp2_tasks_client.py``), and calls ``deploy``, which needs a scope the first token lacks: the
SDK steps up on the 403 (SEP-2350: a new token for the union of the scopes) and retries. Every HTTP
exchange (the server's and the authorization server's) is recorded without bodies or tokens; one JSON
object with what it saw is the last line of stdout. Any failure exits non-zero with the traceback on
stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import mcp2_tasks_client as tasks_client
import mcp_types as types
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

CALLBACK_TIMEOUT_S = 30.0

observed: dict[str, Any] = {"wire": [], "authorizations": []}


class MemoryStorage:
    """The SDK's ``TokenStorage``, in memory; a pre-registered client is there from the start."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info
        self.token_scopes: list[str | None] = []  # the scope of every token stored, in order

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.token_scopes.append(tokens.scope)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


async def record(response: httpx2.Response) -> None:
    """One exchange, as the client's HTTP stack saw it (the auth flow's own requests included)."""
    request = response.request
    url = request.url
    entry: dict[str, Any] = {
        "method": request.method,
        "url": f"{url.scheme}://{url.netloc.decode()}{url.path}",
        "status": response.status_code,
        "bearer": request.headers.get("authorization", "").startswith("Bearer "),
    }
    if "mcp-method" in request.headers:
        entry["mcpMethod"] = request.headers["mcp-method"]
    if "www-authenticate" in response.headers:
        entry["wwwAuthenticate"] = response.headers["www-authenticate"]
    observed["wire"].append(entry)


async def open_browser(url: str) -> None:
    """The redirect handler: hand the authorization URL to whoever plays the browser (the test)."""
    observed["authorizations"].append(url)
    print(json.dumps({"authorize": url}), flush=True)


async def await_callback() -> AuthorizationCodeResult:
    """The callback handler: the URL the browser was finally redirected to, read from stdin."""
    with anyio.fail_after(CALLBACK_TIMEOUT_S):
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    query = {name: values[0] for name, values in parse_qs(urlsplit(line.strip()).query).items()}
    if "code" not in query:
        raise RuntimeError(f"the authorization server redirected without a code: {sorted(query)}")
    return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


def provider_for(args: argparse.Namespace, storage: MemoryStorage) -> OAuthClientProvider:
    if args.grant == "client_credentials":
        return ClientCredentialsOAuthProvider(
            server_url=args.url,
            storage=storage,
            client_id=args.client_id,
            client_secret=args.client_secret,
            issuer=args.issuer,
        )
    method = "client_secret_basic" if args.client_secret else "none"
    storage.client_info = OAuthClientInformationFull(
        client_id=args.client_id,
        client_secret=args.client_secret,
        redirect_uris=[args.redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=method,
    )
    metadata = OAuthClientMetadata(
        redirect_uris=[args.redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=method,
        client_name="ext-tasks-e2e-mcp2",
    )
    return OAuthClientProvider(
        server_url=args.url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=open_browser,
        callback_handler=await_callback,
    )


def texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def main(args: argparse.Namespace) -> None:
    storage = MemoryStorage()
    auth = provider_for(args, storage)
    async with create_mcp_http_client(auth=auth) as http:
        http.event_hooks = {"request": [], "response": [record]}
        transport = streamable_http_client(args.url, http_client=http)
        async with Client(transport, mode=args.mode, extensions=[tasks_client.Tasks()], cache=None) as client:
            observed["protocolVersion"] = client.protocol_version
            observed["toolsBefore"] = sorted(tool.name for tool in (await client.list_tools()).tools)

            whoami = await client.call_tool("whoami", {})
            observed["whoami"] = {"texts": texts(whoami), "isError": whoami.is_error}

            deployed = await client.call_tool("deploy", {"service": "billing"})
            observed["deploy"] = {"texts": texts(deployed), "isError": deployed.is_error}
            observed["toolsAfter"] = sorted(tool.name for tool in (await client.list_tools()).tools)
    observed["tasks"] = tasks_client.observed["tasks"]
    observed["tokenScopes"] = storage.token_scopes


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret")
    parser.add_argument("--grant", choices=["client_credentials", "authorization_code"], default="client_credentials")
    parser.add_argument("--redirect-uri")
    parser.add_argument("--mode", default="auto")
    args = parser.parse_args(argv)
    if args.grant == "client_credentials" and not args.client_secret:
        parser.error("client_credentials needs --client-secret")
    if args.grant == "authorization_code" and not args.redirect_uri:
        parser.error("authorization_code needs --redirect-uri")
    return args


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    try:
        anyio.run(main, arguments)
    except BaseException:  # noqa: BLE001 - any failure, including ExceptionGroup, must exit non-zero
        traceback.print_exc()
        print(json.dumps(observed, default=str), file=sys.stderr)
        sys.exit(1)
    print(json.dumps(observed, default=str))
