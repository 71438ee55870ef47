"""Tools for the Tasks-extension end-to-end test with the real ``mcp==2.3.0`` client.

Written against the public ``ext_tasks`` API only:

- ``quick_sum``: a task (when the client declares the extension) that adds two numbers after a short wait.
- ``approve_release``: a task-only tool that asks two questions at once *inside* the task (the client
  sees ``input_required`` on ``tasks/get`` and answers with ``tasks/update``).
- ``long_export``: a task that works for a long time, there to be cancelled.
"""

from __future__ import annotations

import asyncio
import logging

from ext_tasks import Context, ToolError, ToolRegistry, elicit

registry = ToolRegistry("tasks-e2e", version="0.0.1")
logger = logging.getLogger("tests.e2e.task_client_tools")

#: Written to the server log when ``long_export`` sees its cancellation (the test waits for it).
CANCELLED_LINE = "long_export saw its cancellation"

APPROVER_SCHEMA = {
    "type": "object",
    "properties": {"approver": {"type": "string", "description": "Who approves the release"}},
    "required": ["approver"],
}
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "Ship it?"}},
    "required": ["confirm"],
}


@registry.tool(task="optional", description="Add two integers after a short wait; a task when the client allows it.")
async def quick_sum(a: int, b: int) -> str:
    await asyncio.sleep(0.2)
    return f"{a} + {b} = {a + b}"


@registry.tool(task="required", description="Ask who approves a release and whether to ship it, inside the task.")
async def approve_release(ctx: Context, version: str) -> str:
    answers = ctx.ask(
        {
            "approver": elicit(f"Who approves release {version}?", APPROVER_SCHEMA),
            "confirm": elicit(f"Ship release {version}?", CONFIRM_SCHEMA),
        }
    )
    approver = (answers["approver"].content or {}).get("approver")
    confirmed = (answers["confirm"].content or {}).get("confirm")
    if not isinstance(approver, str) or confirmed is not True:
        raise ToolError(f"Release {version} was not approved.")
    await ctx.set_status(f"Shipping {version}")
    return f"Release {version} approved by {approver}."


@registry.tool(task="optional", description="Export for a long time (there to be cancelled).")
async def long_export(seconds: float = 60.0) -> str:
    try:
        await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    except asyncio.CancelledError:
        # tasks/cancel reaches the worker, which cancels this coroutine at once.
        logger.warning(CANCELLED_LINE)
        raise
    return f"exported after {seconds:g}s"
