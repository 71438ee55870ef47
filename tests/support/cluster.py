"""A small fleet for end-to-end tests: one Valkey (or a Valkey Cluster the caller started), several
``ext-tasks serve`` processes sharing it and one requestState key, and nginx in front of them doing
plain round-robin.

::

    with running_cluster(tmp_path, tools="tests.e2e.task_tools", env={"EXT_TASKS_LEASE_S": "2"}) as cluster:
        cluster.url               # through nginx
        cluster.servers[0].url    # one instance directly
    with running_cluster(tmp_path, tools=..., valkey_url=valkey_cluster.url) as cluster:
        ...                       # the same fleet on a Valkey Cluster (its own key prefix)

Every process (valkey-server, servers, nginx, ``ext-tasks worker``) is stopped by its PID on exit,
whatever happened meanwhile (a process a test already killed is left alone).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from .processes import REPO, ServerProcess, free_port, stop
from .valkey import ValkeyServer, running_valkey

T = TypeVar("T")

START_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 30.0
_UPSTREAM = re.compile(r"upstream=(.+)$", re.MULTILINE)


def wait_for(
    predicate: Callable[[], T | None],
    timeout_s: float,
    *,
    interval_s: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"not reached within {timeout_s}s: {text}")
        time.sleep(interval_s)


def keygen() -> str:
    """A fresh requestState key from ``ext-tasks keygen``."""
    completed = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "keygen"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        cwd=REPO,
        check=True,
    )
    key = completed.stdout.strip()
    assert key, completed.stderr
    return key


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child process: ours without any ``EXT_TASKS_*`` setting, plus ``extra``."""
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("EXT_TASKS_")}
    return {**inherited, "PYTHONUNBUFFERED": "1", **extra}


def _answers_http(url: str) -> bool:
    try:
        httpx.get(url, timeout=0.5)
    except httpx.TransportError:
        return False
    return True


def spawn_server(
    tmp_path: Path, *, tools: str, env: Mapping[str, str], extra_args: Sequence[str] = ()
) -> ServerProcess:
    """Start ``ext-tasks serve`` on a free loopback port without waiting for it (see :func:`wait_listening`)."""
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    argv = [sys.executable, "-m", "ext_tasks", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*argv, "--tools", tools, *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(env),
            cwd=REPO,
        )
    return ServerProcess(process=process, port=port, log_path=log_path)


def wait_listening(server: ServerProcess, timeout_s: float = START_TIMEOUT_S) -> None:
    def up() -> bool:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited early with {server.process.returncode}:\n{server.log()}")
        # Any HTTP answer means the socket is up; GET on /mcp answers 405 by design.
        return _answers_http(server.url)

    wait_for(up, timeout_s, message=lambda: f"server on port {server.port} listening\n{server.log()}")


@dataclass
class Balancer:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def upstreams_used(self) -> Counter[str]:
        """How many requests nginx passed to each upstream (``127.0.0.1:PORT``), from its access log."""
        path = self.directory / "access.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        # A request retried on another upstream logs "a:1, b:2"; every address tried counts.
        return Counter(addr.strip() for line in _UPSTREAM.findall(text) for addr in line.split(","))

    def log(self) -> str:
        parts = []
        for name in ("nginx-stderr.log", "error.log"):
            path = self.directory / name
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text(errors='replace')}")
        return "\n".join(parts)


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        raise RuntimeError("nginx is not installed (apt-get install nginx)")
    return found


def nginx_conf(directory: Path, listen_port: int, upstream_ports: Sequence[int]) -> str:
    """An nginx.conf doing plain round-robin over ``upstream_ports``; every path it writes is in ``directory``."""
    servers = "\n".join(f"        server 127.0.0.1:{port};" for port in upstream_ports)
    # A root master would otherwise run its workers as `nobody`, who cannot write into the test directory.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""{user}daemon off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log info;

events {{
    worker_connections 1024;
}}

http {{
    log_format upstreams '$request_method $status upstream=$upstream_addr';
    access_log {directory}/access.log upstreams;
    client_body_temp_path {directory}/client_body_temp;
    proxy_temp_path {directory}/proxy_temp;
    fastcgi_temp_path {directory}/fastcgi_temp;
    uwsgi_temp_path {directory}/uwsgi_temp;
    scgi_temp_path {directory}/scgi_temp;

    upstream mcp_servers {{
{servers}
        keepalive 32;
    }}

    server {{
        listen 127.0.0.1:{listen_port};

        location / {{
            proxy_pass http://mcp_servers;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


@contextlib.contextmanager
def running_nginx(
    directory: Path, upstream_ports: Sequence[int], timeout_s: float = START_TIMEOUT_S, port: int | None = None
) -> Iterator[Balancer]:
    """nginx (``daemon off``, a child of this process) in front of ``upstream_ports``, on ``port`` (a free
    one by default); stopped by PID."""
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    conf = directory / "nginx.conf"
    conf.write_text(nginx_conf(directory, port, upstream_ports))
    with (directory / "nginx-stderr.log").open("wb") as log:
        process = subprocess.Popen(
            [nginx_binary(), "-p", f"{directory}/", "-c", str(conf), "-e", "stderr"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    balancer = Balancer(process=process, port=port, directory=directory)
    try:

        def up() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"nginx exited with {process.returncode}:\n{balancer.log()}")
            return _answers_http(balancer.url)

        wait_for(up, timeout_s, message=lambda: f"nginx answering on port {port}\n{balancer.log()}")
        yield balancer
    finally:
        stop(process)


@dataclass
class Cluster:
    #: The one Valkey the fleet started, or None on a store the caller provides (a Valkey Cluster).
    valkey: ValkeyServer | None
    valkey_url: str
    servers: list[ServerProcess]
    balancer: Balancer
    tools: str
    env: dict[str, str] = field(repr=False)

    @property
    def url(self) -> str:
        """The MCP endpoint through nginx."""
        return self.balancer.url

    def alive(self) -> list[ServerProcess]:
        return [server for server in self.servers if server.process.poll() is None]

    def by_pid(self, pid: int) -> ServerProcess:
        for server in self.servers:
            if server.process.pid == pid:
                return server
        raise KeyError(f"no server process with pid {pid}")

    def logs(self) -> str:
        parts = [f"--- server pid {server.process.pid} port {server.port}\n{server.log()}" for server in self.servers]
        return "\n".join([*parts, self.balancer.log()])


def fleet_env(key: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """What every process of one fleet shares: the key and a Valkey namespace of its own."""
    return {
        "EXT_TASKS_STATE_KEYS": key,
        "EXT_TASKS_VALKEY_PREFIX": f"e2e-{uuid.uuid4().hex[:12]}",
        **(extra or {}),
    }


@contextlib.contextmanager
def running_servers(
    tmp_path: Path,
    *,
    count: int,
    tools: str,
    valkey: ValkeyServer | str,
    env: Mapping[str, str],
) -> Iterator[list[ServerProcess]]:
    """``count`` servers on one store (a Valkey, or a URL) started together, then awaited; each
    stopped by PID on exit."""
    url = valkey if isinstance(valkey, str) else valkey.url
    servers: list[ServerProcess] = []
    try:
        for _ in range(count):
            servers.append(spawn_server(tmp_path, tools=tools, env=env, extra_args=("--valkey-url", url)))
        for server in servers:
            wait_listening(server)
        yield servers
    finally:
        for server in servers:
            stop(server.process)


@contextlib.contextmanager
def running_cluster(
    tmp_path: Path,
    *,
    tools: str,
    env: Mapping[str, str] | None = None,
    size: int = 3,
    valkey_url: str | None = None,
    balancer_port: int | None = None,
) -> Iterator[Cluster]:
    """``size`` servers sharing one store and one key (own key prefix), nginx round-robin. The store is
    a valkey-server started here, or the one at ``valkey_url`` (left running). ``balancer_port``: nginx's
    port, for servers whose settings must name the URL their clients use (a free one by default)."""
    with contextlib.ExitStack() as stack:
        valkey = stack.enter_context(running_valkey(tmp_path / "valkey")) if valkey_url is None else None
        url = valkey.url if valkey is not None else valkey_url
        assert url is not None
        shared = fleet_env(keygen(), env)
        servers = stack.enter_context(running_servers(tmp_path, count=size, tools=tools, valkey=url, env=shared))
        ports = [server.port for server in servers]
        balancer = stack.enter_context(running_nginx(tmp_path / "nginx", ports, port=balancer_port))
        yield Cluster(valkey=valkey, valkey_url=url, servers=servers, balancer=balancer, tools=tools, env=shared)


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def running_worker(
    tmp_path: Path, *, tools: str, valkey: ValkeyServer | str, env: Mapping[str, str]
) -> Iterator[WorkerProcess]:
    """``ext-tasks worker`` (task workers only, no HTTP) on ``valkey`` (or a store URL); stopped by PID on exit."""
    url = valkey if isinstance(valkey, str) else valkey.url
    log_path = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ext_tasks", "worker", "--valkey-url", url, "--tools", tools],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(env),
            cwd=REPO,
        )
    try:
        yield WorkerProcess(process=process, log_path=log_path)
    finally:
        stop(process)
