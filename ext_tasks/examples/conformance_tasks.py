"""The tasks-extension fixtures of the conformance referee (``tasks-*`` scenarios, SEP-2663).

Registered on the conformance registry by ``ext_tasks.examples.conformance``. Like the rest of the
fixture, they use the public tool-author API only: the task policy is declared per tool
(``task="optional" | "required"``), input inside a task is asked exactly like a multi round-trip
request, and ``preflight=True`` + ``ctx.start_task()`` does MRTR rounds before the task starts.
"""

from __future__ import annotations

import asyncio

from ext_tasks import Context, ProtocolError, ToolError, ToolRegistry, elicit

_NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
_CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


class _RemoteServiceError(ProtocolError):
    """A JSON-RPC-level failure inside a task: the task ends ``failed`` with this error."""

    code = -32603


def register_task_fixtures(registry: ToolRegistry) -> None:
    @registry.tool(description="Greets by name, always synchronously (never a task).")
    async def greet(name: str) -> str:
        return f"Hello, {name}!"

    @registry.tool(task="optional", description="Works for `seconds` seconds; a task when the client allows it.")
    async def slow_compute(seconds: float = 1.0, label: str = "job") -> str:
        # Cancellation arrives as asyncio.CancelledError at this await, so a cancelled task stops at once.
        await asyncio.sleep(max(0.0, min(seconds, 600.0)))
        return f"{label}: computed after {seconds:g}s"

    @registry.tool(task="required", description="A task whose tool run ends with an isError result.")
    async def failing_job() -> str:
        await asyncio.sleep(1.0)
        raise ToolError("The job failed: the input file is corrupt")

    @registry.tool(task="required", description="A task that ends failed with a JSON-RPC error.")
    async def protocol_error_job() -> str:
        await asyncio.sleep(0.2)
        raise _RemoteServiceError("Upstream API rate limit exceeded")

    @registry.tool(task="required", description="Deletes a file after asking for confirmation inside the task.")
    async def confirm_delete(ctx: Context, filename: str) -> str:
        answer = await ctx.elicit("confirm", f"Delete {filename}?", _CONFIRM)
        if answer.action == "accept" and (answer.content or {}).get("confirm"):
            return f"Deleted {filename}."
        return f"Kept {filename}."

    @registry.tool(task="required", description="Asks two questions at once inside the task.")
    async def multi_input(ctx: Context) -> str:
        answers = ctx.ask(
            {
                "name": elicit("What is your name?", _NAME),
                "confirm": elicit("Shall I go on?", _CONFIRM),
            }
        )
        name = (answers["name"].content or {}).get("name")
        go_on = (answers["confirm"].content or {}).get("confirm")
        return f"Name {name}, go on: {go_on}."

    @registry.tool(task="required", preflight=True, description="Asks a name by MRTR, then continues as a task.")
    async def test_tool_with_task(ctx: Context) -> str:
        answer = await ctx.elicit("user_name", "What is your name?", _NAME)
        await ctx.start_task()
        await asyncio.sleep(0.1)
        return f"Hello from the task, {(answer.content or {}).get('name', 'stranger')}!"
