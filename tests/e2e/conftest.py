"""Shared end-to-end fixtures: fleets of three servers on one Valkey behind nginx (``tests.support.cluster``).

The module-scoped fleets are started once per test module; tests using them must leave them usable
(no killed instances, no tasks left running). A test that breaks a fleet starts its own with
``running_cluster`` instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster, running_cluster

CONFORMANCE_TOOLS = "ext_tasks.examples.conformance"
TASK_TOOLS = "tests.e2e.task_tools"


@pytest.fixture(scope="module")
def conformance_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three servers with the conformance referee's fixtures, one Valkey, nginx round-robin."""
    with running_cluster(tmp_path_factory.mktemp("conformance-cluster"), tools=CONFORMANCE_TOOLS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tools_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three servers with ``tests.e2e.task_tools``, one Valkey, nginx round-robin."""
    with running_cluster(tmp_path_factory.mktemp("tools-cluster"), tools=TASK_TOOLS) as cluster:
        yield cluster
