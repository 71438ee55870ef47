"""Tools for the MRTR end-to-end tests, written against the public ``ext_tasks`` API only.

- ``introduce``: asks two questions in two rounds (name, then favourite colour) and greets with both.
- ``haiku``: asks the client to sample a haiku about a topic and returns it.
- ``trip_plan`` (prompt): asks which city through MRTR and returns messages naming it.
"""

from __future__ import annotations

from ext_tasks import Context, PromptMessage, PromptResult, TextContent, ToolError, ToolRegistry

registry = ToolRegistry("mrtr-e2e", version="0.0.1")

NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}
COLOUR_SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "description": "Your favourite colour"}},
    "required": ["colour"],
}
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City to visit"}},
    "required": ["city"],
}


def _accepted(content: dict[str, object] | None, field: str, action: str) -> str:
    value = (content or {}).get(field)
    if action != "accept" or not isinstance(value, str):
        raise ToolError(f"no {field} given (action {action})")
    return value


@registry.tool(description="Ask the caller's name, then their favourite colour, and greet them.")
async def introduce(ctx: Context, greeting: str = "Hello") -> str:
    name_answer = await ctx.elicit("name", "What is your name?", NAME_SCHEMA)
    name = _accepted(name_answer.content, "name", name_answer.action)
    # Only reached in the second round: the colour question depends on the first answer.
    colour_answer = await ctx.elicit("colour", f"What is your favourite colour, {name}?", COLOUR_SCHEMA)
    colour = _accepted(colour_answer.content, "colour", colour_answer.action)
    return f"{greeting}, {name}! Your favourite colour is {colour}."


@registry.tool(description="Ask the client's model for a haiku about a topic.")
async def haiku(ctx: Context, topic: str) -> str:
    sampled = await ctx.sample("haiku", f"Write a haiku about {topic}.", max_tokens=64)
    content = sampled.content if isinstance(sampled.content, dict) else sampled.content[0]
    text = content.get("text")
    if not isinstance(text, str):
        raise ToolError("the sampled message has no text")
    return f"Haiku from {sampled.model}: {text}"


@registry.prompt(description="Plan a trip; asks which city first.")
async def trip_plan(ctx: Context, days: str = "3") -> PromptResult:
    answer = await ctx.elicit("city", "Which city do you want to visit?", CITY_SCHEMA)
    city = (answer.content or {}).get("city") if answer.action == "accept" else None
    if not isinstance(city, str):
        city = "somewhere nice"
    return PromptResult(
        messages=[
            PromptMessage(role="user", content=TextContent(text=f"Plan a {days}-day trip to {city}.")),
            PromptMessage(role="assistant", content=TextContent(text=f"Day 1 in {city}: walk the old town.")),
        ],
        description=f"A trip to {city}",
    )
