"""The Python SDK 2.3.0 server (``mcp==2.3.0``) with a tool equivalent to ``bench.tools.ask_once``.

``ask_once`` answers ``InputRequiredResult`` with one elicitation and a request state on the first
round, and completes on the retry that carries the answer. The SDK's ``RequestStateBoundary`` seals
the state (AES-256-GCM) with a shared key ring (``--key``), exactly as a multi-instance deployment
must configure it, and verifies it on the retry. The tool returns the ``InputRequiredResult`` itself
(the SDK's lowest-overhead MRTR path; ``Resolve``/``Elicit`` dependencies add work on top).

Served stateless, JSON responses, no access log, by one of two HTTP servers (``--server``):

- ``uvicorn`` (the default; the server ``MCPServer.run`` uses), with uvloop and httptools when installed;
- ``hypercorn``, the HTTP server ext-tasks itself runs on, configured the way ``ext-tasks serve``
  configures it (``ext_tasks.cli.hypercorn_config``): served by ``hypercorn.asyncio.serve`` on a uvloop
  event loop (its ``uvloop`` worker class), no access log, errors at warning level, keep-alive
  connections never closed for their request count (``keep_alive_max_requests``), backlog 1024,
  graceful timeout 5 s. The defaults below mirror that function; ``python -m bench`` passes the
  values it reads from ``ext_tasks.cli`` itself (``--hypercorn-config``), so the peer follows any
  change made there. This interpreter does not have ext-tasks installed, hence the copy.

    python bench/peers/sdk_server.py --port 8001 --key <64 hex chars>
    python bench/peers/sdk_server.py --port 8001 --key <64 hex chars> --server hypercorn
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity


def build(key: bytes) -> MCPServer:
    server = MCPServer(
        "ext-tasks-bench-sdk",
        request_state_security=RequestStateSecurity(keys=[key]),
        log_level="WARNING",
    )

    @server.tool(description="Asks once for confirmation, completes on the retry")
    async def ask_once(ctx: Context, item: str = "x") -> types.CallToolResult | types.InputRequiredResult:
        answers = ctx.input_responses
        if answers is None or "confirm" not in answers:
            return types.InputRequiredResult(
                input_requests={
                    "confirm": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=f"Proceed with {item}?",
                            requested_schema={
                                "type": "object",
                                "properties": {"confirm": {"type": "boolean"}},
                                "required": ["confirm"],
                            },
                        )
                    )
                },
                request_state=f"asked:{item}",
            )
        action = getattr(answers["confirm"], "action", "accept")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{item}: {action}")])

    return server


#: What ``ext_tasks.cli.hypercorn_config`` sets on top of hypercorn's defaults (besides the bind and
#: the error logger: ours logs through the app's JSON handler at the configured level, warning here).
HYPERCORN_DEFAULTS: dict[str, Any] = {
    "accesslog": None,
    "keep_alive_max_requests": 10**9,
    "backlog": 1024,
    "graceful_timeout": 5.0,
    "worker_class": "uvloop",
}


def serve_uvicorn(app: Any, host: str, port: int) -> None:
    import uvicorn

    options: dict[str, object] = {"access_log": False, "log_level": "warning"}
    try:
        import uvloop  # noqa: F401

        options["loop"] = "uvloop"
    except ImportError:
        pass
    try:
        import httptools  # noqa: F401

        options["http"] = "httptools"
    except ImportError:
        pass
    uvicorn.run(app, host=host, port=port, **options)  # type: ignore[arg-type]


def hypercorn_config(host: str, port: int, overrides: dict[str, Any]) -> Any:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.loglevel = "WARNING"
    for name, value in {**HYPERCORN_DEFAULTS, **overrides}.items():
        if not hasattr(config, name):
            raise SystemExit(f"--hypercorn-config: hypercorn's Config has no {name!r}")
        setattr(config, name, value)
    return config


def serve_hypercorn(app: Any, config: Any) -> None:
    """As ``ext_tasks.cli.serve_hypercorn``: ``hypercorn.asyncio.serve`` until SIGTERM or SIGINT, on uvloop
    when the configured worker class is ``uvloop``."""
    from hypercorn.asyncio import serve

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await serve(app, config, shutdown_trigger=stop.wait)

    if config.worker_class == "uvloop":
        import uvloop

        uvloop.run(run())
    else:
        asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True, help="hex request-state key shared by every instance")
    parser.add_argument("--server", choices=("uvicorn", "hypercorn"), default="uvicorn", help="HTTP server")
    parser.add_argument(
        "--hypercorn-config",
        type=json.loads,
        default={},
        metavar="JSON",
        help="hypercorn Config attributes to set (over the defaults that mirror ext_tasks.cli)",
    )
    args = parser.parse_args()
    app = build(bytes.fromhex(args.key)).streamable_http_app(stateless_http=True, json_response=True, host=args.host)
    if args.server == "hypercorn":
        serve_hypercorn(app, hypercorn_config(args.host, args.port, args.hypercorn_config))
    else:
        serve_uvicorn(app, args.host, args.port)


if __name__ == "__main__":
    main()
