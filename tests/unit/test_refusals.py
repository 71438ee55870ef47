"""Which of Valkey's error replies are refusals that pass (:func:`ext_tasks.store.connection.refusals.refusal_reason`),
built by valkey-py's own parser and pipeline, for the replies a test server cannot easily be made to send
(a failed background save, a failover unblocking a read); the others are checked against real servers in
``tests/contract/test_store_refusals.py``."""

from __future__ import annotations

from typing import Any

import pytest
from valkey._parsers.base import BaseParser
from valkey.asyncio.client import Pipeline
from valkey.asyncio.cluster import ClusterParser

from ext_tasks.store.connection.refusals import refusal_reason

REFUSALS = {
    "OOM command not allowed when used memory > 'maxmemory'.": "oom",
    "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.": "busy",
    "LOADING Valkey is loading the dataset in memory": "loading",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.": "masterdown",
    "NOREPLICAS Not enough good replicas to write.": "noreplicas",
    "MISCONF Errors writing to the AUTOMATIC snapshot are disabled because the last save failed.": "misconf",
    "READONLY You can't write against a read only replica.": "readonly",
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)": "unblocked",
}
ANSWERS = (
    "BUSYGROUP Consumer Group name already exists",
    "BUSYKEY Target key name already exists.",
    "NOGROUP No such key 'runs' or consumer group 'workers'",
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "ERR unknown command 'XGROUP'",
    "NOSCRIPT No matching script. Please use EVAL.",
)


def parsed(reply: str, parser: Any = BaseParser) -> Exception:
    """The exception valkey-py raises for the error reply ``reply`` (as a plain or a cluster client)."""
    error: Exception = parser.parse_error(reply)
    return error


@pytest.mark.parametrize(("reply", "reason"), REFUSALS.items())
def test_a_refusal_is_told_apart_plain_from_a_cluster_node_and_inside_a_pipeline(reply: str, reason: str) -> None:
    assert refusal_reason(parsed(reply)) == reason
    assert refusal_reason(parsed(reply, ClusterParser)) == reason
    piped = parsed(reply)
    Pipeline.annotate_exception(None, piped, 2, ("SET", "k", "v"))  # type: ignore[arg-type]
    assert str(piped).startswith("Command # 2 (SET k v) of pipeline caused error:"), piped
    assert refusal_reason(piped) == reason


@pytest.mark.parametrize("reply", ANSWERS)
def test_an_answer_or_a_mistake_is_no_refusal(reply: str) -> None:
    assert refusal_reason(parsed(reply)) is None
    piped = parsed(reply)
    Pipeline.annotate_exception(None, piped, 1, ("XGROUP", "CREATE"))  # type: ignore[arg-type]
    assert refusal_reason(piped) is None
    assert refusal_reason(ValueError("OOM")) is None
