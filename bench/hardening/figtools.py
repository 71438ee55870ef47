"""Tools for the hardening figures, written against the public ToolRegistry API both checkouts share.

Served as `--tools figtools` (this directory is on the children's PYTHONPATH, after the checkout); the
end-to-end test of the notification buffer serves it as `bench.hardening.figtools`.
"""

from __future__ import annotations

import asyncio
import os
import time

from ext_tasks import Context, ToolRegistry

registry = ToolRegistry("hardening", version="0.0.1")

QUICK_TTL_MS = int(os.environ.get("FIG_QUICK_TTL_MS", "30000"))


@registry.tool(task="optional", description="Sleeps for `seconds` seconds (at most 600).")
async def slow(seconds: float = 1.0) -> str:
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s"


@registry.tool(task="optional", ttl_ms=QUICK_TTL_MS, description="Returns at once; a short-lived task.")
async def quick(n: int = 0) -> str:
    return f"done {n}"


@registry.tool(description="Reports progress as fast as it can for `seconds`, or `count` times if given, then answers.")
async def spew(ctx: Context, seconds: float = 10.0, pad: int = 1000, count: int = 0) -> str:
    """Each report carries `pad` characters (its message)."""
    ends = time.monotonic() + max(0.0, min(seconds, 600.0))
    text = "x" * max(0, min(pad, 100_000))
    sent = 0
    while time.monotonic() < ends and not 0 < count <= sent:
        sent += 1
        await ctx.report_progress(sent, count or None, text)
    return f"reported {sent}"
