"""``ext-tasks``: the command line and the composition root (the only module that imports hypercorn).

::

    ext-tasks serve [--host 127.0.0.1] [--port 3001] [--tools MODULE] [--valkey-url URL] [--workers N]
    ext-tasks worker --valkey-url URL [--tools MODULE]
    ext-tasks keygen
    ext-tasks call TOOL [key=value | key:=json ...] [--url URL]   (and ``task get|wait|cancel|list``, ``tools``)
    ext-tasks login URL | ext-tasks logout URL
    ext-tasks admin tasks|task|totals|cancel|purge ...   (the admin listener's API: ext_tasks.admin_cli)
    ext-tasks bench --url URL WORKLOAD --tool NAME [--concurrency 1,16 | --rate 500] [--json FILE]

Every server flag has an ``EXT_TASKS_*`` variable; a flag wins over its variable. The client commands
(``ext_tasks.client.commands``) take flags, but for what a flag should not carry or a person should not
repeat: the OAuth client's id and secret (``ext_tasks.client.sign_in``), where state is kept and how a
browser is opened.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from hypercorn.config import Config as HypercornConfig

from .config import ConfigError, Settings, settings_from_env
from .lifecycle import JsonFormatter
from .protocol.resume import generate_key

if TYPE_CHECKING:
    from .http import App

logger = logging.getLogger("ext_tasks.cli")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ext-tasks", description="MCP 2026-07-28 server with tasks and MRTR")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the tools of a module at http://HOST:PORT/mcp")
    serve.add_argument("--host", help="address to bind (EXT_TASKS_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind, 0 for any free one (EXT_TASKS_PORT, default 3001)")
    serve.add_argument("--tools", help="module defining `registry` (EXT_TASKS_TOOLS, default: the demo tools)")
    serve.add_argument("--workers", type=int, help="server processes; needs --valkey-url (EXT_TASKS_WORKERS)")
    serve.add_argument(
        "--server",
        choices=("hypercorn", "granian"),
        help="HTTP server (EXT_TASKS_SERVER, default hypercorn; granian needs `pip install ext-tasks[granian]`)",
    )
    serve.add_argument(
        "--no-task-workers",
        action="store_true",
        help="do not run task workers in the server processes (EXT_TASKS_NO_WORKERS)",
    )
    for command in (serve, commands.add_parser("worker", help="run task workers only, on a shared Valkey")):
        command.add_argument("--valkey-url", help="Valkey URL of the shared task store (EXT_TASKS_VALKEY_URL)")
        command.add_argument("--log-level", help="debug, info, warning or error (EXT_TASKS_LOG_LEVEL, default info)")
        if command is not serve:
            command.add_argument("--tools", help="module defining `registry` (EXT_TASKS_TOOLS)")
    proxy = commands.add_parser(
        "proxy", help="serve 2025-11-25 task clients in front of a remote 2026-07-28 tasks server"
    )
    proxy.add_argument("--upstream", required=True, help="the upstream MCP endpoint, e.g. http://10.0.0.7:3001/mcp")
    proxy.add_argument("--host", help="address to bind (EXT_TASKS_HOST, default 127.0.0.1)")
    proxy.add_argument("--port", type=int, help="port to bind (EXT_TASKS_PORT, default 3001)")
    proxy.add_argument("--valkey-url", help="keep legacy sessions in Valkey, for several proxy instances")
    proxy.add_argument("--log-level", help="debug, info, warning or error (EXT_TASKS_LOG_LEVEL, default info)")
    commands.add_parser("keygen", help="print a new requestState key for EXT_TASKS_STATE_KEYS")
    # The client's commands, imported here: a server process (app_from_env) never loads them.
    from . import admin_cli
    from .client import commands as client_commands
    from .loadgen import command as bench_command

    client_commands.add_commands(commands)
    bench_command.add_command(commands)
    admin_cli.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "keygen":
        print(generate_key())  # noqa: T201 - the command's output
        return 0
    if args.command in ("call", "task", "tools", "login", "logout"):
        from .client import commands as client_commands

        return client_commands.run(args)
    if args.command == "bench":
        from .loadgen import command as bench_command

        return bench_command.run(args)
    if args.command == "admin":
        from . import admin_cli

        return admin_cli.run(args)
    try:
        settings = _settings(args)
    except ConfigError as exc:
        print(f"ext-tasks: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    _configure_logging(settings.log_level, settings.log_format)
    try:
        if args.command == "proxy":
            return _proxy(settings, args.upstream)
        return _work(settings) if args.command == "worker" else _serve(settings)
    except ConfigError as exc:
        print(f"ext-tasks: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2


def _settings(args: argparse.Namespace) -> Settings:
    """The settings of ``serve``, ``worker`` or ``proxy``: the environment, the flags over it, checked."""
    overrides: dict[str, Any] = {"valkey_url": args.valkey_url, "log_level": args.log_level}
    if args.command != "proxy":
        overrides["tools"] = args.tools
    if args.command in ("serve", "proxy"):
        overrides.update(host=args.host, port=args.port)
    if args.command == "serve":
        overrides["workers"] = args.workers
        overrides["server"] = args.server
        if args.no_task_workers:
            overrides["no_workers"] = True
    settings = settings_from_env().with_overrides(**overrides).validate()
    if args.command == "worker" and settings.valkey_url is None:
        raise ConfigError("`ext-tasks worker` serves a shared task store: set --valkey-url / EXT_TASKS_VALKEY_URL")
    if args.command == "worker" and settings.worker.no_workers:
        raise ConfigError("`ext-tasks worker` runs task workers only: EXT_TASKS_NO_WORKERS=true leaves it nothing")
    return settings


def _check_store(settings: Settings) -> None:
    """Refuse to start on a store that may evict keys (a :class:`ConfigError`), once, before any
    server or worker process exists."""
    from .compose import check_store_settings

    asyncio.run(check_store_settings(settings))


def _configure_logging(level: str, log_format: str = "json") -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # One line per upstream request (the proxy) is noise at info level.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def hypercorn_config(settings: Settings) -> HypercornConfig:
    """How ``ext-tasks serve`` configures hypercorn for ``settings``: public, because the benchmark serves
    its echo floor and the SDK peer the same way, and must follow any change made here."""
    config = HypercornConfig()
    config.bind = [_bind(settings.host, settings.port)]
    config.accesslog = None  # an access log costs a quarter of the throughput (performance.md §3)
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handler, so JSON like the rest
    config.keep_alive_max_requests = 10**9
    config.backlog = 1024
    config.graceful_timeout = 5.0
    config.worker_class = "uvloop" if sys.platform != "win32" else "asyncio"
    return config


def _serve(settings: Settings) -> int:
    _check_store(settings)
    several = settings.server == "granian" or settings.workers > 1
    if several and settings.admin.enabled:
        _admin_beside(settings)  # once, in this parent process, over the shared store
    if settings.server == "granian":
        return _serve_granian(settings)
    config = hypercorn_config(settings)
    if settings.workers > 1:
        from hypercorn.run import run

        # Each hypercorn worker process builds its own app from the environment (see app_from_env).
        os.environ.update(_env_for_children(settings))
        config.workers = settings.workers
        config.application_path = "ext_tasks.cli:app_from_env()"
        return int(run(config) or 0)
    from .admin_http import admin_app
    from .compose import serve_app

    runtime, app = serve_app(settings)
    # The admin listener beside /mcp, in this process: it reads the same store (the in-memory one too).
    beside = [(admin_app(settings, runtime.store), admin_config(settings))] if settings.admin.enabled else []
    # On SIGTERM, end subscription streams first (each gets its final result), so hypercorn's drain of
    # open connections does not have to cut them at its graceful timeout.
    return serve_hypercorn(app, config, on_signal=runtime.handler.close, beside=beside)


def admin_config(settings: Settings) -> HypercornConfig:
    """The admin listener's socket (``EXT_TASKS_ADMIN_HOST``:``EXT_TASKS_ADMIN_PORT``, loopback by default)."""
    admin = settings.admin
    config = hypercorn_config(settings)
    config.bind = [_bind(admin.admin_host, admin.admin_port or 0)]
    logger.info("admin listener on %s", config.bind[0])
    return config


def _admin_beside(settings: Settings) -> None:
    """Serve the admin app from a thread of this (parent) process, on a store of its own, while the
    child processes serve ``/mcp``; it ends with the process."""
    import threading

    from hypercorn.asyncio import serve

    from .admin_http import standalone_admin_app

    app, config = standalone_admin_app(settings), admin_config(settings)

    async def main() -> None:
        await serve(app, config, shutdown_trigger=asyncio.Event().wait)

    threading.Thread(target=_run_loop, args=(main,), name="ext-tasks-admin", daemon=True).start()


def _serve_granian(settings: Settings) -> int:
    """The same app on granian (a Rust HTTP server): about twice hypercorn's throughput on this app
    (bench/results), at the price of a compiled dependency. Every worker builds the app from the
    environment, like hypercorn's multi-process mode."""
    try:
        from granian import Granian
        from granian.constants import Interfaces, Loops
    except ImportError:
        raise ConfigError("--server granian needs the granian package: pip install 'ext-tasks[granian]'") from None
    os.environ.update(_env_for_children(settings))
    server = Granian(
        "ext_tasks.cli:app_from_env",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=settings.workers,
        loop=Loops.uvloop,
        log_access=False,
        backlog=1024,
    )
    server.serve()
    return 0


def _env_for_children(settings: Settings) -> dict[str, str]:
    return {
        "EXT_TASKS_HOST": settings.host,
        "EXT_TASKS_PORT": str(settings.port),
        "EXT_TASKS_TOOLS": settings.tools,
        "EXT_TASKS_WORKERS": str(settings.workers),
        "EXT_TASKS_LOG_LEVEL": settings.log_level,
        "EXT_TASKS_VALKEY_URL": settings.valkey_url or "",
        "EXT_TASKS_NO_WORKERS": "true" if settings.worker.no_workers else "false",
    }


def app_from_settings(settings: Settings) -> App:
    from .compose import serve_app

    return serve_app(settings)[1]


def app_from_env() -> App:
    """The app of one hypercorn worker process when ``--workers`` > 1."""
    settings = settings_from_env().validate()
    _configure_logging(settings.log_level, settings.log_format)
    return app_from_settings(settings)


def _work(settings: Settings) -> int:
    """``ext-tasks worker``: task workers on the shared store, no HTTP, until SIGINT or SIGTERM."""
    from .compose import Runtime, load_registry

    _check_store(settings)
    runtime = Runtime(load_registry(settings.tools), settings, serve_requests=False)

    async def main() -> None:
        stop = _stop_event()
        await runtime.start()
        logger.info("task worker running; stop with SIGTERM")
        try:
            await stop.wait()
        finally:
            await runtime.stop()

    _run_loop(main)
    return 0


def _proxy(settings: Settings, upstream_url: str) -> int:
    """``ext-tasks proxy``: the legacy shim over a remote server, on one hypercorn process."""
    from .compose import proxy_app

    if settings.valkey_url is not None:
        _check_store(settings)  # its legacy sessions would be evicted as silently as tasks
    return serve_hypercorn(proxy_app(settings, upstream_url, _version()), hypercorn_config(settings))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ext-tasks")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def _stop_event(on_signal: Callable[[], None] | None = None) -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopping() -> None:
        if on_signal is not None:
            on_signal()
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping)
    return stop


def serve_hypercorn(
    app: object,
    config: HypercornConfig,
    on_signal: Callable[[], None] | None = None,
    beside: Sequence[tuple[object, HypercornConfig]] = (),
) -> int:
    """Serve ``app`` in this process with ``config`` until SIGTERM or SIGINT, as ``ext-tasks serve`` does
    (public for the benchmark's echo floor, which must be served the same way); ``beside``: other apps on
    sockets of their own (the admin listener), stopped with it."""
    from hypercorn.asyncio import serve

    async def main() -> None:
        stop = _stop_event(on_signal)
        apps = [(app, config), *beside]
        await asyncio.gather(*(serve(one, its, shutdown_trigger=stop.wait) for one, its in apps))  # type: ignore[arg-type]

    _run_loop(main)
    return 0


def _run_loop(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        asyncio.run(main())
    else:
        uvloop.run(main())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
