"""``ext-tasks admin``: the operator's commands, over the admin listener's HTTP API (never ``/mcp``).

::

    ext-tasks admin tasks [--status S ...] [--tool T] [--principal P] [--older-than S] [--newer-than S]
                          [--min-attempts N] [--stuck] [--limit N] [--json]
    ext-tasks admin task ID                 one task's detail (JSON)
    ext-tasks admin totals [filters]        totals by status, tool and principal (JSON)
    ext-tasks admin cancel ID
    ext-tasks admin purge [filters]         forget the finished (or expired) tasks the filters admit

Where and as whom: ``--url`` (``EXT_TASKS_ADMIN_URL``; else ``http://127.0.0.1:$EXT_TASKS_ADMIN_PORT``)
and the token from ``EXT_TASKS_ADMIN_TOKEN`` (else the first of ``EXT_TASKS_ADMIN_TOKENS``), or
``--token`` (visible to other users of the machine in its process list: prefer the variable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Final, TextIO

import httpx

_TIMEOUT_S: Final = 30.0
_COLUMNS: Final = ("taskId", "status", "tool", "principal", "age", "attempts", "holder", "heartbeat", "stuck")


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    admin = commands.add_parser("admin", help="the operator's view of the tasks (the admin listener's API)")
    admin.add_argument("--url", help="the admin listener (EXT_TASKS_ADMIN_URL; default from EXT_TASKS_ADMIN_PORT)")
    admin.add_argument("--token", help="an admin token (prefer EXT_TASKS_ADMIN_TOKEN: flags are visible in ps)")
    actions = admin.add_subparsers(dest="action", required=True)
    for name, text in (
        ("tasks", "list the tasks the filters admit"),
        ("totals", "totals by status, tool and principal"),
        ("purge", "forget the finished (or expired) tasks the filters admit"),
    ):
        _filters(actions.add_parser(name, help=text))
    actions.add_parser("task", help="one task's detail").add_argument("task_id")
    actions.add_parser("cancel", help="cancel an unfinished task").add_argument("task_id")


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", action="append", help="working, input_required, completed, failed, cancelled")
    parser.add_argument("--tool")
    parser.add_argument("--principal")
    parser.add_argument("--older-than", type=float, metavar="SECONDS", help="created at least this long ago")
    parser.add_argument("--newer-than", type=float, metavar="SECONDS", help="created at most this long ago")
    parser.add_argument("--min-attempts", type=int)
    parser.add_argument("--stuck", action="store_true", help="only stuck tasks (see docs/deploy.md)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


def _query(args: argparse.Namespace) -> dict[str, str]:
    pairs = {
        "status": ",".join(args.status or []),
        "tool": args.tool,
        "principal": args.principal,
        "older_than_s": args.older_than,
        "newer_than_s": args.newer_than,
        "min_attempts": args.min_attempts,
        "stuck": "true" if args.stuck else None,
        "limit": args.limit,
    }
    return {name: str(value) for name, value in pairs.items() if value not in (None, "")}


def _where(args: argparse.Namespace) -> tuple[str, str]:
    url = args.url or os.environ.get("EXT_TASKS_ADMIN_URL")
    if not url:
        port = os.environ.get("EXT_TASKS_ADMIN_PORT")
        if not port:
            raise ValueError("say where the admin listener is: --url or EXT_TASKS_ADMIN_URL")
        url = f"http://127.0.0.1:{port}"
    token = args.token or os.environ.get("EXT_TASKS_ADMIN_TOKEN")
    if not token:
        token = next((t.strip() for t in os.environ.get("EXT_TASKS_ADMIN_TOKENS", "").split(",") if t.strip()), "")
    if not token:
        raise ValueError("an admin token is needed: EXT_TASKS_ADMIN_TOKEN (or --token)")
    return url.rstrip("/"), token


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        url, token = _where(args)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=_TIMEOUT_S) as http:
            reply = _send(http, args)
    except (ValueError, httpx.HTTPError) as exc:
        print(f"ext-tasks admin: {exc}", file=err)
        return 2
    if reply.status_code != 200:
        is_json = reply.headers.get("content-type", "").startswith("application/json")
        detail = reply.json().get("error") if is_json else ""
        print(f"ext-tasks admin: HTTP {reply.status_code}: {detail or reply.text[:200]}", file=err)
        return 1
    body: dict[str, Any] = reply.json()
    if args.action == "tasks" and not args.json:
        _table(body, out)
    elif args.action == "totals":
        print(json.dumps(body["totals"], indent=2), file=out)
    else:
        print(json.dumps(body, indent=2), file=out)
    return 0


def _send(http: httpx.Client, args: argparse.Namespace) -> httpx.Response:
    if args.action == "task":
        return http.get(f"/api/tasks/{args.task_id}")
    if args.action == "cancel":
        return http.post(f"/api/tasks/{args.task_id}/cancel")
    if args.action == "purge":
        return http.post("/api/purge", params=_query(args))
    query = _query(args)
    if args.action == "totals":
        query["limit"] = "0"
    return http.get("/api/tasks", params=query)


def _table(body: dict[str, Any], out: TextIO) -> None:
    now = int(body.get("now") or time.time() * 1000)
    rows = [_COLUMNS]
    for task in body["tasks"]:
        lease = task.get("lease") or {}
        heartbeat = f"{(now - lease['lastHeartbeat']) / 1000:.1f}s ago" if lease else ""
        rows.append(
            (
                task["taskId"],
                task["status"],
                task["tool"],
                task["principal"],
                f"{task['ageMs'] / 1000:.1f}s",
                str(task["attempts"]),
                str(lease.get("holder", "")),
                heartbeat,
                task.get("stuck") or "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out)
    totals = body["totals"]
    by_status = ", ".join(f"{status} {count}" for status, count in totals["byStatus"].items() if count)
    print(f"{totals['all']} tasks ({by_status or 'none'}); {totals['stuck']} stuck", file=out)
