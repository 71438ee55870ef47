"""Figure 4: what one client can make the store keep, and what a task lifecycle costs in Valkey commands.

    python -m investigations.hardening fig4 [--calls 20] [--rounds 15] [--budget-calls 100] [--lifecycles 100]
                                   [--before REV|DIR] [--after REV|DIR] [--versions before after]

One server process on its own valkey-server, default settings except EXT_TASKS_MAX_STORED_BYTES=8 MiB
(a variable the before version does not have, and ignores), one principal (anonymous):

1. CALLS ``tools/call`` of ``keep`` creating tasks (tasks extension declared), each with arguments of
   4 MiB - 2 KiB of JSON (just under the 4 MiB body limit): valkey-server's ``used_memory`` before and
   after (the worker finishes each task meanwhile), and the answers' HTTP statuses;
2. one ``interview`` task and ROUNDS ``tasks/update`` rounds, each answering the outstanding question
   with 4 MiB - 2 KiB of JSON (waiting for the next question between rounds, bounded at 15 s):
   ``MEMORY USAGE`` of the task's record after them, and the rounds accepted;
3. a ``chatter`` task setting a status message of 10,000,000 characters: the length ``tasks/get``
   shows, and ``MEMORY USAGE`` of the record;
4. a 2025-11-25 session's ``tools/call`` of ``instant`` (a preflight tool that finishes inline) with
   ``params.task.ttl`` = 10**15: the ``ttl`` the legacy ``tasks/get`` shows;
5. LIFECYCLES sequential task lifecycles (create ``quick``, poll ``tasks/get`` every 100 ms until
   ``completed``): ``INFO commandstats`` calls per lifecycle, less an idle window of the same length,
   the ``tasks/get`` polls per lifecycle, and the commands that changed most;
6. BUDGET_CALLS ``tools/call`` of ``keep`` with 200 KiB of arguments: the answers' HTTP statuses and
   ``used_memory`` before and after (the byte budget at work).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench import procs

from .figlib import (
    Checkout,
    Session,
    check_shadowing,
    modern_request,
    parser,
    run_figure,
    running_server,
    running_valkey,
    say,
)

MIB = 1024 * 1024
LARGE = 4 * MIB - 2048
WAIT_S = 15.0
TEN_MB = 10_000_000
BUDGET = 8 * MIB
CAPABILITIES: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}


def post(client: httpx.Client, url: str, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers, body = modern_request(method, params)
    # The interview asks by elicitation: declare it besides the tasks extension.
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = CAPABILITIES
    if method.startswith("tasks/"):
        headers["Mcp-Name"] = str(params["taskId"])
    response = client.post(url, json=body, headers=headers)
    message: dict[str, Any] = response.json()
    return response.status_code, message


def task_until(client: httpx.Client, url: str, task_id: str, done: Any) -> dict[str, Any]:
    """``tasks/get`` every 50 ms until ``done(task)``, bounded at 15 s."""
    deadline = time.monotonic() + WAIT_S
    while True:
        _, message = post(client, url, "tasks/get", {"taskId": task_id})
        task: dict[str, Any] = message.get("result") or {}
        if done(task):
            return task
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task_id}: {str(task)[:200]}")
        time.sleep(0.05)


def record_bytes(v: Any, task_id: str) -> int:
    """``MEMORY USAGE`` of the task's record (the key schema both versions share)."""
    tag = task_id.split(".", 1)[0]
    return int(v.memory_usage(f"ext-tasks:{{{tag}}}:task:{task_id}", samples=0) or 0)


def used_memory(v: Any) -> int:
    return int(v.info("memory")["used_memory"])


def large_arguments(client: httpx.Client, url: str, v: Any, calls: int, label: str) -> None:
    blob = "x" * (LARGE - len('{"blob":""}'))
    before = used_memory(v)
    started = time.monotonic()
    statuses: dict[int, int] = {}
    for _ in range(calls):
        status, _ = post(client, url, "tools/call", {"name": "keep", "arguments": {"blob": blob}})
        statuses[status] = statuses.get(status, 0) + 1
    took = time.monotonic() - started
    time.sleep(2.0)  # the worker finishes the last tasks
    added = used_memory(v) - before
    say(
        f"[{label}] {calls} tools/call with {LARGE} bytes of arguments: HTTP {statuses} in {took:.1f} s; "
        f"Valkey used_memory +{added / MIB:.1f} MiB"
    )


def moved_on(task: dict[str, Any], key: str) -> bool:
    """The task asked its next question, or finished, after ``key`` was answered."""
    waiting = task.get("status") == "input_required" and key not in (task.get("inputRequests") or {})
    return waiting or task.get("status") in ("completed", "failed", "cancelled")


def budget(client: httpx.Client, url: str, v: Any, count: int, label: str) -> None:
    blob = "b" * (200 * 1024)
    before = used_memory(v)
    statuses: dict[int, int] = {}
    for _ in range(count):
        status, _ = post(client, url, "tools/call", {"name": "keep", "arguments": {"blob": blob}})
        statuses[status] = statuses.get(status, 0) + 1
    time.sleep(2.0)
    say(
        f"[{label}] {count} tools/call with 200 KiB of arguments: HTTP {statuses}; "
        f"Valkey used_memory +{(used_memory(v) - before) / MIB:.1f} MiB"
    )


def large_answers(client: httpx.Client, url: str, v: Any, rounds: int, label: str) -> None:
    _, created = post(client, url, "tools/call", {"name": "interview", "arguments": {"rounds": rounds}})
    task_id = str(created["result"]["taskId"])
    text = "y" * (LARGE - 200)
    accepted, refused = 0, dict[int, int]()
    for _ in range(rounds):
        task = task_until(client, url, task_id, lambda task: task.get("status") == "input_required")
        key = next(iter(task["inputRequests"]))
        answer = {"action": "accept", "content": {"text": text}}
        status, message = post(client, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
        if "error" in message:
            refused[status] = refused.get(status, 0) + 1
            continue
        accepted += 1
        task_until(client, url, task_id, lambda task, key=key: moved_on(task, key))
    say(
        f"[{label}] {rounds} tasks/update rounds of {LARGE} bytes: {accepted} accepted, refused {refused}; "
        f"the record holds {record_bytes(v, task_id) / 1024:.1f} KiB"
    )


def large_status(client: httpx.Client, url: str, v: Any, label: str) -> None:
    _, created = post(client, url, "tools/call", {"name": "chatter", "arguments": {"size": TEN_MB}})
    task_id = str(created["result"]["taskId"])
    task = task_until(client, url, task_id, lambda task: task.get("status") == "completed")
    say(
        f"[{label}] a status message of {TEN_MB} characters: tasks/get shows {len(task.get('statusMessage', ''))}; "
        f"the record holds {record_bytes(v, task_id) / 1024:.1f} KiB"
    )


def shim_ttl(url: str, label: str) -> None:
    session = Session(url)
    created = session.call("tools/call", {"name": "instant", "arguments": {}, "task": {"ttl": 10**15}})
    task_id = created["result"]["task"]["taskId"]
    shown = session.call("tasks/get", {"taskId": task_id})["result"]
    say(f"[{label}] shim-inline task asked ttl 10**15: created ttl {created['result']['task']['ttl']}, "
        f"tasks/get ttl {shown['ttl']}")  # fmt: skip
    session.client.close()


def calls(v: Any) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in v.info("commandstats").items()}


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: count - before.get(name, 0) for name, count in after.items() if count != before.get(name, 0)}


def lifecycles(client: httpx.Client, url: str, v: Any, count: int, label: str) -> None:
    polls = 0
    start, t0 = calls(v), time.monotonic()
    for n in range(count):
        _, created = post(client, url, "tools/call", {"name": "quick", "arguments": {"n": n}})
        task_id = str(created["result"]["taskId"])
        while True:
            time.sleep(0.1)
            polls += 1
            _, message = post(client, url, "tasks/get", {"taskId": task_id})
            if message["result"]["status"] == "completed":
                break
    busy, took = diff(calls(v), start), time.monotonic() - t0
    idle_start = calls(v)
    time.sleep(took)
    idle = diff(calls(v), idle_start)
    net = {name: busy.get(name, 0) - idle.get(name, 0) for name in set(busy) | set(idle)}
    net.pop("info", None)  # our own INFO calls
    top = sorted(net.items(), key=lambda item: -item[1])[:14]
    say(
        f"[{label}] {count} lifecycles (create, {polls / count:.1f} tasks/get each): "
        f"{sum(net.values()) / count:.1f} Valkey commands per lifecycle (idle subtracted); per lifecycle: "
        + ", ".join(f"{name} {value / count:.2f}" for name, value in top)
    )


def run(checkout: Checkout, root: Path, args: argparse.Namespace) -> None:
    label = checkout.label
    work = root / f"fig4-{label}"
    work.mkdir(parents=True, exist_ok=True)
    say(label, "imports:", check_shadowing(checkout, work))
    env = {"EXT_TASKS_LOG_LEVEL": "warning", "EXT_TASKS_MAX_STORED_BYTES": str(BUDGET)}
    with running_valkey(work / "valkey") as valkey, running_server(checkout, work, valkey=valkey, env=env) as server:
        v = procs.admin(valkey)
        client = httpx.Client(timeout=60.0)
        try:
            large_arguments(client, server.url, v, args.calls, label)
            large_answers(client, server.url, v, args.rounds, label)
            large_status(client, server.url, v, label)
            shim_ttl(server.url, label)
            lifecycles(client, server.url, v, args.lifecycles, label)
            budget(client, server.url, v, args.budget_calls, label)
        finally:
            client.close()
            v.close()


def build_parser() -> argparse.ArgumentParser:
    p = parser("fig4", __doc__ or "")
    p.set_defaults(before="217690e")  # the last commit before the byte bounds
    p.add_argument("--calls", type=int, default=20, help="default %(default)s")
    p.add_argument("--rounds", type=int, default=15, help="default %(default)s")
    p.add_argument("--budget-calls", type=int, default=100, help="default %(default)s")
    p.add_argument("--lifecycles", type=int, default=100, help="default %(default)s")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_figure(build_parser(), argv, run)


if __name__ == "__main__":
    raise SystemExit(main())
