"""Task tools for the lifetimes end-to-end test, written against the public ``ext_tasks`` API only.

- ``outlives``: granted one second (``ttl_ms``), sleeps ``seconds`` (longer than that) and completes.
- ``bounded``: ``timeout_s=1``; sleeps ``seconds``; notes ``stopped <task id> <pid>`` in
  ``$E2E_TASK_JOURNAL`` when its coroutine is cancelled, so a test sees where it was stopped.
- ``asks``: ``input_timeout_s=1``; asks one question and completes once answered.
- ``breaks``: ends ``failed`` at once (a protocol error of the tool).
"""

from __future__ import annotations

import asyncio
import os

from ext_tasks import Context, ProtocolError, ToolRegistry

registry = ToolRegistry("lifetimes-e2e", version="0.0.1")
JOURNAL_VARIABLE = "E2E_TASK_JOURNAL"
GRANT_MS = 1_000


@registry.tool(task="required", ttl_ms=GRANT_MS)
async def outlives(ctx: Context, seconds: float) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    await asyncio.sleep(max(0.0, min(seconds, 60.0)))
    return f"slept {seconds:g}s in pid {os.getpid()}"


@registry.tool(task="required", timeout_s=1)
async def bounded(ctx: Context, seconds: float) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    try:
        await asyncio.sleep(max(0.0, min(seconds, 60.0)))
    except asyncio.CancelledError:
        _note_stopped(ctx.task_id)
        raise
    return "never: the timeout comes first"


def _note_stopped(task_id: str | None) -> None:
    journal = os.environ.get(JOURNAL_VARIABLE)
    if journal:
        with open(journal, "a", encoding="utf-8") as file:  # one short line: appends interleave whole
            file.write(f"stopped {task_id} {os.getpid()}\n")


@registry.tool(task="required", input_timeout_s=1)
async def asks(ctx: Context) -> str:
    answer = await ctx.elicit("go", "Go ahead?", {"type": "object", "properties": {}})
    return f"answered {answer.action}"


@registry.tool(task="required")
async def breaks() -> str:
    raise ProtocolError("the upstream is down")
