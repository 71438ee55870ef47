"""Shared end-to-end fixtures: fleets of three servers behind nginx (``tests.support.cluster``), each
run twice: on one Valkey, and on the session's Valkey Cluster (three primaries, three replicas).

The module-scoped fleets are started once per test module and store; tests using them must leave them
usable (no killed instances, no tasks left running). A test that breaks a fleet starts its own with
``running_cluster`` instead (``store_url`` gives it the same choice of store).

``oidc_provider``: the session's OAuth 2.1 / OpenID authorization server, for the authorization tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster, running_cluster
from tests.support.oidc_provider import OidcProvider, running_oidc_provider

CONFORMANCE_TOOLS = "ext_tasks.examples.conformance"
TASK_TOOLS = "tests.e2e.task_tools"
#: The stores every multi-instance fleet runs on: one Valkey, and the Valkey Cluster.
STORES = ("valkey", "valkey-cluster")


def store_url_for(request: pytest.FixtureRequest, store: str) -> str | None:
    """None for a Valkey of the fleet's own; the session cluster's seed URL for ``valkey-cluster``."""
    if store == "valkey-cluster":
        url: str = request.getfixturevalue("valkey_cluster").url
        return url
    return None


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str | None:
    """For tests that start their own fleet: run them once per store."""
    return store_url_for(request, request.param)


@pytest.fixture(scope="module", params=STORES)
def conformance_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three servers with the conformance referee's fixtures, one store, nginx round-robin."""
    directory = tmp_path_factory.mktemp(f"conformance-{request.param}")
    url = store_url_for(request, request.param)
    with running_cluster(directory, tools=CONFORMANCE_TOOLS, valkey_url=url) as cluster:
        yield cluster


@pytest.fixture(scope="module", params=STORES)
def tools_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three servers with ``tests.e2e.task_tools``, one store, nginx round-robin."""
    directory = tmp_path_factory.mktemp(f"tools-{request.param}")
    url = store_url_for(request, request.param)
    with running_cluster(directory, tools=TASK_TOOLS, valkey_url=url) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """One real authorization server (oidc-provider on Node 22, ``tests.support.oidc_provider``) for the
    whole session, with the default resources and clients; about 0.4 s to start. Its ``rotate_keys`` and
    ``add_resource`` change it for every later test: a test that needs keys or resources of its own starts
    its own with ``running_oidc_provider(tmp_path)``."""
    with running_oidc_provider(tmp_path_factory.mktemp("oidc-provider")) as provider:
        yield provider
