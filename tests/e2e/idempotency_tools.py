"""A task tool that leaves a trace of every run it starts, for the retry-safety tests.

``record_run`` appends one line per run to the file it is given (appends of one short line are atomic),
so a test can count runs across every server process of a fleet.
"""

from __future__ import annotations

import asyncio
import os

from ext_tasks import Context, ToolRegistry

registry = ToolRegistry("idempotency-e2e", version="0.0.1")


@registry.tool(task="required", description="Record that a run started, then work briefly.")
async def record_run(ctx: Context, log_path: str, label: str) -> str:
    with open(log_path, "a") as log:  # noqa: ASYNC230 - one short local append; a test probe
        log.write(f"{ctx.task_id} {label} {os.getpid()}\n")
    await asyncio.sleep(0.3)
    return f"{label} done in pid {os.getpid()}"
