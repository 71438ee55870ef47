"""Real clients against the OAuth fleet (three instances behind nginx, a real authorization server): each
is given the server's URL and its own registration at the authorization server, nothing else. It finds
the authorization server from the server (401 → ``resource_metadata`` → Protected Resource Metadata → the
issuer's metadata), gets a token with its SDK's own OAuth support, and runs a task tool to its end.

- the Python SDK (``mcp==2.3.0``, ``clients/oauth_mcp2.py``), with client credentials (its
  ``ClientCredentialsOAuthProvider``: the ``oauth-client-credentials`` extension), and with the
  authorization code flow and PKCE (its ``OAuthClientProvider``, the provider's public client, this test
  playing the browser). Both also step up: ``deploy`` needs a scope the first token lacks; the SDK takes
  the 403, gets a token for the union of the scopes, and retries;
- the TypeScript client (``@modelcontextprotocol/client`` 2.4.0 with ``@modelcontextprotocol/ext-tasks``
  0.2.2, ``ts_tasks/oauth_client.mjs``), with client credentials (its ``ClientCredentialsProvider``), the
  task followed by the ext-tasks session through a raw dispatch wrapped in the SDK's ``withOAuth``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.clients import mcp2_python, run_interactive_client, run_json_client
from tests.support.node import node22, require_packages
from tests.support.oauth_fleet import BASE_SCOPE, DEPLOY_SCOPE, OAuthFleet, running_oauth_fleet
from tests.support.oidc_provider import MACHINE_CLIENT, PUBLIC_CLIENT, OidcProvider
from tests.support.processes import free_port

pytestmark = pytest.mark.e2e

PYTHON_CLIENT = Path(__file__).parent / "clients" / "oauth_mcp2.py"
TS_DIR = Path(__file__).parent / "ts_tasks"
TS_CLIENT = TS_DIR / "oauth_client.mjs"
TS_PINNED = {"@modelcontextprotocol/ext-tasks": "0.2.2", "@modelcontextprotocol/client": "2.4.0"}
TS_SETUP_HINT = "run bash scripts/test.sh (it fetches Node 22 and runs npm ci in tests/e2e/ts_tasks)"
CLIENT_TIMEOUT_S = 60
STEPPED_UP = f"{BASE_SCOPE} {DEPLOY_SCOPE}"


@pytest.fixture(scope="module")
def fleet(oidc_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthFleet]:
    with running_oauth_fleet(tmp_path_factory.mktemp("oauth-clients"), oidc_provider) as running:
        yield running


def machine_args(fleet: OAuthFleet) -> list[str]:
    assert MACHINE_CLIENT.client_secret is not None
    return [
        "--issuer",
        fleet.provider.issuer,
        "--client-id",
        MACHINE_CLIENT.client_id,
        "--client-secret",
        MACHINE_CLIENT.client_secret,
    ]


def challenge_401(fleet: OAuthFleet) -> str:
    return f'Bearer resource_metadata="{fleet.metadata_url}", scope="{BASE_SCOPE}"'


def challenge_403(fleet: OAuthFleet) -> str:
    return f'Bearer resource_metadata="{fleet.metadata_url}", error="insufficient_scope", scope="{DEPLOY_SCOPE}"'


def exchanges(wire: list[dict[str, Any]], fleet: OAuthFleet) -> list[tuple[str, str, int]]:
    """The wire as ``(method, where, status)``: ``mcp`` for the server's endpoint, ``prm`` for its metadata,
    the provider's paths as they are."""
    names = {fleet.url: "mcp", fleet.metadata_url: "prm"}
    issuer = fleet.provider.issuer
    return [
        (
            entry.get("method") or entry["http"],
            names.get(entry["url"], entry["url"].replace(issuer, "AS")),
            entry["status"],
        )
        for entry in http(wire)
    ]


def http(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The HTTP exchanges of a wire log (the TypeScript one also notes what its raw dispatch did)."""
    return [entry for entry in wire if "url" in entry]


def assert_discovered_from_the_server(wire: list[dict[str, Any]], fleet: OAuthFleet) -> None:
    """The first request went without a token and got the challenge; the client then read the metadata
    it names, then the issuer's, then asked the token endpoint, before any request went with a token."""
    wire = http(wire)
    print("\n".join(f"{method} {where} -> {status}" for method, where, status in exchanges(wire, fleet)))
    first = wire[0]
    assert (first["url"], first["status"], first["bearer"]) == (fleet.url, 401, False)
    assert first["wwwAuthenticate"] == challenge_401(fleet)
    seen = exchanges(wire, fleet)
    prm = seen.index(("GET", "prm", 200))
    issuer_metadata = next(
        index for index, (_, where, status) in enumerate(seen) if where.startswith("AS/.well-known/") and status == 200
    )
    token = seen.index(("POST", "AS/token", 200))
    first_bearer = next(index for index, entry in enumerate(wire) if entry["bearer"])
    assert 0 < prm < issuer_metadata < token < first_bearer, seen
    assert not any(entry["url"] == fleet.url and entry["status"] == 401 for entry in wire[1:]), seen


def assert_stepped_up(wire: list[dict[str, Any]], fleet: OAuthFleet) -> None:
    """One 403 insufficient_scope, then a new token, then the same call served."""
    wire = http(wire)
    refused = [index for index, entry in enumerate(wire) if entry["status"] == 403]
    assert len(refused) == 1, exchanges(wire, fleet)
    assert wire[refused[0]]["wwwAuthenticate"] == challenge_403(fleet)
    after = exchanges(wire[refused[0] + 1 :], fleet)
    assert ("POST", "AS/token", 200) in after
    assert after[-1] == ("POST", "mcp", 200), after


def assert_python_run(observed: dict[str, Any], fleet: OAuthFleet, subject: str, client_id: str) -> None:
    assert observed["protocolVersion"] == "2026-07-28"
    assert observed["toolsBefore"] == ["approve", "echo", "greet", "sleepy", "whoami"]
    assert observed["toolsAfter"] == ["approve", "deploy", "echo", "greet", "sleepy", "whoami"]
    assert observed["whoami"]["isError"] is False
    seen = json.loads(observed["whoami"]["texts"][0])
    assert (seen["issuer"], seen["subject"], seen["client_id"]) == (fleet.provider.issuer, subject, client_id)
    assert seen["scopes"] == [BASE_SCOPE]  # what the 401 asked for, nothing more
    assert observed["deploy"] == {"texts": [f"billing deployed to production for {subject}"], "isError": False}
    for tool in ("whoami", "deploy"):
        task = observed["tasks"][tool]
        assert task["created"]["resultType"] == "task"
        assert task["statuses"][-1] == "completed"
    # The SDK asked for the challenge's scope first, then for the union once a tool needed more.
    assert [set(scope.split()) for scope in observed["tokenScopes"]] == [{BASE_SCOPE}, set(STEPPED_UP.split())]
    assert_discovered_from_the_server(observed["wire"], fleet)
    assert_stepped_up(observed["wire"], fleet)


def test_the_python_sdk_client_with_client_credentials(fleet: OAuthFleet) -> None:
    observed = run_json_client(
        mcp2_python(), PYTHON_CLIENT, fleet.url, *machine_args(fleet), timeout_s=CLIENT_TIMEOUT_S, context=fleet.logs
    )
    assert_python_run(observed, fleet, subject="machine", client_id="machine")
    assert observed["authorizations"] == []


def test_the_python_sdk_client_with_the_authorization_code_flow(fleet: OAuthFleet) -> None:
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    asked: list[dict[str, str]] = []

    def play_browser(url: str) -> str:
        query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
        asked.append(query)
        return fleet.provider.play_browser(url)

    argv = [
        str(mcp2_python()),
        str(PYTHON_CLIENT),
        fleet.url,
        "--grant",
        "authorization_code",
        "--issuer",
        fleet.provider.issuer,
        "--client-id",
        PUBLIC_CLIENT.client_id,
        "--redirect-uri",
        redirect_uri,
    ]
    observed = run_interactive_client(argv, play_browser, timeout_s=CLIENT_TIMEOUT_S, context=fleet.logs)

    assert_python_run(observed, fleet, subject="alice", client_id=PUBLIC_CLIENT.client_id)
    # Twice through the browser: the first token, then the step-up; PKCE S256 and the resource each time.
    # The SDK adds offline_access (with prompt=consent) as the provider advertises it and the client may
    # refresh; the resource's tokens never carry it.
    assert [set(query["scope"].split()) for query in asked] == [
        {BASE_SCOPE, "offline_access"},
        {*STEPPED_UP.split(), "offline_access"},
    ]
    for query in asked:
        assert query["prompt"] == "consent"
        assert query["code_challenge_method"] == "S256"
        assert len(query["code_challenge"]) == 43
        assert query["resource"] == fleet.resource
        assert query["client_id"] == PUBLIC_CLIENT.client_id
        assert query["redirect_uri"] == redirect_uri


def test_the_typescript_client_with_client_credentials(fleet: OAuthFleet) -> None:
    require_packages(TS_DIR, TS_PINNED, TS_SETUP_HINT)
    node = node22(TS_SETUP_HINT)
    observed = run_json_client(
        node, TS_CLIENT, "--url", fleet.url, *machine_args(fleet), timeout_s=CLIENT_TIMEOUT_S, context=fleet.logs
    )
    assert observed["ok"], json.dumps(observed.get("error"))
    assert observed["connection"] == {
        "era": "modern",
        "protocolVersion": "2026-07-28",
        "serverExtensions": {"io.modelcontextprotocol/tasks": {}},
    }
    assert observed["tokenScope"] == BASE_SCOPE
    assert observed["tools"] == ["approve", "echo", "greet", "sleepy", "whoami"]
    whoami = observed["whoami"]
    assert whoami["kind"] == "task"
    assert whoami["outcome"]["status"] == "completed"
    seen = json.loads(whoami["outcome"]["result"]["texts"][0])
    assert (seen["issuer"], seen["subject"], seen["client_id"]) == (fleet.provider.issuer, "machine", "machine")
    assert [event["status"] for event in whoami["events"]][-1] == "completed"
    assert_discovered_from_the_server(observed["wire"], fleet)
    # Every task request went with the token (the raw dispatch, through withOAuth).
    task_requests = [entry for entry in observed["wire"] if entry.get("rpc") in ("tools/call", "tasks/get")]
    assert task_requests
    assert all(entry["bearer"] and entry["status"] == 200 for entry in task_requests), task_requests
