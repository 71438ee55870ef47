"""Fixtures every test directory shares: the expensive ones are started once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.valkey_cluster import ValkeyCluster, running_valkey_cluster


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    """One real Valkey Cluster (three primaries, three replicas) for the whole session; tests keep
    apart by key prefix. Formed only when a test asks for it (about 2 s)."""
    with running_valkey_cluster(Path(tmp_path_factory.mktemp("valkey-cluster"))) as cluster:
        yield cluster


@pytest.fixture(scope="session", autouse=True)
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The client commands the tests run (in this process or in children, which inherit the variable)
    keep their task record in a directory of the session, never in the user's own state directory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXT_TASKS_STATE_DIR", str(tmp_path_factory.mktemp("ext-tasks-state")))
        yield
