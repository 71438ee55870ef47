"""Task tools for the balancer end-to-end tests, written against the public ``ext_tasks`` API only.

Every tool first publishes ``pid <N>`` as the task's ``statusMessage`` and names the process that
finished it in its result text, so a test can tell which server (or worker) process ran a task.

- ``sleepy``: sleeps ``seconds`` inside a task (task-required).
- ``ask_then_finish``: asks one elicitation inside the task (who finishes it), then completes.
- ``journaled``: sleeps like ``sleepy``, noting each run's start and end in ``$E2E_TASK_JOURNAL``.
"""

from __future__ import annotations

import asyncio
import os
import time

from ext_tasks import Context, ToolError, ToolRegistry

registry = ToolRegistry("balancer-e2e", version="0.0.1")
JOURNAL_VARIABLE = "E2E_TASK_JOURNAL"

NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Who finishes the job"}},
    "required": ["name"],
}


@registry.tool(task="required", description="Sleep for `seconds` seconds inside a task; names the pid that ran it.")
async def sleepy(ctx: Context, seconds: float) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s in pid {os.getpid()}"


@registry.tool(task="required", description="Ask who finishes `label` inside the task, then finish it.")
async def ask_then_finish(ctx: Context, label: str) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    answer = await ctx.elicit("name", f"Who finishes {label}?", NAME_SCHEMA)
    name = (answer.content or {}).get("name")
    if answer.action != "accept" or not isinstance(name, str):
        raise ToolError(f"nobody finishes {label} (action {answer.action})")
    return f"{label} finished by {name} in pid {os.getpid()}"


@registry.tool(task="required", description="Sleep `seconds` inside a task, noting when each run starts and ends.")
async def journaled(ctx: Context, seconds: float) -> str:
    """Each run appends ``start``/``end`` lines (task id, pid, wall clock) to ``$E2E_TASK_JOURNAL``, so a
    test can tell whether one task ever ran twice at the same time."""
    journal = os.environ.get(JOURNAL_VARIABLE)
    _note(journal, "start", ctx.task_id)
    try:
        await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    finally:
        _note(journal, "end", ctx.task_id)
    return f"slept {seconds:g}s in pid {os.getpid()}"


def _note(journal: str | None, what: str, task_id: str | None) -> None:
    if journal:
        with open(journal, "a", encoding="utf-8") as file:  # one short line per write: appends interleave whole
            file.write(f"{what} {task_id} {os.getpid()} {time.time():.6f}\n")
