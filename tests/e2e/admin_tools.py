"""Tools for the admin listener's tests (``test_admin.py``, ``test_admin_page.py``), written against the
public ``ext_tasks`` API: the fault tests' ``sleepy`` (a task that sleeps ``seconds``, its
``statusMessage`` naming its pid first) and ``echo``, on their registry, and three more:

- ``asks``: asks one question inside the task, so it waits ``input_required``.
- ``breaks``: fails with a JSON-RPC error (the task ends ``failed``, its last error kept).
- ``instant``: returns at once (the benchmark's ``lifecycle`` task, for the command budget).
"""

from __future__ import annotations

from ext_tasks import Context, ProtocolError
from tests.e2e.fault_tools import registry

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


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


__all__ = ["registry"]
