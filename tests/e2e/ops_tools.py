"""Tools for the operations tests (public API only)."""

from __future__ import annotations

from ext_tasks import Context, ToolRegistry

registry = ToolRegistry("ops-e2e", version="0.0.1")

_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@registry.tool(task="required", description="Asks two questions, one after the other, inside a task.")
async def two_questions(ctx: Context) -> str:
    first = await ctx.elicit("first", "First question?", _TEXT)
    await ctx.set_status("between the questions")
    second = await ctx.elicit("second", "Second question?", _TEXT)
    return f"{(first.content or {})['text']} then {(second.content or {})['text']}"


@registry.tool(description="Asks one question through a multi round-trip request.")
async def ask_once(ctx: Context) -> str:
    answer = await ctx.elicit("word", "A word?", _TEXT)
    return f"got {(answer.content or {}).get('text')}"


@registry.tool(task="required", description="Finishes at once inside a task.")
async def quick(ctx: Context) -> str:
    return "quick done"


@registry.tool(task="required", sensitive=True, description="Finishes at once; its result is delivered once.")
async def quick_secret(ctx: Context) -> str:
    return "secret done"
