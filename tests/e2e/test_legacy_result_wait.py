"""A waiting 2025-11-25 ``tasks/result`` costs the store nothing while its task does not change.

A server on a real Valkey, without task workers (so the task stays ``working`` and no worker touches the
store). A legacy session waits in ``tasks/result``; over a quiet window the store sees no command but the
pub/sub connection's periodic PING (one per process, however many requests wait). Then a change of the
task (a ``tasks/cancel`` from another request) ends the wait at once: the wait follows the task through
a ``subscriptions/listen`` instead of reading it every poll interval.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import pytest
import valkey

from tests.support.cluster import keygen, wait_for
from tests.support.legacy import WAIT_S, Session, Stream
from tests.support.processes import ServerProcess, running_server
from tests.support.valkey import ValkeyServer, running_valkey

pytestmark = pytest.mark.e2e

TOOLS = "ext_tasks.examples.conformance"
QUIET_WINDOW_S = 3.0
#: Commands that cost nothing per waiting request: the INFO this test sends, the pub/sub liveness PING.
NOT_PER_REQUEST = {"cmdstat_info", "cmdstat_ping"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(tmp_path_factory.mktemp("legacy-wait-valkey")) as running:
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, store: ValkeyServer) -> Iterator[ServerProcess]:
    env = {"EXT_TASKS_VALKEY_URL": store.url, "EXT_TASKS_STATE_KEYS": keygen(), "EXT_TASKS_KEEPALIVE_S": "0.5"}
    directory = tmp_path_factory.mktemp("legacy-wait")
    with running_server(directory, tools=TOOLS, env=env, extra_args=("--no-task-workers",)) as running:
        yield running


def _calls(client: valkey.Valkey) -> dict[str, int]:
    stats: dict[str, dict[str, int]] = client.info("commandstats")  # type: ignore[assignment]  # sync client
    return {name: entry["calls"] for name, entry in stats.items()}


def _commands_over(client: valkey.Valkey, seconds: float) -> dict[str, int]:
    before = _calls(client)
    time.sleep(seconds)  # the quiet window itself is what is measured
    after = _calls(client)
    moved = {name: after[name] - before.get(name, 0) for name in after}
    return {name: count for name, count in moved.items() if count and name not in NOT_PER_REQUEST}


def test_a_waiting_tasks_result_reads_nothing_until_its_task_changes(
    server: ServerProcess, store: ValkeyServer
) -> None:
    client = valkey.Valkey(host="127.0.0.1", port=store.port)
    channels = functools.partial(client.execute_command, "PUBSUB", "SHARDCHANNELS")
    session = Session(server.url)
    task_id = session.start_task("slow_compute", {"seconds": 600})
    body = {"jsonrpc": "2.0", "id": "wait-1", "method": "tasks/result", "params": {"taskId": task_id}}
    waiting = Stream(session, "POST", body)
    try:
        # The wait follows the task once its channel has a subscriber, and has read the task once that
        # subscription is acknowledged: the store is then quiet.
        wait_for(channels, WAIT_S, message="the subscription")
        wait_for(lambda: _commands_over(client, 0.2) == {}, WAIT_S, message="the first read to pass")
        assert _commands_over(client, QUIET_WINDOW_S) == {}

        started = time.monotonic()
        cancelled = session.call("tasks/cancel", {"taskId": task_id})
        assert cancelled["result"]["status"] == "cancelled", cancelled
        final = waiting.final.get(timeout=WAIT_S)
        assert final["id"] == "wait-1" and "error" in final, final  # a cancelled task's outcome is an error
        assert time.monotonic() - started < 1.0  # woken by the change, not by a poll
    finally:
        waiting.close()
        session.close()
        client.connection_pool.disconnect()
