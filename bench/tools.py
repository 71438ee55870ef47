"""The tools the benchmark calls, written with the public tool-author API only.

Served with ``ext-tasks serve --tools bench.tools``:

* ``ask_once(item)``: multi round-trip request. The first call answers ``input_required`` with one
  elicitation and a sealed ``requestState``; the retry carrying the answer completes. It does no other
  work, so a round trip measures the protocol (envelope checks, argument validation, state codec).
* ``instant(label)``: a task (``task="required"``) whose body returns at once: create -> complete is
  pure task-machinery overhead (store writes, queue hand-off, worker commit).
* ``ask_in_task(label)``: a task that asks one question (``input_required`` inside the task), answered
  with ``tasks/update``, then completes.
* ``hold(seconds)``: a task that stays ``working`` for ``seconds`` (the "working" half of the
  ``tasks/get`` population).
* ``stamp(label)``: a task that answers the wall-clock instant its body started (epoch milliseconds, as
  text): the fairness scenario's probe, whose create-to-start latency it gives (``bench.fairness``).
* ``busy(ms)``: a task that stays ``working`` for ``ms`` milliseconds: the fairness scenario's flood.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from pydantic import Field

from ext_tasks import Context, ToolRegistry

registry = ToolRegistry("ext-tasks-bench", version="1.0.0")

CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


@registry.tool(description="Asks once for confirmation, completes on the retry")
async def ask_once(ctx: Context, item: Annotated[str, Field(max_length=64)] = "x") -> str:
    answer = await ctx.elicit("confirm", f"Proceed with {item}?", CONFIRM)
    return f"{item}: {answer.action}"


@registry.tool(task="required", description="A task whose body returns at once")
async def instant(label: str = "x") -> str:
    return f"done {label}"


@registry.tool(task="required", description="A task that asks one question, then completes")
async def ask_in_task(ctx: Context, label: str = "x") -> str:
    answer = await ctx.elicit("confirm", f"Go on with {label}?", CONFIRM)
    return f"{label}: {answer.action}"


@registry.tool(task="required", description="A task that stays working for `seconds`")
async def hold(seconds: Annotated[float, Field(ge=0, le=3600)] = 600.0) -> str:
    await asyncio.sleep(seconds)
    return "held"


@registry.tool(task="required", description="A task that answers when its body started (epoch ms)")
async def stamp(label: str = "x") -> str:
    return f"{time.time() * 1000:.3f}"


@registry.tool(task="required", description="A task that stays working for `ms` milliseconds")
async def busy(ms: Annotated[float, Field(ge=0, le=60_000)] = 100.0) -> str:
    await asyncio.sleep(ms / 1000)
    return "busy"
