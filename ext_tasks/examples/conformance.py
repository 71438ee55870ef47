"""The fixture the MCP conformance referee (``@modelcontextprotocol/conformance``) expects.

Serve it with ``ext-tasks serve --tools ext_tasks.examples.conformance`` and point
``conformance server --url http://127.0.0.1:PORT/mcp --requirements 2026-07-28`` at it. The referee
calls these tools, prompts and resources by name, so the names (and the texts, URIs and input keys
its scenarios describe) come from the suite, not from here: see the scenario sources in
modelcontextprotocol/conformance, ``src/scenarios/server``. The tasks-extension fixtures
(``tasks-*``, SEP-2663) live in :mod:`.conformance_tasks`, the 2025-only fixtures (``--requirements
2025-11-25``: logging, sampling, elicitation) in :mod:`.conformance_legacy`; both are registered at the
end of this module.

It is written with the public tool-author API only: nothing in the server knows these names.
"""

from __future__ import annotations

import base64
import io
import struct
import wave
import zlib
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import Field

from ext_tasks import (
    AudioContent,
    Context,
    EmbeddedResource,
    Header,
    ImageContent,
    PromptMessage,
    PromptResult,
    ResourceContents,
    TextContent,
    ToolError,
    ToolRegistry,
    elicit,
    list_roots,
    sample,
)

from .conformance_legacy import register_legacy_fixtures
from .conformance_tasks import register_task_fixtures

registry = ToolRegistry(
    "ext-tasks-conformance",
    version="0.1.0",
    instructions="Fixture for the MCP conformance suite: every tool, prompt and resource it calls by name.",
)


# --- small real media payloads, built with the stdlib ---------------------------------------------


def _png_1x1() -> bytes:
    """A valid 1x1 red RGB PNG (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # width, height, bit depth 8, colour type RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte 0, then one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _wav_silence(frames: int = 800, rate: int = 8000) -> bytes:
    """0.1 s of 8-bit mono silence as a WAV file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(rate)
        out.writeframes(b"\x80" * frames)
    return buffer.getvalue()


PNG = _png_1x1()
PNG_B64 = base64.b64encode(PNG).decode("ascii")
WAV_B64 = base64.b64encode(_wav_silence()).decode("ascii")

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CONFIRM_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
COLOR_SCHEMA = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
CONTEXT_SCHEMA = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}


# --- content tools (tools-call-*) ------------------------------------------------------------------


@registry.tool(description="Returns a fixed text.")
async def test_simple_text() -> str:
    return "This is a simple text response for testing."


@registry.tool(description="Returns a 1x1 PNG image.")
async def test_image_content() -> ImageContent:
    return ImageContent(data=PNG_B64, mime_type="image/png")


@registry.tool(description="Returns a short WAV clip.")
async def test_audio_content() -> AudioContent:
    return AudioContent(data=WAV_B64, mime_type="audio/wav")


@registry.tool(description="Returns an embedded text resource.")
async def test_embedded_resource() -> EmbeddedResource:
    contents = ResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return EmbeddedResource(resource=contents)


@registry.tool(description="Returns text, an image and an embedded JSON resource.")
async def test_multiple_content_types() -> list[Any]:
    resource = ResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text='{"test": "data", "value": 123}'
    )
    return [
        TextContent(text="Multiple content types test:"),
        ImageContent(data=PNG_B64, mime_type="image/png"),
        EmbeddedResource(resource=resource),
    ]


@registry.tool(description="Always ends with an isError result.")
async def test_error_handling() -> str:
    raise ToolError("This tool intentionally returns an error for testing")


@registry.tool(description="Reports progress 0, 50 and 100 of 100 when the request carries a progressToken.")
async def test_tool_with_progress(ctx: Context) -> str:
    for done in (0, 50, 100):
        await ctx.report_progress(done, 100, f"{done}% done")
    return "Progress test completed."


# --- SEP-1613/2106 and SEP-2243 fixtures (pending scenarios) ---------------------------------------

# Published exactly as written: the referee checks that these 2020-12 keywords survive tools/list.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@registry.tool(description="Tool with JSON Schema 2020-12 features", input_schema=JSON_SCHEMA_2020_12)
async def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict[str, Any] | None = None,
    contactMethod: str | None = None,  # noqa: N803 - the wire name from the referee's schema
    phone: str | None = None,
    email: str | None = None,
) -> str:
    contact = phone if contactMethod == "phone" else email
    return f"Received {name or 'someone'} ({contact or 'no contact'})"


@registry.tool(description="Echoes a region that is mirrored in the Mcp-Param-Region header (SEP-2243).")
async def test_x_mcp_header(
    region: Annotated[str, Header("Region", description="Deployment region")],
) -> str:
    return f"Region: {region}"


# --- server-stateless diagnostics ------------------------------------------------------------------


@registry.tool(description="Needs the sampling capability; without it the call fails with -32021.")
async def test_missing_capability(ctx: Context) -> str:
    ctx.require({"sampling": {}})
    return "The client declared sampling."


@registry.tool(description="Asks for the user's name; the question travels in the result, never as a request.")
async def test_streaming_elicitation(ctx: Context) -> str:
    answer = await ctx.elicit("user_name", "What is your name?", NAME_SCHEMA)
    return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"


@registry.tool(description="Logs three info messages, only if the request asked for logs.")
async def test_logging_tool(ctx: Context) -> str:
    for step in (1, 2, 3):
        await ctx.log("info", f"Log message {step} of 3", logger="conformance")
    return "Logged three messages."


# The two triggers toggle a real entry, so the registry itself changes and its change listeners (the
# open subscriptions/listen streams) get list_changed, exactly as for any run-time change.


async def _dynamic_tool() -> str:
    return "I come and go with test_trigger_tool_change."


async def _dynamic_prompt() -> str:
    return "I come and go with test_trigger_prompt_change."


def _toggle(name: str, remove: Callable[[str], object], add: Callable[[], object]) -> str:
    if remove(name) is not None:
        return f"Removed {name}."
    add()
    return f"Added {name}."


@registry.tool(description="Adds or removes the tool test_dynamic_tool, so the tool list changes.")
async def test_trigger_tool_change() -> str:
    add = registry.tool("test_dynamic_tool", description="Appears and disappears on demand.")
    return _toggle("test_dynamic_tool", registry.remove_tool, lambda: add(_dynamic_tool))


@registry.tool(description="Adds or removes the prompt test_dynamic_prompt, so the prompt list changes.")
async def test_trigger_prompt_change() -> str:
    add = registry.prompt("test_dynamic_prompt", description="Appears and disappears on demand.")
    return _toggle("test_dynamic_prompt", registry.remove_prompt, lambda: add(_dynamic_prompt))


# --- multi round-trip requests (SEP-2322), input-required-result-* ----------------------------------
# Keys and schemas follow the referee: it answers every elicitation with {name}, {ok}, {color} or
# {context} content, so each question's schema must accept exactly that.


@registry.tool(description="Asks the user's name by elicitation, then greets them.")
async def test_input_required_result_elicitation(ctx: Context) -> str:
    answer = await ctx.elicit("user_name", "What is your name?", NAME_SCHEMA)
    if answer.action != "accept":
        return f"No name given ({answer.action})."
    return f"Hello, {(answer.content or {})['name']}!"


@registry.tool(description="Asks the client's model a question by sampling.")
async def test_input_required_result_sampling(ctx: Context) -> str:
    reply = await ctx.sample("capital_question", "What is the capital of France?", max_tokens=100)
    text = reply.content.get("text", "") if isinstance(reply.content, dict) else ""
    return f"The model answered: {text}"


@registry.tool(description="Asks the client for its roots.")
async def test_input_required_result_list_roots(ctx: Context) -> str:
    roots = await ctx.list_roots("client_roots")
    return f"The client has {len(roots)} root(s): {', '.join(root.uri for root in roots)}"


async def _confirmation(ctx: Context) -> object:
    answer = await ctx.elicit("confirm", "Please confirm", CONFIRM_SCHEMA)
    return (answer.content or {}).get("ok")


@registry.tool(description="Asks for a confirmation and relies on the echoed requestState.")
async def test_input_required_result_request_state(ctx: Context) -> str:
    return f"state-ok: confirmed={await _confirmation(ctx)}"


@registry.tool(description="Asks for a name, a sampled greeting and the roots in one round.")
async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
    answers = ctx.ask(
        {
            "user_name": elicit("What is your name?", NAME_SCHEMA),
            "greeting": sample("Write a short greeting.", max_tokens=50),
            "client_roots": list_roots(),
        }
    )
    name = (answers["user_name"].content or {}).get("name")
    return f"Got a name ({name}), a greeting and {len(answers['client_roots'].roots)} root(s)."


@registry.tool(description="Asks a name, then in a second round a colour.")
async def test_input_required_result_multi_round(ctx: Context) -> str:
    name = await ctx.elicit("step1", "What is your name?", NAME_SCHEMA)
    color = await ctx.elicit("step2", "What is your favourite colour?", COLOR_SCHEMA)
    return f"{(name.content or {}).get('name')} likes {(color.content or {}).get('color')}."


@registry.tool(description="Asks for a confirmation; a tampered requestState is refused by the server.")
async def test_input_required_result_tampered_state(ctx: Context) -> str:
    return f"Confirmed: {await _confirmation(ctx)}"


@registry.tool(description="Asks only for the kinds of input this request's client declared.")
async def test_input_required_result_capabilities(ctx: Context) -> str:
    wanted = {
        "user_name": elicit("What is your name?", NAME_SCHEMA),
        "capital_question": sample("What is the capital of France?", max_tokens=100),
        "client_roots": list_roots(),
    }
    # Capabilities are per request (SEP-2575): ask nothing the caller cannot answer.
    askable = {key: request for key, request in wanted.items() if ctx.supports(request)}
    if not askable:
        return "The client declared no input capability, so nothing was asked."
    answers = ctx.ask(askable)
    return f"Received {len(answers)} answer(s): {', '.join(sorted(answers))}"


@registry.prompt(description="Asks for context by elicitation before building the prompt.")
async def test_input_required_result_prompt(ctx: Context) -> list[PromptMessage]:
    answer = await ctx.elicit("user_context", "What context should the prompt use?", CONTEXT_SCHEMA)
    context = (answer.content or {}).get("context", "")
    return [PromptMessage(role="user", content=TextContent(text=f"Use this context: {context}"))]


# --- prompts -----------------------------------------------------------------------------------------


@registry.prompt(description="A simple prompt without arguments.")
async def test_simple_prompt() -> str:
    return "This is a simple prompt for testing."


@registry.prompt(description="A prompt with two required arguments.")
async def test_prompt_with_arguments(
    arg1: Annotated[str, Field(description="First test argument")],
    arg2: Annotated[str, Field(description="Second test argument")],
) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@registry.prompt(description="A prompt that embeds a resource.")
async def test_prompt_with_embedded_resource(
    resourceUri: Annotated[str, Field(description="URI of the resource to embed")],  # noqa: N803 - wire name
) -> PromptResult:
    contents = ResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    embedded = EmbeddedResource(resource=contents)
    return PromptResult(
        [
            PromptMessage(role="user", content=embedded),
            PromptMessage(role="user", content=TextContent(text="Please process the embedded resource above.")),
        ]
    )


@registry.prompt(description="A prompt with an image.")
async def test_prompt_with_image() -> PromptResult:
    return PromptResult(
        [
            PromptMessage(role="user", content=ImageContent(data=PNG_B64, mime_type="image/png")),
            PromptMessage(role="user", content=TextContent(text="Please analyze the image above.")),
        ]
    )


@registry.completion("ref/prompt", "test_prompt_with_arguments")
async def complete_prompt_argument(argument: str, value: str, context: Mapping[str, str]) -> list[str]:
    candidates = {"arg1": ["paris", "park", "party"], "arg2": ["red", "green", "blue"]}.get(argument, [])
    return [candidate for candidate in candidates if candidate.startswith(value)]


# --- resources ---------------------------------------------------------------------------------------


@registry.resource("test://static-text", name="static-text", mime_type="text/plain")
async def static_text() -> str:
    """A fixed text resource."""
    return "This is the content of the static text resource."


@registry.resource("test://static-binary", name="static-binary", mime_type="image/png")
async def static_binary() -> bytes:
    """A 1x1 PNG image."""
    return PNG


@registry.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
async def watched_resource() -> str:
    """A resource clients may subscribe to."""
    return "Watched resource content."


@registry.resource_template("test://template/{id}/data", name="template-data", mime_type="application/json")
async def template_data(id: str) -> str:
    """Data for one id; the content names the id it was read for."""
    return f'{{"id": "{id}", "templateTest": true, "data": "Data for ID: {id}"}}'


register_task_fixtures(registry)
register_legacy_fixtures(registry)
