"""Figure 6: Valkey at maxmemory (noeviction) while tasks run.

    python -m investigations.hardening fig6 [--tasks 20] [--task-seconds 1] [--episode 5] [--before REV|DIR]
                                   [--after REV|DIR]

One server on its own valkey-server (``EXT_TASKS_LEASE_S=2``). ``--tasks`` tasks of ``slow``
(``--task-seconds`` each) are created; at once ``maxmemory`` is set to half of ``used_memory`` for
``--episode`` seconds, while a client keeps creating tasks (HTTP statuses counted, and whether a 503
carried ``Retry-After``) and probing ``/readyz``, a 2025-11-25 ``initialize`` is sent, and a second
server is started on the same Valkey (does it exit, or answer ``/healthz``?). Then ``maxmemory 0``,
and for up to 30 s: how many of the acknowledged tasks ended, and how many are still ``working``
(lost: they stay so until their TTL); ``/readyz`` of both servers. Last, a third server is started
on the same Valkey set to ``maxmemory-policy allkeys-lru``: does it serve, or refuse to start?
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench import procs

from .figlib import (
    LEGACY,
    Checkout,
    check_shadowing,
    keygen,
    modern_request,
    parser,
    run_figure,
    running_server,
    say,
)
from .figlib import running_valkey as valkey_process

#: The last commit before the store's refusals were handled (the default ``--before`` of this figure).
BEFORE = "217690e"
AFTER_S = 30.0
TERMINAL = ("completed", "failed", "cancelled")


def create(client: httpx.Client, url: str, seconds: float) -> tuple[str, str | None]:
    """One task of ``slow``: (what the HTTP answer was, the task id if one was created)."""
    headers, body = modern_request("tools/call", {"name": "slow", "arguments": {"seconds": seconds}})
    response = client.post(url, headers=headers, json=body)
    label = str(response.status_code)
    if response.status_code == 503:
        label += " Retry-After" if response.headers.get("retry-after") else " no Retry-After"
    task_id = response.json().get("result", {}).get("taskId") if response.status_code == 200 else None
    return label, task_id


def status(client: httpx.Client, url: str, task_id: str) -> str:
    headers, body = modern_request("tasks/get", {"taskId": task_id})
    response = client.post(url, headers=headers, json=body)
    return str(response.json().get("result", {}).get("status", f"HTTP {response.status_code}"))


def ready(client: httpx.Client, base: str) -> int:
    try:
        return client.get(base + "/readyz", timeout=5.0).status_code
    except httpx.TransportError:
        return 0


def legacy_initialize(client: httpx.Client, url: str) -> str:
    params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "hardening", "version": "1"}}
    response = client.post(
        url,
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
        headers={"Accept": "application/json, text/event-stream"},
    )
    return f"{response.status_code}" + (" Retry-After" if response.headers.get("retry-after") else "")


def pending_runs(v: Any) -> int:
    """Runs delivered to a worker and not acknowledged, over every run-queue stream (default prefix)."""
    streams = list(v.scan_iter(match="ext-tasks:*runs", _type="stream"))
    return sum(int(group["pending"]) for stream in streams for group in v.xinfo_groups(stream))


def start_second(checkout: Checkout, work: Path, valkey_port: int, *, name: str = "second") -> procs.Proc:
    port = procs.free_port()
    log = work / f"{name}-server.log"
    env = checkout.env({"EXT_TASKS_STATE_KEYS": keygen(checkout, work), "EXT_TASKS_LEASE_S": "2"})
    argv = ["serve", "--host", "127.0.0.1", "--port", str(port), "--tools", "figtools"]
    argv += ["--valkey-url", f"valkey://127.0.0.1:{valkey_port}/0"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [checkout.python, "-m", "ext_tasks.cli", *argv], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work
        )
    return procs.Proc(f"{name}-{checkout.label}", process, log, port)


def second_state(client: httpx.Client, second: procs.Proc, within_s: float) -> str:
    """'exited rc=N' or '/healthz 200, /readyz N' (within ``within_s``)."""
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        if second.process.poll() is not None:
            return f"exited rc={second.process.returncode}"
        try:
            health = client.get(f"http://127.0.0.1:{second.port}/healthz", timeout=1.0).status_code
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        return f"up (/healthz {health}, /readyz {ready(client, f'http://127.0.0.1:{second.port}')})"
    return f"neither up nor exited within {within_s:g}s"


def run(checkout: Checkout, root: Path, args: argparse.Namespace) -> None:
    label = checkout.label
    work = root / f"fig6-{label}"
    work.mkdir(parents=True, exist_ok=True)
    say(label, "imports:", check_shadowing(checkout, work))
    env = {"EXT_TASKS_LEASE_S": "2", "EXT_TASKS_LOG_LEVEL": "warning"}
    with (
        valkey_process(work / "valkey") as valkey,
        running_server(checkout, work, valkey=valkey, env=env) as server,
        httpx.Client(timeout=10.0) as client,
    ):
        v = procs.admin(valkey)
        base = server.url.removesuffix("/mcp")
        second: procs.Proc | None = None
        try:
            acknowledged = [create(client, server.url, args.task_seconds)[1] for _ in range(args.tasks)]
            task_ids = [task_id for task_id in acknowledged if task_id]
            v.config_set("maxmemory", int(v.info("memory")["used_memory"]) // 2)
            started = time.monotonic()
            second = start_second(checkout, work, valkey.port)
            answers: Counter[str] = Counter()
            readiness: Counter[int] = Counter()
            while time.monotonic() - started < args.episode:
                answers[create(client, server.url, 0.1)[0]] += 1
                readiness[ready(client, base)] += 1
            legacy = legacy_initialize(client, server.url)
            second_during = second_state(client, second, 5.0)
            during = Counter(status(client, server.url, task_id) for task_id in task_ids)
            unacknowledged = pending_runs(v)
            v.config_set("maxmemory", 0)
            back = time.monotonic()
            after: Counter[str] = Counter()
            ready_s: float | None = None  # when /readyz first said 200 again
            while time.monotonic() - back < AFTER_S:
                if ready_s is None and ready(client, base) == 200:
                    ready_s = time.monotonic() - back
                after = Counter(status(client, server.url, task_id) for task_id in task_ids)
                if sum(after[name] for name in TERMINAL) == len(task_ids) and ready_s is not None:
                    break
                time.sleep(0.1)
            ended_s = time.monotonic() - back
            ready_after = "not 200 within 30s" if ready_s is None else f"200 at +{ready_s:.1f}s"
            second_after = second_state(client, second, 10.0)
            if second.process.poll() is None:
                deadline = time.monotonic() + 15.0
                while ready(client, f"http://127.0.0.1:{second.port}") != 200 and time.monotonic() < deadline:
                    time.sleep(0.2)
                second_after += f", then /readyz {ready(client, f'http://127.0.0.1:{second.port}')}"
            evicting = evicting_start(client, checkout, work, v, valkey.port)
        finally:
            if second is not None:
                second.stop(timeout_s=10.0)
            v.close()
    lost = len(task_ids) - sum(after[name] for name in TERMINAL)
    say(
        f"[{label}] {len(task_ids)} tasks acknowledged, then Valkey full for {args.episode:g}s: tasks during "
        f"{dict(during)}, runs unacknowledged (XPENDING) {unacknowledged}; after memory came back "
        f"({ended_s:.1f}s): {dict(after)} -> {lost} lost (still working)"
    )
    say(f"[{label}] during: creations answered {dict(answers)}; /readyz {dict(readiness)}; legacy initialize {legacy}")
    say(f"[{label}] /readyz once memory was back: {ready_after}; a server started during the episode: {second_during}")
    say(f"[{label}] that server once memory came back: {second_after}")
    say(f"[{label}] a server started on the same Valkey with maxmemory-policy allkeys-lru: {evicting}")


def evicting_start(client: httpx.Client, checkout: Checkout, work: Path, v: Any, valkey_port: int) -> str:
    """What a server started on a Valkey that may evict keys does: comes up, or exits (and says why)."""
    v.config_set("maxmemory-policy", "allkeys-lru")
    third = start_second(checkout, work, valkey_port, name="evicting")
    try:
        state = second_state(client, third, 15.0)
        if third.process.poll() is not None:
            lines = [line for line in third.log_path.read_text(errors="replace").splitlines() if line.strip()]
            state += f": {lines[-1][:160]!r}" if lines else ""
        return state
    finally:
        third.stop(timeout_s=10.0)
        v.config_set("maxmemory-policy", "noeviction")


def build_parser() -> argparse.ArgumentParser:
    p = parser("fig6", __doc__ or "")
    p.set_defaults(before=BEFORE)
    p.add_argument("--tasks", type=int, default=20, help="tasks acknowledged before memory runs out (default 20)")
    p.add_argument("--task-seconds", type=float, default=1.0, help="each task's run (default 1)")
    p.add_argument("--episode", type=float, default=5.0, help="seconds at maxmemory (default 5)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_figure(build_parser(), argv, run)


if __name__ == "__main__":
    raise SystemExit(main())
