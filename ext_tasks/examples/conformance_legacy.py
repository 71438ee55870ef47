"""The 2025-only fixtures of the conformance referee (``--requirements 2025-11-25``).

Registered on the conformance registry by ``ext_tasks.examples.conformance``: ``test_tool_with_logging``
(tools-call-with-logging), ``test_sampling`` (tools-call-sampling), ``test_elicitation``
(tools-call-elicitation), ``test_elicitation_sep1034_defaults`` (elicitation-sep1034-defaults) and
``test_elicitation_sep1330_enums`` (elicitation-sep1330-enums). Names, arguments, texts and schemas
follow the scenario descriptions in modelcontextprotocol/conformance ``src/scenarios/server``.

They use the public tool-author API only, and the same registry is served to 2026-07-28 clients, so
each one works in both eras without knowing which it is in:

* asking (``ctx.sample`` / ``ctx.elicit``) is a multi round-trip request; on the 2025-11-25 path the
  migration shim relays it as a real ``sampling/createMessage`` / ``elicitation/create`` request on the
  POST's SSE stream and re-runs the tool with the client's answer;
* a client that did not declare sampling or elicitation gets -32021 (modern) or the shim's legacy
  error for it, never a silently skipped question;
* logs (``ctx.log``) go out only when the request asked for them: ``logging/setLevel`` on a legacy
  session, ``_meta`` ``logLevel`` on a modern request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from pydantic import Field

from ext_tasks import Context, ToolRegistry

#: tools-call-elicitation: the referee answers ``{username, email}``.
USER_INFO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}

#: SEP-1034: a default for every primitive type (string, integer, number, enum, boolean).
DEFAULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Your name", "default": "John Doe"},
        "age": {"type": "integer", "description": "Your age", "minimum": 0, "default": 30},
        "score": {"type": "number", "description": "Your score", "minimum": 0, "maximum": 100, "default": 95.5},
        "status": {
            "type": "string",
            "description": "Account status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verified account", "default": True},
    },
}

#: SEP-1330: the five enum shapes (untitled / titled / legacy ``enumNames``, single and multi-select).
ENUMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {
            "type": "string",
            "description": "Pick one (untitled single-select)",
            "enum": ["option1", "option2", "option3"],
        },
        "titledSingle": {
            "type": "string",
            "description": "Pick one (titled single-select)",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Pick one (legacy titled enum)",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Pick any (untitled multi-select)",
            "minItems": 1,
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Pick any (titled multi-select)",
            "minItems": 1,
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


def _outcome(action: str, content: dict[str, Any] | None) -> str:
    return f"action={action}, content={json.dumps(content or {}, sort_keys=True)}"


def register_legacy_fixtures(registry: ToolRegistry) -> None:
    @registry.tool(description="Sends three info log messages about 50 ms apart, then returns.")
    async def test_tool_with_logging(ctx: Context) -> str:
        await ctx.log("info", "Tool execution started", logger="conformance")
        await asyncio.sleep(0.05)
        await ctx.log("info", "Tool processing data", logger="conformance")
        await asyncio.sleep(0.05)
        await ctx.log("info", "Tool execution completed", logger="conformance")
        return "Tool with logging executed successfully."

    @registry.tool(description="Asks the client's model to answer a prompt (sampling), then returns its answer.")
    async def test_sampling(
        ctx: Context, prompt: Annotated[str, Field(description="The prompt to send to the LLM")]
    ) -> str:
        reply = await ctx.sample("llm_response", prompt, max_tokens=100)
        blocks = reply.content if isinstance(reply.content, list) else [reply.content]
        text = "".join(str(block.get("text", "")) for block in blocks if block.get("type") == "text")
        return f"LLM response: {text}"

    @registry.tool(description="Asks the user for a username and an email (elicitation), then echoes the answer.")
    async def test_elicitation(
        ctx: Context, message: Annotated[str, Field(description="The message to show the user")]
    ) -> str:
        answer = await ctx.elicit("user_info", message, USER_INFO_SCHEMA)
        return f"User response: {_outcome(answer.action, answer.content)}"

    @registry.tool(description="Elicits a form whose fields all carry defaults (SEP-1034).")
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        answer = await ctx.elicit("defaults", "Please review and update the form fields with defaults", DEFAULTS_SCHEMA)
        return f"Elicitation completed: {_outcome(answer.action, answer.content)}"

    @registry.tool(description="Elicits a form with every enum variant (SEP-1330).")
    async def test_elicitation_sep1330_enums(ctx: Context) -> str:
        answer = await ctx.elicit("enums", "Please select options from the enum fields", ENUMS_SCHEMA)
        return f"Elicitation completed: {_outcome(answer.action, answer.content)}"
