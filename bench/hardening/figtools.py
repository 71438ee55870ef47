"""Tools for the hardening figures, written against the public ToolRegistry API both checkouts share.

Served as `--tools figtools` (this directory is on the children's PYTHONPATH, after the checkout).
"""

from __future__ import annotations

import asyncio
import os

from ext_tasks import ToolRegistry

registry = ToolRegistry("hardening", version="0.0.1")

QUICK_TTL_MS = int(os.environ.get("FIG_QUICK_TTL_MS", "30000"))


@registry.tool(task="optional", description="Sleeps for `seconds` seconds (at most 600).")
async def slow(seconds: float = 1.0) -> str:
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s"


@registry.tool(task="optional", ttl_ms=QUICK_TTL_MS, description="Returns at once; a short-lived task.")
async def quick(n: int = 0) -> str:
    return f"done {n}"
