"""Figure 1: Valkey connections held by 60 dropped legacy tasks/result waits.

    python -m investigations.hardening fig1 [--before REV|DIR] [--after REV|DIR] [--versions before after]

One server process on its own valkey-server; a 2025-11-25 session starts `slow` (120 s) as a task; 60
raw-socket POSTs of tasks/result are sent, each closed (unread) once the server has begun its wait (its
tasks/get counter moved, bounded at 3 s); CLIENT LIST (minus our own connection) before, right after the
60 drops, then 1, 2, 3, 4, 5, 10 and 15 s after.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procs

from .figlib import Checkout, Session, check_shadowing, checkouts, metric, parser, running_server, running_valkey, say
from .figlib import work_dir as make_work_dir

WAITS = 60
MARKS_S = (1, 2, 3, 4, 5, 10, 15)


def clients(v: Any) -> int:
    """Connections to valkey-server other than ``v``'s own (the server's)."""
    own = str(v.client_id())
    return sum(1 for entry in v.client_list() if str(entry["id"]) != own)


def drop_one(port: int, session: Session, task_id: str, n: int) -> bool:
    """One tasks/result POST, closed unread once the server has begun waiting (``True``) or after 3 s."""
    reads = metric(port, "ext_tasks_requests_total", {"method": "tasks/get"})
    body = json.dumps({"jsonrpc": "2.0", "id": f"w{n}", "method": "tasks/result", "params": {"taskId": task_id}})
    raw = body.encode()
    headers = {
        "Host": f"127.0.0.1:{port}",
        "Content-Type": "application/json",
        **session.headers,
        "Content-Length": str(len(raw)),
    }
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    conn = socket.create_connection(("127.0.0.1", port), timeout=10.0)
    conn.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + raw)
    began = False
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if metric(port, "ext_tasks_requests_total", {"method": "tasks/get"}) > reads:
            began = True
            break
        time.sleep(0.02)
    conn.close()  # gone, without reading a byte
    return began


def run(checkout: Checkout, root: Path) -> None:
    label = checkout.label
    work = root / f"fig1-{label}"
    work.mkdir(parents=True, exist_ok=True)
    say(label, "imports:", check_shadowing(checkout, work))
    env = {"EXT_TASKS_KEEPALIVE_S": "0.5", "EXT_TASKS_SHUTDOWN_GRACE_S": "1", "EXT_TASKS_LOG_LEVEL": "warning"}
    with running_valkey(work / "valkey") as valkey, running_server(checkout, work, valkey=valkey, env=env) as server:
        v = procs.admin(valkey)
        try:
            session = Session(server.url)
            task_id = session.start_task("slow", {"seconds": 120})
            deadline = time.monotonic() + 15
            while session.call("tasks/get", {"taskId": task_id})["result"]["status"] != "working":
                if time.monotonic() > deadline:
                    raise TimeoutError("the task was not working within 15 s")
                time.sleep(0.1)
            time.sleep(1.0)
            before = clients(v)
            began, during = 0, []
            for n in range(WAITS):
                began += drop_one(server.port, session, task_id, n)
                during.append(clients(v))
            t0 = time.monotonic()
            right_after = clients(v)
            series = []
            for mark in MARKS_S:
                time.sleep(max(0.0, t0 + mark - time.monotonic()))
                series.append((mark, clients(v)))
            at = dict(series)
            status = session.call("tasks/get", {"taskId": task_id})["result"]["status"]
            say(f"[{label}] waits whose start was seen: {began}/{WAITS}; task status after: {status}")
            say(
                f"[{label}] Valkey clients (server's): before={before} right_after_drops={right_after} "
                f"+5s={at[5]} +15s={at[15]}  peak_while_dropping={max(during)} series={series}"
            )
            try:
                say(f"[{label}] ext_tasks_open_waits now: {metric(server.port, 'ext_tasks_open_waits')}")
            except Exception as exc:  # noqa: BLE001 - a version without the gauge is reported, not fatal
                say(f"[{label}] no open-waits gauge ({exc})")
            session.call("tasks/cancel", {"taskId": task_id})
            session.client.close()
        finally:
            v.close()


def build_parser() -> argparse.ArgumentParser:
    return parser("fig1", __doc__ or "")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with checkouts(args) as found:
        root = make_work_dir(args)
        for checkout in found:
            run(checkout, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
