"""Tools for the admin listener's tests (``test_admin.py``), written against the public ``ext_tasks`` API.

- ``sleepy``: sleeps ``seconds`` inside a task, its ``statusMessage`` naming its pid first.
- ``asks``: asks one question inside the task, so it waits ``input_required``.
- ``breaks``: fails with a JSON-RPC error (the task ends ``failed``, its last error kept).
- ``instant``: returns at once (the benchmark's ``lifecycle`` task, for the command budget).
"""

from __future__ import annotations

import asyncio
import os

from ext_tasks import Context, ProtocolError, ToolRegistry

registry = ToolRegistry("admin-e2e", version="0.0.1")

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@registry.tool(task="required", description="Sleep for `seconds` seconds inside a task.")
async def sleepy(ctx: Context, seconds: float) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s in pid {os.getpid()}"


@registry.tool(task="required", description="Ask a name inside the task, then greet it.")
async def asks(ctx: Context) -> str:
    answer = await ctx.elicit("name", "Who are you?", NAME_SCHEMA)
    return f"hello {(answer.content or {}).get('name')}"


@registry.tool(task="required", description="Fail with a JSON-RPC error naming `reason`.")
async def breaks(reason: str) -> str:
    raise ProtocolError(f"broken on purpose: {reason}")


@registry.tool(task="required", description="A task whose body returns at once.")
async def instant(label: str = "x") -> str:
    return f"done {label}"
