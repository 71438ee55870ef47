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
