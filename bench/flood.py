"""``python -m bench.flood``: one principal's flood of task creations, for the fairness scenario
(:mod:`bench.fairness`). ``--count`` ``tools/call`` of a task tool, sent as fast as ``--senders``
keep-alive connections go (each sends its next call as soon as the last is answered), on the loader's
raw HTTP/1.1 (``ext_tasks.loadgen``, several times cheaper than httpx), in a process of its own so that
the probe measured beside it is not slowed down by the flood's own client work.

The bearer token comes from the environment (``BENCH_FLOOD_TOKEN``), never the command line, which
other users of the machine can read. It prints ``created N`` every ``--every`` creations (the probe
starts once the flood is under way), then one line of JSON: ``created``, ``seconds``, ``errors`` by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from ext_tasks.loadgen.http import REQUEST_TIMEOUT_S, Connection
from ext_tasks.loadgen.mcp import Failure, Mcp

TOKEN_VARIABLE: Final = "BENCH_FLOOD_TOKEN"


async def flood(
    host: str, port: int, path: str, *, tool: str, arguments: dict[str, Any], count: int, senders: int, every: int
) -> dict[str, Any]:
    mcp = Mcp(path, token=os.environ.get(TOKEN_VARIABLE) or None)
    errors: Counter[str] = Counter()
    sent = created = 0
    started = time.perf_counter()

    async def sender() -> None:
        nonlocal sent, created
        conn = Connection(host, port)
        try:
            while sent < count:
                sent += 1
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        result = await mcp.call(conn, "tools/call", {"name": tool, "arguments": dict(arguments)})
                except Failure as failure:
                    errors[failure.key] += 1
                    continue
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    errors[type(exc).__name__] += 1
                    conn.close()  # a connection in an unknown state is not used again
                    continue
                if result.get("resultType") != "task":
                    errors["answered without a task"] += 1
                    continue
                created += 1
                if created % every == 0:
                    print(f"created {created}", flush=True)
        finally:
            conn.close()

    await asyncio.gather(*(sender() for _ in range(senders)))
    return {"created": created, "seconds": round(time.perf_counter() - started, 3), "errors": dict(errors)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--tool", required=True)
    parser.add_argument("--args", default="{}", help="the tool's arguments (JSON object)")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--every", type=int, default=100, help="print progress every N creations")
    args = parser.parse_args(argv)
    outcome = asyncio.run(
        flood(args.host, args.port, args.path, tool=args.tool, arguments=json.loads(args.args), count=args.count,
              senders=args.senders, every=max(1, args.every))
    )  # fmt: skip
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
