"""``python -m bench.scaling DIR``: the shard arithmetic of docs/scaling.md, from a benchmark run's
``DIR/results.json`` (medians over its rounds), so the figures in the doc can be recomputed.

Valkey CPU per operation comes from two measurements of the same run:

* **under load** (what capacity planning needs: Valkey batches the replies of many clients): the
  valkey-server CPU per HTTP request of ``tasks_get`` at its highest concurrency and of ``lifecycle`` at
  c=16, on one Valkey (``ext-hc-vk``); a task's own share is the lifecycle's cost minus its polls;
* **sequential** (``bench.commands``, one client: every command pays its own round trip): an upper bound.

The fleet: ``creations`` tasks/s, and ``clients`` clients each polling one task at the advertised
interval (a tenth of the task's age, between 250 ms and 5 s). By Little's law ``clients / creations``
is how long a task lives; the polls a task of that life receives follow from the interval.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: A primary kept at most this busy: room for replication, persistence, a slot migration, a failover.
UTILISATION = 0.7
PARTITIONS = 16
POLL_FLOOR_S = 0.25
POLL_CEILING_S = 5.0


def polls_per_task(life_s: float) -> float:
    """Polls a client makes over a task's life at the advertised interval ``clamp(age / 10)``."""
    floor_until = POLL_FLOOR_S * 10  # age at which age/10 reaches the floor interval
    ceiling_from = POLL_CEILING_S * 10
    polls = min(life_s, floor_until) / POLL_FLOOR_S
    if life_s > floor_until:
        polls += 10 * math.log(min(life_s, ceiling_from) / floor_until)
    if life_s > ceiling_from:
        polls += (life_s - ceiling_from) / POLL_CEILING_S
    return polls


def _median(records: list[dict[str, Any]], stack: str, workload: str, concurrency: int, field: str) -> float:
    values = [
        r[field]
        for r in records
        if r["stack"] == stack and r["workload"] == workload and r["concurrency"] == concurrency and r[field]
    ]
    if not values:
        raise SystemExit(f"no {workload}@c{concurrency} of {stack} with {field} in this run")
    return float(statistics.median(values))


def arithmetic(results: dict[str, Any], creations: float, clients: float, stack: str = "ext-hc-vk") -> dict[str, Any]:
    records = results["records"]
    get_c = max(r["concurrency"] for r in records if r["stack"] == stack and r["workload"] == "tasks_get")
    get_us = _median(records, stack, "tasks_get", get_c, "valkey_cpu_us_per_request")
    per_request = _median(records, stack, "lifecycle", 16, "valkey_cpu_us_per_request")
    requests_per_op = _median(records, stack, "lifecycle", 16, "requests_per_s") / _median(
        records, stack, "lifecycle", 16, "ops_per_s"
    )
    task_us = per_request * requests_per_op - (requests_per_op - 1) * get_us
    server_get_us = _median(records, stack, "tasks_get", get_c, "server_cpu_us_per_request")
    sequential = results["meta"].get("store_costs", {}).get(stack, {})
    life_s = clients / creations
    polls_s = creations * polls_per_task(life_s)
    cores = (creations * task_us + polls_s * get_us) / 1e6
    return {
        "valkey_us_per_task_loaded": task_us,
        "valkey_us_per_get_loaded": get_us,
        "valkey_us_per_lifecycle_sequential": sequential.get("lifecycle", {}).get("valkey_cpu_us"),
        "valkey_us_per_get_sequential": sequential.get("tasks_get", {}).get("valkey_cpu_us"),
        "commands_per_lifecycle": sequential.get("lifecycle", {}).get("commands"),
        "commands_per_lifecycle_input": sequential.get("lifecycle_input", {}).get("commands"),
        "tasks_per_s_per_shard": UTILISATION * 1e6 / task_us,
        "gets_per_s_per_shard": UTILISATION * 1e6 / get_us,
        "task_life_s": life_s,
        "polls_per_task": polls_per_task(life_s),
        "polls_per_s": polls_s,
        "polls_per_s_at_floor": clients / POLL_FLOOR_S,
        "polls_per_s_at_ceiling": clients / POLL_CEILING_S,
        "valkey_cores": cores,
        "shards": math.ceil(cores / UTILISATION),
        "shards_at_floor": math.ceil((creations * task_us + clients / POLL_FLOOR_S * get_us) / 1e6 / UTILISATION),
        "server_us_per_get": server_get_us,
        "server_cores_for_polls": polls_s * server_get_us / 1e6,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a benchmark results folder (with results.json)")
    parser.add_argument("--creations", type=float, default=10_000, help="task creations per second (10,000)")
    parser.add_argument("--clients", type=float, default=100_000, help="clients polling one task each (100,000)")
    args = parser.parse_args(argv)
    results = json.loads((args.run / "results.json").read_text())
    for name, value in arithmetic(results, args.creations, args.clients).items():
        print(f"{name:<38} {value:,.2f}" if isinstance(value, float) else f"{name:<38} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
