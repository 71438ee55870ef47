"""A fleet (``tests.support.cluster``: three servers on one Valkey behind nginx) that is an OAuth 2.1
resource server of a running ``oidc-provider`` (``tests.support.oidc_provider``), and raw requests to it.

::

    with running_oauth_fleet(tmp_path, provider) as fleet:
        fleet.resource                    # http://127.0.0.1:<nginx port>/mcp: the URL clients use, and the audience
        token = provider.client_credentials_token("tasks:read", fleet.resource)
        response, message = rpc(fleet.url, "tools/list", token=token)

The resource is the nginx URL, known before the servers start (its port is chosen first), and is made a
resource of the provider with its own scopes (:data:`RESOURCE_SCOPES`: the provider drops from a token any
scope its resource does not list) and token format (JWT, or opaque for introspection).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from .cluster import Cluster, running_cluster, wait_for
from .mcp_http import post
from .oidc_provider import RESOURCE_SERVER_CLIENT, OidcProvider, ResourceSpec, TokenFormat
from .processes import free_port

TOOLS: Final = "tests.e2e.oauth_tools"
#: What every request needs (``EXT_TASKS_AUTH_SCOPES``), so every 401 names it.
BASE_SCOPE: Final = "tasks:read"
#: The scope of the tools module's ``deploy`` tool.
DEPLOY_SCOPE: Final = "deploy:production"
RESOURCE_SCOPES: Final = (BASE_SCOPE, "tasks:write", DEPLOY_SCOPE)
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
CAPS: Final[Mapping[str, Any]] = {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
TASK_DEADLINE_S: Final = 10.0


@dataclass
class OAuthFleet:
    cluster: Cluster
    provider: OidcProvider
    resource: str

    @property
    def url(self) -> str:
        """The MCP endpoint through nginx: the resource itself."""
        return self.cluster.url

    @property
    def metadata_url(self) -> str:
        """Where the challenges send clients (RFC 9728 §3.1, the path form)."""
        return self.resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")

    @property
    def instances(self) -> list[str]:
        """Each server's own ``/mcp`` URL (behind nginx, they all serve the one resource)."""
        return [server.url for server in self.cluster.servers]

    def logs(self) -> str:
        return f"{self.cluster.logs()}\n--- oidc-provider\n{self.provider.log()[-4000:]}"


def oauth_env(provider: OidcProvider, resource: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of a resource server of ``provider``: its issuer, this resource, the base scope, and
    introspection with the provider's client for resource servers."""
    assert RESOURCE_SERVER_CLIENT.client_secret is not None
    return {
        "EXT_TASKS_AUTH_ISSUERS": provider.issuer,
        "EXT_TASKS_AUTH_RESOURCE": resource,
        "EXT_TASKS_AUTH_SCOPES": BASE_SCOPE,
        "EXT_TASKS_AUTH_INTROSPECTION_URL": provider.metadata["introspection_endpoint"],
        "EXT_TASKS_AUTH_CLIENT_ID": RESOURCE_SERVER_CLIENT.client_id,
        "EXT_TASKS_AUTH_CLIENT_SECRET": RESOURCE_SERVER_CLIENT.client_secret,
        "EXT_TASKS_POLL_INTERVAL_MS": "50",
        **(extra or {}),
    }


@contextlib.contextmanager
def running_oauth_fleet(
    directory: Path,
    provider: OidcProvider,
    *,
    token_format: TokenFormat = "jwt",
    env: Mapping[str, str] | None = None,
    tools: str = TOOLS,
    access_token_ttl_s: int = ResourceSpec.access_token_ttl_s,
) -> Iterator[OAuthFleet]:
    """Three servers of ``tools`` behind nginx, the resource server of ``provider`` for the nginx URL; its
    access tokens live ``access_token_ttl_s``."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    spec = ResourceSpec(scopes=RESOURCE_SCOPES, token_format=token_format, access_token_ttl_s=access_token_ttl_s)
    provider.add_resource(resource, spec)
    settings = oauth_env(provider, resource, env)
    with running_cluster(directory, tools=tools, env=settings, balancer_port=port) as cluster:
        yield OAuthFleet(cluster, provider, resource)


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def rpc(
    url: str, method: str, params: Mapping[str, Any] | None = None, *, token: str | None = None, **options: Any
) -> tuple[httpx.Response, dict[str, Any]]:
    """One 2026-07-28 request (``tests.support.mcp_http``), with the tasks extension declared unless
    ``capabilities`` says otherwise, and ``token`` as a bearer token."""
    options.setdefault("capabilities", CAPS)
    with httpx.Client(timeout=10.0, headers=bearer(token)) as client:
        return post(client, url, method, params or {}, **options)


def result(url: str, method: str, params: Mapping[str, Any] | None = None, *, token: str) -> dict[str, Any]:
    """The ``result`` of a request that must succeed."""
    response, message = rpc(url, method, params, token=token)
    assert response.status_code == 200 and "result" in message, (response.status_code, message)
    answer: dict[str, Any] = message["result"]
    return answer


def start_task(url: str, tool: str, arguments: Mapping[str, Any], *, token: str) -> str:
    created = result(url, "tools/call", {"name": tool, "arguments": dict(arguments)}, token=token)
    assert created["resultType"] == "task", created
    task_id: str = created["taskId"]
    return task_id


def task_in(
    url: str, task_id: str, statuses: frozenset[str], *, token: str, timeout_s: float = TASK_DEADLINE_S
) -> dict[str, Any]:
    """``tasks/get`` polled (every 50 ms, within ``timeout_s``) until the task's status is one of ``statuses``."""

    def reached() -> dict[str, Any] | None:
        task = result(url, "tasks/get", {"taskId": task_id}, token=token)
        return task if task["status"] in statuses else None

    found: dict[str, Any] = wait_for(reached, timeout_s, message=f"task {task_id} in {sorted(statuses)}")
    return found
