"""Starting one stack of the plan on 127.0.0.1 (its store, its server, a local issuer for an OAuth stack)
and stopping it by PID; and the peers' virtualenvs, made ready before the rounds.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import issuer, procs
from .plan import Stack

if TYPE_CHECKING:
    from .run import Options


@dataclass
class Running:
    stack: Stack
    server: procs.Proc
    valkey: procs.ValkeyStore | None
    path: str
    server_cpus: str | None
    loader_cpus: str | None
    population: list[str] = field(default_factory=list)
    #: The loader's bearer token (an OAuth stack: a JWT of the local issuer), else None.
    token: str | None = None


# --- starting stacks ------------------------------------------------------------------------------


def _granian() -> str | None:
    local = Path(sys.executable).parent / "granian"
    return str(local) if local.exists() else shutil.which("granian")


def _granian_command(target: str, port: int, procs_: int, factory: bool) -> list[str]:
    binary = _granian()
    assert binary is not None
    command = [
        binary, "--interface", "asgi", "--loop", "uvloop", "--no-access-log", "--log-level", "warning",
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(procs_),
    ]  # fmt: skip
    return [*command, "--factory", target] if factory else [*command, target]


#: The issuer's signing key of this run (generated at the first OAuth stack's start).
_SIGNING: list[issuer.SigningKey] = []


@contextlib.contextmanager
def running_stack(stack: Stack, options: Options, state_key: str) -> Iterator[Running]:
    pinned = stack.placement == "pinned"
    server_cpus, side_cpus = ("1", "0") if pinned else (None, None)
    logs = options.scratch / "logs"
    started: list[procs.Proc | procs.ValkeyStore] = []
    try:
        valkey = None
        if stack.store is not None and stack.store != "memory":
            valkey = procs.start_store(logs, side_cpus, stack.store)
            started.append(valkey)
        port = procs.free_port()
        token: str | None = None
        auth_env: dict[str, str] = {}
        if stack.oauth:
            issuer_proc, token, auth_env = _start_issuer(port, side_cpus, options.scratch)
            started.append(issuer_proc)
        server, path = _start_server(stack, port, valkey, state_key, server_cpus, logs, auth_env)
        started.append(server)
        procs.wait_http(server, path, settle_s=1.0 if stack.procs > 1 else 0.1)
        if stack.oauth:
            _check_challenged(server, path)
        yield Running(stack, server, valkey, path, server_cpus, side_cpus, token=token)
    finally:
        for proc in reversed(started):
            proc.stop()


def _check_challenged(server: procs.Proc, path: str) -> None:
    """An OAuth stack must answer a request without a token 401 (else its figures would be auth-off ones)."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5.0) as sock:
        sock.sendall(request)
        head = sock.recv(64)
    if not head.startswith(b"HTTP/1.1 401"):
        raise RuntimeError(f"{server.name}: OAuth is not on (no token answered {head[:20]!r}, not 401)")


def _start_issuer(server_port: int, cpus: str | None, scratch: Path) -> tuple[procs.Proc, str, dict[str, str]]:
    """The local authorization server of an OAuth stack (``bench.issuer``, pinned with the loader), one
    long-lived token for the loader, and the server's OAuth settings."""
    if not _SIGNING:
        _SIGNING.append(issuer.SigningKey.generate("RS256"))
    key = _SIGNING[0]
    jwks_path = scratch / "issuer-jwks.json"
    jwks_path.parent.mkdir(parents=True, exist_ok=True)
    jwks_path.write_text(json.dumps(issuer.jwks([key])))
    port = procs.free_port()
    command = [sys.executable, "-m", "bench.issuer", "--port", str(port), "--jwks", str(jwks_path)]
    proc = procs.start("issuer", procs.pinned(cpus, command), port=port, log_dir=scratch / "logs")
    procs.wait_port(proc)
    url, resource = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{server_port}/mcp"
    env = {
        "EXT_TASKS_AUTH_ISSUERS": url,
        "EXT_TASKS_AUTH_RESOURCE": resource,
        "EXT_TASKS_AUTH_SCOPES": issuer.SCOPE,
    }
    return proc, key.mint(url, resource), env


def _start_server(
    stack: Stack,
    port: int,
    valkey: procs.ValkeyStore | None,
    state_key: str,
    cpus: str | None,
    logs: Path,
    auth_env: dict[str, str] | None = None,
) -> tuple[procs.Proc, str]:
    valkey_url = None if valkey is None else valkey.url
    if stack.kind == "echo":
        if stack.server == "granian":
            command = _granian_command("bench.echo_app:app", port, stack.procs, factory=False)
        else:
            command = [sys.executable, "-m", "bench.echo_app", "--port", str(port), "--workers", str(stack.procs)]
        return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs), "/echo"
    if stack.kind == "ext":
        env = {
            "EXT_TASKS_STATE_KEYS": state_key,
            "EXT_TASKS_LOG_LEVEL": "warning",
            "EXT_TASKS_SHUTDOWN_GRACE_S": "0",
            "EXT_TASKS_TOOLS": "bench.tools",
            "EXT_TASKS_HOST": "127.0.0.1",
            "EXT_TASKS_PORT": str(port),
            "EXT_TASKS_WORKERS": str(stack.procs),
            "EXT_TASKS_VALKEY_URL": valkey_url or "",
            # One anonymous principal creates tens of thousands of tasks a minute here: far past the
            # default cap on tasks kept per principal (10,000), which would refuse them with 429. A cap
            # this high still does its bookkeeping on every creation, so its cost stays measured.
            "EXT_TASKS_MAX_STORED_TASKS": "100000000",
            **dict(stack.env),
            **(auth_env or {}),
        }
        if stack.server == "granian":
            command = _granian_command("ext_tasks.cli:app_from_env", port, stack.procs, factory=True)
        else:
            command = [sys.executable, "-m", "ext_tasks", "serve", "--tools", "bench.tools", "--port", str(port)]
            command += ["--workers", str(stack.procs)]
            if valkey_url:
                command += ["--valkey-url", valkey_url]
        return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs, env=env), "/mcp"
    if stack.kind == "sdk":
        key_hex = secrets.token_hex(32)
        command = [str(procs.SDK_VENV.python), "bench/peers/sdk_server.py", "--port", str(port), "--key", key_hex]
        command += ["--server", stack.server]
        if stack.server == "hypercorn":
            command += ["--hypercorn-config", json.dumps(hypercorn_overrides())]
        return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs), "/mcp"
    assert valkey is not None
    command = [
        str(procs.FASTMCP_VENV.python), "bench/peers/fastmcp_server.py", "--port", str(port),
        "--valkey-url", f"redis://127.0.0.1:{valkey.nodes[0].port}/0", "--name", f"bench-{port}",
    ]  # fmt: skip
    return procs.start(stack.key, procs.pinned(cpus, command), port=port, log_dir=logs), "/mcp"


def hypercorn_overrides() -> dict[str, Any]:
    """What ``ext-tasks serve`` sets on hypercorn's ``Config``, read from ``ext_tasks.cli.hypercorn_config``
    itself (like the echo baseline, on purpose: the SDK peer on hypercorn must follow any change made to
    how the real server is served), for ``sdk_server.py --hypercorn-config``. Every attribute the function
    sets, but the bind (the peer has its own port) and the error logger (a logger object; the peer logs
    to stderr at warning level, as the benchmark's ext-tasks servers do)."""
    from ext_tasks import cli
    from ext_tasks.config import Settings

    config = cli.hypercorn_config(Settings(host="127.0.0.1", port=0))
    overrides: dict[str, Any] = {}
    for name, value in vars(config).items():
        if name in ("_bind", "bind", "errorlog"):
            continue
        try:
            json.dumps(value)
        except TypeError:
            raise ValueError(f"ext_tasks.cli sets hypercorn's {name} to {value!r}: pass it to the SDK peer") from None
        overrides[name] = value
    return overrides


def prepare_peers(stacks: list[Stack], options: Options, skipped: dict[str, str]) -> list[Stack]:
    kept = []
    venvs: dict[str, str | None] = {}  # one install attempt per virtualenv (both SDK stacks share one)

    def ensure(venv: procs.Venv) -> str | None:
        if venv.name not in venvs:
            venvs[venv.name] = venv.ensure(options.scratch / "logs")
        return venvs[venv.name]

    for stack in stacks:
        reason = None
        if stack.server == "granian" and _granian() is None:
            reason = "granian is not installed (pip install granian, or the dev extras)"
        elif stack.kind == "sdk":
            reason = ensure(procs.SDK_VENV)
        elif stack.kind == "fastmcp":
            reason = ensure(procs.FASTMCP_VENV)
        if reason is None:
            kept.append(stack)
        else:
            skipped[stack.key] = reason
            print(f"skipping {stack.key}: {reason}", flush=True)
    return kept


def peer_versions(stacks: list[Stack]) -> dict[str, str]:
    versions = {}
    if any(stack.kind == "sdk" for stack in stacks):
        versions["mcp (SDK peer)"] = procs.package_version(procs.SDK_VENV, "mcp")
        for server in sorted({stack.server for stack in stacks if stack.kind == "sdk"}):
            versions[f"{server} (SDK peer)"] = procs.package_version(procs.SDK_VENV, server)
    if any(stack.kind == "fastmcp" for stack in stacks):
        versions["fastmcp (peer)"] = procs.package_version(procs.FASTMCP_VENV, "fastmcp")
        versions["fastmcp-tasks (peer)"] = procs.package_version(procs.FASTMCP_VENV, "fastmcp-tasks")
        versions["pydocket (peer)"] = procs.package_version(procs.FASTMCP_VENV, "pydocket")
    return versions
