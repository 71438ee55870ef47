"""What a waiting legacy ``tasks/result`` costs the store: Valkey commands over a quiet window.

A server on one Valkey (its task workers off, so the task stays ``working``); a 2025-11-25 session starts
a long task. The window is measured twice with ``INFO commandstats``: the server idle, then with one
``tasks/result`` waiting on that task. Before issue 27 the wait read the task every poll interval (15
commands in 10 s); now it follows the task's changes (only the pub/sub connection's PING, as when idle).

Run::

    python -m investigations.legacy_wait            # 10 s windows
    python -m investigations.legacy_wait --seconds 3
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import valkey

from ext_tasks.protocol.resume import generate_key
from tests.support.legacy import Session
from tests.support.processes import running_server
from tests.support.valkey import running_valkey

#: Time for the server and the wait to settle before a window opens.
SETTLE_S = 1.0


def command_counts(client: Any) -> dict[str, int]:
    info = client.info("commandstats")
    return {name: stats["calls"] for name, stats in info.items() if name != "cmdstat_info"}


def window(client: Any, seconds: float) -> dict[str, int]:
    """The commands Valkey ran in the next ``seconds`` (the INFO calls that measure it aside)."""
    before = command_counts(client)
    time.sleep(seconds)
    after = command_counts(client)
    return {name: count - before.get(name, 0) for name, count in after.items() if count - before.get(name, 0)}


def wait_in_background(url: str, headers: dict[str, str], body: dict[str, Any]) -> None:
    """Send ``body`` and wait for its answer on a daemon thread (what comes back is not the point)."""

    def waiting() -> None:
        with contextlib.suppress(httpx.HTTPError):
            accept = {"Accept": "text/event-stream, application/json", **headers}
            with httpx.stream("POST", url, headers=accept, json=body, timeout=None) as response:
                for _ in response.iter_bytes():
                    pass

    threading.Thread(target=waiting, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m investigations.legacy_wait", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each window")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_valkey(Path(tmp) / "valkey") as store:
        env = {"EXT_TASKS_VALKEY_URL": store.url, "EXT_TASKS_STATE_KEYS": generate_key()}
        with running_server(
            Path(tmp), tools="ext_tasks.examples.conformance", env=env, extra_args=("--no-task-workers",)
        ) as server:
            client = valkey.Valkey(port=store.port)
            session = Session(server.url)
            task_id = session.start_task("slow_compute", {"seconds": 1000})
            time.sleep(SETTLE_S)
            idle = window(client, args.seconds)
            body = session.body("tasks/result", {"taskId": task_id})
            wait_in_background(server.url, session.headers, body)
            time.sleep(SETTLE_S)
            waiting = window(client, args.seconds)
    print(f"{args.seconds:g} s, server idle: {sum(idle.values())} commands {idle}")
    print(f"{args.seconds:g} s, one tasks/result waiting: {sum(waiting.values())} commands {waiting}")


if __name__ == "__main__":
    main()
