"""Tools for the ``ext-tasks bench`` tests, on the public tool-author API only.

- ``ask(item)``: one multi round-trip question (``mrtr``, ``replay``).
- ``quick_task(label)``: a task that ends at once (``lifecycle``, and the ``tasks-get`` population);
  ``ask_in_task``: one that asks first.
- ``fails``: always an ``isError`` result.
- ``stall_every_tenth``: answers at once, except that every tenth call first blocks the whole server
  for 200 ms (``time.sleep`` on the event loop): a server that stalls, for the open-loop test.
"""

from __future__ import annotations

import itertools
import time

from ext_tasks import Context, ToolError, ToolRegistry

registry = ToolRegistry("bench-command-e2e", version="0.0.1")
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
STALL_S = 0.2
_calls = itertools.count(1)


@registry.tool(description="Asks once for a confirmation, then answers.")
async def ask(ctx: Context, item: str = "x") -> str:
    answer = await ctx.elicit("confirm", f"Go on with {item}?", CONFIRM)
    return f"{item}: {answer.action}"


@registry.tool(task="required", description="A task that ends at once.")
async def quick_task(label: str = "x") -> str:
    return f"done {label}"


@registry.tool(task="required", description="A task that asks one question, then ends.")
async def ask_in_task(ctx: Context, label: str = "x") -> str:
    answer = await ctx.elicit("confirm", f"Go on with {label}?", CONFIRM)
    return f"{label}: {answer.action}"


@registry.tool(description="Always ends with an isError result.")
async def fails() -> str:
    raise ToolError("this tool always fails")


@registry.tool(description="Answers at once; every tenth call first blocks the server for 200 ms.")
async def stall_every_tenth() -> str:
    if next(_calls) % 10 == 0:
        time.sleep(STALL_S)  # noqa: ASYNC251 - on purpose: the whole server stalls
    return "ok"
