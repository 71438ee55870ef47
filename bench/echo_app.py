"""The floor under the protocol: a bare Litestar JSON echo endpoint on the same server stack.

``POST /echo`` takes a JSON-RPC request object (a typed ``dict`` body, decoded by Litestar) and answers
``{"jsonrpc": "2.0", "id": <id>, "result": {}}``. Served exactly as ``ext-tasks serve`` serves its app:
the hypercorn configuration is built by :mod:`ext_tasks.cli` itself, so both sides of every ratio run
on the same HTTP stack (uvloop worker, no access log, the same keep-alive and backlog settings).

::

    python -m bench.echo_app --port 8000 [--workers 2]          # hypercorn, like ext-tasks serve
    granian --interface asgi --loop uvloop bench.echo_app:app    # the reference ASGI server
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from litestar import Litestar, post


@post("/echo", status_code=200)
async def echo(data: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": data.get("id"), "result": {}}


def create_app() -> Litestar:
    return Litestar(route_handlers=[echo], openapi_config=None, logging_config=None)


app = create_app()


def main(argv: Sequence[str] | None = None) -> int:
    # Imported here: the module stays importable (as an ASGI target) without touching the CLI.
    from ext_tasks import cli
    from ext_tasks.config import Settings

    parser = argparse.ArgumentParser(prog="python -m bench.echo_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    # The very configuration `ext-tasks serve` uses (its public functions, on purpose: the baseline
    # must follow any change made to how the real server is served).
    config = cli.hypercorn_config(Settings(host=args.host, port=args.port))
    if args.workers > 1:
        from hypercorn.run import run

        config.workers = args.workers
        config.application_path = "bench.echo_app:app"
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        return int(run(config) or 0)
    return cli.serve_hypercorn(app, config)


if __name__ == "__main__":
    raise SystemExit(main())
