"""An ``ext-tasks serve`` with its admin listener on, and what the admin tests do with it: create tasks
through ``/mcp``, read and change them through the admin API (``ext_tasks.admin_http``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import child_env, spawn_server, wait_for, wait_listening
from tests.support.mcp_http import post
from tests.support.processes import REPO, ServerProcess, free_port, stop

ADMIN_TOKEN = "admin-e2e-token-7f3a"
#: The /mcp principals: their bearer token -> principal id.
PRINCIPAL_TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
TASKS: Mapping[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
WAIT_S = 30.0


@dataclass
class AdminServer:
    server: ServerProcess
    admin_port: int
    env: dict[str, str]
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def mcp_url(self) -> str:
        return self.server.url

    # --- /mcp -----------------------------------------------------------------------------------

    def call(self, tool: str, arguments: Mapping[str, Any], *, as_token: str = "tok-alice") -> str:
        """Start ``tool`` as a task (as ``as_token``'s principal); its task id."""
        params = {"name": tool, "arguments": dict(arguments)}
        response, message = post(self._mcp(as_token), self.mcp_url, "tools/call", params, capabilities=TASKS)
        assert response.status_code == 200, response.text
        task_id: str = message["result"]["taskId"]
        return task_id

    def get(self, task_id: str, *, as_token: str = "tok-alice") -> dict[str, Any]:
        """``tasks/get`` through /mcp: the JSON-RPC message."""
        return post(self._mcp(as_token), self.mcp_url, "tasks/get", {"taskId": task_id}, capabilities=TASKS)[1]

    def _mcp(self, token: str) -> httpx.Client:
        self.http.headers["Authorization"] = f"Bearer {token}"
        return self.http

    # --- the admin API ------------------------------------------------------------------------------

    def admin(self, method: str, path: str, *, token: str | None = ADMIN_TOKEN, **params: Any) -> httpx.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        query = {name: str(value) for name, value in params.items() if value is not None}
        return httpx.request(method, self.admin_url + path, headers=headers, params=query, timeout=10.0)

    def tasks(self, **filters: Any) -> dict[str, Any]:
        reply = self.admin("GET", "/api/tasks", **filters)
        assert reply.status_code == 200, reply.text
        listing: dict[str, Any] = reply.json()
        return listing

    def row(self, task_id: str) -> dict[str, Any] | None:
        return next((task for task in self.tasks()["tasks"] if task["taskId"] == task_id), None)

    def wait_row(
        self, task_id: str, holds: Callable[[dict[str, Any]], bool], timeout_s: float = WAIT_S
    ) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            row = self.row(task_id)
            return row if row is not None and holds(row) else None

        return wait_for(found, timeout_s, interval_s=0.1, message=lambda: f"{task_id}: {self.row(task_id)}")

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``ext-tasks admin ARGV`` with the admin URL and token in its environment."""
        env = child_env({"EXT_TASKS_ADMIN_URL": self.admin_url, "EXT_TASKS_ADMIN_TOKEN": ADMIN_TOKEN})
        return subprocess.run(
            [sys.executable, "-m", "ext_tasks", "admin", *argv],
            capture_output=True, text=True, timeout=30, env=env, cwd=REPO, check=False,
        )  # fmt: skip


def admin_env(prefix: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        "EXT_TASKS_ADMIN_PORT": str(free_port()),
        "EXT_TASKS_ADMIN_TOKENS": f"another-admin-token,{ADMIN_TOKEN}",
        "EXT_TASKS_TOKENS": ",".join(f"{token}={who}" for token, who in PRINCIPAL_TOKENS.items()),
        **({"EXT_TASKS_VALKEY_PREFIX": prefix} if prefix else {}),
        **(extra or {}),
    }


@contextlib.contextmanager
def running_admin_server(
    tmp_path: Path,
    *,
    tools: str,
    valkey_url: str | None,
    env: Mapping[str, str],
    extra_args: tuple[str, ...] = (),
) -> Iterator[AdminServer]:
    """One ``ext-tasks serve`` (on ``valkey_url``, else the in-memory store) with its admin listener."""
    args = extra_args if valkey_url is None else ("--valkey-url", valkey_url, *extra_args)
    server = spawn_server(tmp_path, tools=tools, env=env, extra_args=args)
    try:
        wait_listening(server)
        yield AdminServer(server, int(env["EXT_TASKS_ADMIN_PORT"]), dict(env))
    finally:
        stop(server.process)


def sigkill(process: subprocess.Popen[bytes]) -> None:
    """Kill one process we started, by its PID, at once (no shutdown: its runs stay held)."""
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
