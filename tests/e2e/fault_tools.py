"""Tools for the fault tests (``test_faults.py``), written against the public ``ext_tasks`` API only.

- ``sleepy``: sleeps ``seconds`` inside a task (task-required); publishes ``pid <N>`` as its
  ``statusMessage`` first and names the process that finished it in its result text.
- ``echo``: answers inline (never a task), so it needs no task store.
"""

from __future__ import annotations

import asyncio
import os

from ext_tasks import Context, ToolRegistry

registry = ToolRegistry("faults-e2e", version="0.0.1")


@registry.tool(task="required", description="Sleep for `seconds` seconds inside a task; names the pid that ran it.")
async def sleepy(ctx: Context, seconds: float) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s in pid {os.getpid()}"


@registry.tool(description="Return `text` at once, inline.")
async def echo(text: str) -> str:
    return text
