"""What each flow-control feature costs a task's lifecycle in Valkey commands (issue 29), on one Valkey,
in the style of the lifecycle's command budget (``test_admin.py``): ``INFO commandstats`` over sequential
lifecycles (create, run, complete, then ``tasks/get`` until completed), counted with one poll each.

* nothing on: within the lifecycle budget (20), flow control costing nothing unless configured;
* a tool with ``concurrency=N``, a keyed tool (``concurrency_key``), the principal cap
  (``EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL``): one gate each, entered at creation, entered again by the
  worker as it takes the run (the place held: renewed) and left as it ends: **3 scripts**, and the
  commands those scripts run on a gate nobody else uses (:data:`GATE_COMMANDS`);
* the creation rate (``EXT_TASKS_CREATE_RATE_PER_PRINCIPAL``): one token taken at creation, **1
  script** (:data:`TOKEN_COMMANDS`).

The figures are printed for the issue's note. The byte budget (on by default, measured apart in
``test_admin.py``) is off here, so the baseline is the budget's own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from valkey import Valkey

from tests.support.cluster import keygen
from tests.support.command_counts import commands, wait_until_quiet
from tests.support.mcp_http import post
from tests.support.processes import running_server
from tests.support.valkey import ValkeyServer, running_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.flow_cost_tools"
TASKS: Final[dict[str, Any]] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
#: The lifecycle's budget (``test_admin.LIFECYCLE_BUDGET``, the benchmark report's "≤ 20").
LIFECYCLE_BUDGET: Final = 20
LIFECYCLES: Final = 20
WAIT_S: Final = 30.0
SCRIPT_CALLS: Final = ("evalsha", "eval", "fcall")
#: Commands (the scripts' own calls included) of one lifecycle's passage through a gate nobody else uses,
#: by ext_tasks/store/valkey/gates.py's scripts: entering at creation 8 (EVALSHA; ZSCORE; dropping lapsed
#: holds and waits, 2; ZCARD holders, ZCARD line; ZADD; PEXPIRE on the new key), entering again as the
#: worker takes the run 4 (EVALSHA; ZSCORE: held; ZADD; PEXPIRE GT) and leaving 6 (EVALSHA; ZREM from
#: holders; the same 2; ZCARD; ZRANGE of the line).
GATE_COMMANDS: Final = 18
#: Commands of one token taken from a creation-rate bucket (EVALSHA; HMGET, HSET, PEXPIRE).
TOKEN_COMMANDS: Final = 4


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    with running_valkey(tmp_path_factory.mktemp("flow-costs") / "valkey") as server:
        yield server


def lifecycle_cost(valkey: ValkeyServer, tmp_path: Path, tool: str, arguments: dict[str, Any],
                   settings: dict[str, str] | None = None) -> tuple[float, Counter[str]]:  # fmt: skip
    """Commands per lifecycle of ``tool`` (one poll counted, as the budget is), and per command name."""
    env = {
        "EXT_TASKS_VALKEY_URL": valkey.url,
        "EXT_TASKS_STATE_KEYS": keygen(),
        "EXT_TASKS_MAX_STORED_BYTES": "0",  # the budget's baseline: its cost is test_admin.py's business
        "EXT_TASKS_LEASE_S": "600",  # no reclaim pass nor heartbeat inside the window
        **(settings or {}),
    }
    with running_server(tmp_path, tools=TOOLS, env=env) as server, httpx.Client(timeout=10.0) as http:

        def run_one() -> int:
            """One lifecycle; the polls it took."""
            _, created = post(http, server.url, "tools/call", {"name": tool, "arguments": arguments},
                              capabilities=TASKS)  # fmt: skip
            task_id = created["result"]["taskId"]
            deadline, polls = time.monotonic() + WAIT_S, 0
            while True:
                polls += 1
                status = post(http, server.url, "tasks/get", {"taskId": task_id}, capabilities=TASKS)[1]
                if status["result"]["status"] == "completed":
                    return polls
                assert time.monotonic() < deadline, f"{task_id} not completed"
                time.sleep(0.001)

        run_one()  # the scripts loaded, the connections open
        counter = Valkey(host="127.0.0.1", port=valkey.port, decode_responses=True)
        try:
            wait_until_quiet(counter, WAIT_S)  # the warm-up's last steps are not counted
            counter.config_resetstat()
            polls = sum(run_one() for _ in range(LIFECYCLES))
            wait_until_quiet(counter, WAIT_S)  # a run's last step (its places given back) is counted
            hot = commands(counter)
        finally:
            counter.close()  # type: ignore[no-untyped-call]
    # Each poll past the first is one HGETALL: counted as the budget counts it, one poll a lifecycle.
    return (sum(hot.values()) - (polls - LIFECYCLES)) / LIFECYCLES, hot


def per_lifecycle(calls: Counter[str], names: tuple[str, ...]) -> float:
    return sum(calls[name] for name in names) / LIFECYCLES


@pytest.fixture(scope="module")
def baseline(valkey: ValkeyServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[float, Counter[str]]:
    return lifecycle_cost(valkey, tmp_path_factory.mktemp("baseline"), "instant", {})


def test_nothing_on_costs_nothing_and_stays_within_the_budget(baseline: tuple[float, Counter[str]]) -> None:
    cost, calls = baseline
    print(f"\nnothing on: {cost:.2f} Valkey commands per lifecycle, {per_lifecycle(calls, SCRIPT_CALLS):.2f} "
          f"scripts; {dict(calls)}")  # fmt: skip
    assert cost <= LIFECYCLE_BUDGET
    assert not {"zrank", "zrangebyscore", "zremrangebyscore", "pexpire"} & set(calls)  # no gate entered, no bucket


@pytest.mark.parametrize(
    ("feature", "tool", "arguments", "settings", "scripts", "extra"),
    [
        pytest.param("concurrency=2", "counted", {}, {}, 3, GATE_COMMANDS, id="tool-concurrency"),
        pytest.param("concurrency_key", "keyed", {"service": "billing"}, {}, 3, GATE_COMMANDS, id="keyed"),
        pytest.param("principal cap", "instant", {}, {"EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL": "4"}, 3, GATE_COMMANDS,
                     id="principal-cap"),
        pytest.param("creation rate", "instant", {}, {"EXT_TASKS_CREATE_RATE_PER_PRINCIPAL": "1000"}, 1,
                     TOKEN_COMMANDS, id="creation-rate"),
    ],
)  # fmt: skip
def test_what_each_feature_costs_a_lifecycle(
    valkey: ValkeyServer,
    baseline: tuple[float, Counter[str]],
    tmp_path: Path,
    feature: str,
    tool: str,
    arguments: dict[str, Any],
    settings: dict[str, str],
    scripts: int,
    extra: int,
) -> None:
    base_cost, base_calls = baseline
    cost, calls = lifecycle_cost(valkey, tmp_path, tool, arguments, settings)
    added = Counter({name: (calls[name] - base_calls[name]) / LIFECYCLES for name in calls | base_calls})
    print(f"\n{feature}: {cost:.2f} Valkey commands per lifecycle (+{cost - base_cost:.2f} over nothing on), "
          f"+{per_lifecycle(calls, SCRIPT_CALLS) - per_lifecycle(base_calls, SCRIPT_CALLS):.2f} scripts; "
          f"added per lifecycle: { {name: n for name, n in added.items() if n} }")  # fmt: skip
    assert per_lifecycle(calls, SCRIPT_CALLS) - per_lifecycle(base_calls, SCRIPT_CALLS) == scripts
    # Exact but for a worker's idle blocking read timing out inside one window or the other (1 s apart).
    assert abs(cost - base_cost - extra) <= 2 / LIFECYCLES, (cost, base_cost, dict(added))
