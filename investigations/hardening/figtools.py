"""Tools for the hardening figures, written against the public ToolRegistry API both checkouts share.

Served as `--tools figtools` (this directory is on the children's PYTHONPATH, after the checkout); the
end-to-end test of the notification buffer serves it as `investigations.hardening.figtools`.
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


TEXT = {"type": "object", "properties": {"text": {"type": "string"}}}


@registry.tool(task="optional", description="Keeps `blob` as its argument; answers its length (figure 4).")
async def keep(blob: str = "") -> str:
    return f"kept {len(blob)}"


@registry.tool(task="required", description="Asks `rounds` questions, one per round (figure 4).")
async def interview(ctx: Context, rounds: int = 15) -> str:
    for n in range(1, rounds + 1):
        await ctx.elicit(f"q{n}", f"Answer {n}?", TEXT)
    return f"answered {rounds}"


@registry.tool(task="required", description="Sets a status message of `size` characters (figure 4).")
async def chatter(ctx: Context, size: int = 0) -> str:
    await ctx.set_status("s" * size)
    return "said"


@registry.tool(task="optional", preflight=True, description="Finishes before it becomes a task (figure 4).")
async def instant(ctx: Context) -> str:
    return "instant"


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
