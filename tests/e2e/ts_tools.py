"""Tools for the end-to-end test with the official TypeScript Tasks client (``ts_tasks/driver.mjs``).

Written against the public ``ext_tasks`` API only. Every task tool names the process that ran it,
so the balancer run can show which instance did the work:

- ``quick_sum``: a task (when the client allows one) that adds two numbers after a short wait.
- ``approve_release``: a task-only tool that asks two questions at once *inside* the task.
- ``long_export``: a task that works for a long time, there to be cancelled (logs when it sees it).
- ``failing_check``: a task that ends with a tool error (``isError``).
- ``broken_job``: a task that ends with a JSON-RPC error (a ``failed`` task).
- ``echo_inline``: never a task; answers inline.
- ``handoff_job``: a task that works for a couple of seconds, long enough to be handed to another session.
- ``handoff_approval``: a task that works for a second, then asks one question inside the task (so the
  session that resumed a handed-off task is the one to answer it).
"""

from __future__ import annotations

import asyncio
import logging
import os

from ext_tasks import Context, ProtocolError, ToolError, ToolRegistry, elicit

registry = ToolRegistry("ts-tasks-e2e", version="0.0.1")
logger = logging.getLogger("tests.e2e.ts_tools")

#: Written to the server log when ``long_export`` sees its cancellation (the test waits for it).
CANCELLED_LINE = "ts long_export saw its cancellation"
#: The JSON-RPC error ``broken_job`` ends with.
BROKEN_MESSAGE = "the job's backend is unreachable"
BROKEN_DATA = {"backend": "reports-db"}

APPROVER_SCHEMA = {
    "type": "object",
    "properties": {"approver": {"type": "string", "description": "Who approves the release"}},
    "required": ["approver"],
}
REVIEWER_SCHEMA = {
    "type": "object",
    "properties": {"reviewer": {"type": "string", "description": "Who reviews the report"}},
    "required": ["reviewer"],
}
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "Ship it?"}},
    "required": ["confirm"],
}


@registry.tool(task="optional", description="Add two integers after a short wait; a task when the client allows it.")
async def quick_sum(ctx: Context, a: int, b: int) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
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
async def long_export(ctx: Context, seconds: float = 60.0) -> str:
    await ctx.set_status(f"exporting in pid {os.getpid()}")
    try:
        await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    except asyncio.CancelledError:
        # tasks/cancel reaches the worker, which cancels this coroutine at once.
        logger.warning("%s (task %s)", CANCELLED_LINE, ctx.task_id)
        raise
    return f"exported after {seconds:g}s"


@registry.tool(task="required", description="Check a release; it always fails with a tool error.")
async def failing_check(version: str) -> str:
    await asyncio.sleep(0.1)
    raise ToolError(f"Check of {version} failed: 2 tests are red.")


@registry.tool(task="required", description="Run a job whose backend is down; it ends with a JSON-RPC error.")
async def broken_job(job: str) -> str:
    await asyncio.sleep(0.1)
    raise ProtocolError(BROKEN_MESSAGE, data={**BROKEN_DATA, "job": job})


@registry.tool(description="Echo a text inline (never a task).")
async def echo_inline(text: str) -> str:
    return f"echo: {text}"


@registry.tool(task="required", description="Work for `seconds` seconds inside a task; names the pids involved.")
async def handoff_job(ctx: Context, label: str, seconds: float = 2.0) -> str:
    started_in = os.getpid()
    await ctx.set_status(f"pid {started_in}")
    await asyncio.sleep(max(0.0, min(seconds, 60.0)))
    return f"{label} done (started in pid {started_in}, finished in pid {os.getpid()})"


@registry.tool(task="required", description="Work for a second inside a task, then ask who reviews the report.")
async def handoff_approval(ctx: Context, label: str) -> str:
    # The task function runs again once answered; only its first run does the work.
    if ctx.answer("reviewer", elicit(f"Who reviews {label}?", REVIEWER_SCHEMA)) is None:
        await ctx.set_status(f"working in pid {os.getpid()}")
        await asyncio.sleep(1.0)
    answer = await ctx.elicit("reviewer", f"Who reviews {label}?", REVIEWER_SCHEMA)
    reviewer = (answer.content or {}).get("reviewer")
    if answer.action != "accept" or not isinstance(reviewer, str):
        raise ToolError(f"{label} has no reviewer.")
    return f"{label} reviewed by {reviewer}."
