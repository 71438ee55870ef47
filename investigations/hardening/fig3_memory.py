"""Figure 3: the embedded in-memory store's memory after its entries lapse.

    python -m investigations.hardening fig3 [--tasks 20000] [--sessions 2000] [--cycles 1]
                                   [--before REV|DIR] [--after REV|DIR] [--versions before after]

A real `ext-tasks serve` (memory store, no Valkey) through the fig3_server.py launcher. SESSIONS
2025-11-25 sessions are opened, each starting one `quick` task (ttl 30 s, the tool's ttl_ms), and
TASKS-SESSIONS more `quick` tasks are created on the 2026-07-28 endpoint (tasks extension declared),
CYCLES times. Per-principal caps off (EXT_TASKS_MAX_ACTIVE_TASKS/_MAX_STORED_TASKS/_MAX_SESSIONS=0;
3320622 has only the first). Sessions lapse after FIG_SESSION_TTL_S=30 s. Snapshots (RSS + the length of
every container of both stores): idle, right after creation, and after everything lapsed plus one sweep
interval (60 s) plus 10 s. A cycle takes the creation time plus 103 s.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from .figlib import HERE, Checkout, Session, check_shadowing, checkouts, modern_request, parser, rss_mib, say
from .figlib import running_server as server_of
from .figlib import work_dir as make_work_dir

TTL_S = 30
SWEEP_S = 60
THREADS = 3
LAUNCHER = HERE / "fig3_server.py"


def snapshot(path: Path) -> dict[str, Any]:
    """The launcher's latest sizes file (written every second), at most 2.5 s old; bounded at 5 s."""
    deadline = time.monotonic() + 5
    while True:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            if time.time() - float(data["t"]) < 2.5:
                return data
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no fresh sizes file {path}")
        time.sleep(0.2)


def show(label: str, what: str, data: dict[str, Any], pid: int) -> None:
    say(
        f"[{label}] {what}: RSS {rss_mib(pid):.1f} MiB | tasks {data.get('task_store')} | "
        f"sessions {data.get('session_store')}"
    )


class Load:
    """Creates the tasks and sessions over THREADS threads, one httpx client each; collects errors."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.local = threading.local()
        self.clients: list[httpx.Client] = []

    def client(self) -> httpx.Client:
        found: httpx.Client | None = getattr(self.local, "client", None)
        if found is None:
            found = httpx.Client(timeout=30.0)
            self.local.client = found
            with self.lock:
                self.clients.append(found)
        return found

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text[:200])

    def legacy(self, n: int) -> None:
        try:
            Session(self.url, self.client()).start_task("quick", {"n": n})
        except Exception as exc:  # noqa: BLE001 - counted and reported
            self.error(f"legacy: {exc!r}")

    def modern(self, n: int) -> None:
        headers, body = modern_request("tools/call", {"name": "quick", "arguments": {"n": n}})
        try:
            response = self.client().post(self.url, json=body, headers=headers)
            message = response.json()
        except Exception as exc:  # noqa: BLE001 - counted and reported
            self.error(f"modern: {exc!r}")
            return
        if response.status_code != 200 or "result" not in message:
            self.error(f"modern: {response.status_code} {str(message)[:160]}")

    def close(self) -> None:
        for client in self.clients:
            client.close()


def run(checkout: Checkout, root: Path, tasks: int, sessions: int, cycles: int) -> None:
    label = checkout.label
    work = root / f"fig3-{label}"
    work.mkdir(parents=True, exist_ok=True)
    say(label, "imports:", check_shadowing(checkout, work))
    sizes = work / "sizes.json"
    env = {
        "EXT_TASKS_LOG_LEVEL": "warning",
        "EXT_TASKS_MAX_ACTIVE_TASKS": "0",
        "EXT_TASKS_MAX_STORED_TASKS": "0",
        "EXT_TASKS_MAX_SESSIONS": "0",
        "FIG_QUICK_TTL_MS": str(TTL_S * 1000),
        "FIG_SESSION_TTL_S": str(TTL_S),
        "FIG_SIZES_FILE": str(sizes),
    }
    with server_of(checkout, work, env=env, launcher=[str(LAUNCHER)]) as server:
        time.sleep(2)
        show(label, "idle", snapshot(sizes), server.pid)
        load = Load(server.url)
        try:
            for cycle in range(1, cycles + 1):
                started = time.monotonic()
                with ThreadPoolExecutor(THREADS) as pool:
                    list(pool.map(load.legacy, range(cycle * 10**6, cycle * 10**6 + sessions)))
                    list(pool.map(load.modern, range(tasks - sessions)))
                created_in = time.monotonic() - started
                say(
                    f"[{label}] cycle {cycle}: created {sessions} sessions (+1 legacy task each) and "
                    f"{tasks - sessions} modern tasks in {created_in:.0f} s; errors: {len(load.errors)} "
                    f"{load.errors[:3]}"
                )
                time.sleep(3)  # the worker finishes the last runs
                show(label, f"cycle {cycle}: after creation", snapshot(sizes), server.pid)
                wait = TTL_S + SWEEP_S + 10
                say(f"[{label}] waiting {wait} s (ttl {TTL_S} s + sweep interval {SWEEP_S} s + 10 s)")
                time.sleep(wait)
                what = f"cycle {cycle}: after expiry + sweep ({created_in + 3 + wait:.0f} s after this cycle's start)"
                show(label, what, snapshot(sizes), server.pid)
        finally:
            load.close()


def build_parser() -> argparse.ArgumentParser:
    p = parser("fig3", __doc__ or "")
    p.add_argument("--tasks", type=int, default=20_000, help="tasks in all per cycle (default %(default)s)")
    p.add_argument("--sessions", type=int, default=2_000, help="legacy sessions per cycle (default %(default)s)")
    p.add_argument("--cycles", type=int, default=1, help="default %(default)s")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.sessions <= args.tasks or args.cycles < 1:
        raise SystemExit("need 0 <= --sessions <= --tasks and --cycles >= 1")
    with checkouts(args) as found:
        root = make_work_dir(args)
        for checkout in found:
            run(checkout, root, args.tasks, args.sessions, args.cycles)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
