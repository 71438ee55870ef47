"""The store URL forms: what each names, and a clear refusal of what names nothing."""

from __future__ import annotations

import re

import pytest

from ext_tasks.store.connection.urls import Endpoint, SentinelTarget, cluster_seeds, sentinel_target


def test_a_sentinel_url_names_the_sentinels_the_primary_and_the_database() -> None:
    assert sentinel_target("valkey+sentinel://10.0.0.1:26379,[::1]:26380/tasks/3") == SentinelTarget(
        [Endpoint("10.0.0.1", 26379), Endpoint("::1", 26380)], "tasks", 3, {}
    )
    assert sentinel_target("valkey+sentinel://s:1/tasks").db == 0


def test_credentials_in_a_sentinel_url_are_the_data_nodes_and_may_be_escaped() -> None:
    target = sentinel_target("valkey+sentinel://app:p%40ss@s1:26379/tasks")
    assert target.credentials == {"username": "app", "password": "p@ss"}
    assert target.sentinels == [Endpoint("s1", 26379)]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("valkey+sentinel://s1:26379", "monitored primary's name"),
        ("valkey+sentinel://s1:26379/", "monitored primary's name"),
        ("valkey+sentinel://s1:26379/tasks/0/extra", "monitored primary's name"),
        ("valkey+sentinel://s1:26379/tasks/zero", "is not a number"),
        ("valkey+sentinel://s1/tasks", "is not HOST:PORT"),
        ("valkey+sentinel://s1:port/tasks", "is not HOST:PORT"),
        ("valkey://s1:26379/tasks", "not a valkey+sentinel"),
    ],
)
def test_a_sentinel_url_that_names_nothing_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        sentinel_target(url)


def test_cluster_seeds_share_the_host_list_syntax() -> None:
    assert cluster_seeds("valkey+cluster://u:pw@a:7000,b:7001") == (
        [Endpoint("a", 7000), Endpoint("b", 7001)],
        {"username": "u", "password": "pw"},
    )
    with pytest.raises(ValueError, match="cluster seed 'a' is not HOST:PORT"):
        cluster_seeds("valkey+cluster://a")
