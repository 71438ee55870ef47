"""Drive the MRTR test tools with the real ``mcp==2.3.0`` client; run with that package's interpreter.

    python mcp2_client.py URL [auto|2026-07-28]

``mcp.Client`` resolves every ``input_required`` result by itself: it hands each input request to
the callbacks below and retries with the answers and the echoed ``requestState``. This script calls
the two-round tool, the sampling tool and the prompt, lists the tools, and prints one JSON object
with what it saw. Any failure exits non-zero with the traceback on stderr.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext

# What the "user" answers, chosen from the question's message.
ANSWERS = {"name": "Ada", "colour": "teal", "city": "Lisbon"}
SAMPLED_TEXT = "Old pond, a frog jumps in, the sound of water"
MODEL = "fake-model-1"

observed: dict[str, Any] = {
    "elicitations": [],  # one entry per elicitation callback call: message, schema keys, answer
    "samplings": [],  # one entry per sampling callback call: prompt text, maxTokens
    "callbacks": {"elicitation": 0, "sampling": 0},
}


def _answer_for(message: str) -> tuple[str, str] | None:
    lowered = message.lower()
    if "name" in lowered:
        return "name", ANSWERS["name"]
    if "colour" in lowered or "color" in lowered:
        return "colour", ANSWERS["colour"]
    if "city" in lowered:
        return "city", ANSWERS["city"]
    return None


async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    observed["callbacks"]["elicitation"] += 1
    entry: dict[str, Any] = {"message": params.message, "key": str(context.request_id), "mode": params.mode}
    observed["elicitations"].append(entry)
    if not isinstance(params, types.ElicitRequestFormParams):
        entry["answer"] = "decline"
        return types.ElicitResult(action="decline")
    entry["schemaProperties"] = sorted((params.requested_schema.get("properties") or {}).keys())
    found = _answer_for(params.message)
    if found is None or found[0] not in entry["schemaProperties"]:
        entry["answer"] = "cancel"
        return types.ElicitResult(action="cancel")
    field, value = found
    entry["answer"] = {field: value}
    return types.ElicitResult(action="accept", content={field: value})


async def on_sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    observed["callbacks"]["sampling"] += 1
    texts = [message.content.text for message in params.messages if isinstance(message.content, types.TextContent)]
    observed["samplings"].append({"key": str(context.request_id), "texts": texts, "maxTokens": params.max_tokens})
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED_TEXT),
        model=MODEL,
        stop_reason="endTurn",
    )


def _texts(blocks: list[Any]) -> list[str]:
    return [block.text for block in blocks if isinstance(block, types.TextContent)]


async def main(url: str, mode: str) -> None:
    async with Client(url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample) as client:
        observed["protocolVersion"] = client.protocol_version
        observed["serverInfo"] = client.server_info.model_dump() if client.server_info is not None else None

        tools = await client.list_tools()
        observed["tools"] = sorted(tool.name for tool in tools.tools)

        before = observed["callbacks"]["elicitation"]
        introduced = await client.call_tool("introduce", {"greeting": "Welcome"})
        observed["introduce"] = {
            "texts": _texts(introduced.content),
            "isError": introduced.is_error,
            "elicitations": observed["callbacks"]["elicitation"] - before,
        }

        before = observed["callbacks"]["sampling"]
        sampled = await client.call_tool("haiku", {"topic": "ponds"})
        observed["haiku"] = {
            "texts": _texts(sampled.content),
            "isError": sampled.is_error,
            "samplings": observed["callbacks"]["sampling"] - before,
        }

        prompts = await client.list_prompts()
        observed["prompts"] = sorted(prompt.name for prompt in prompts.prompts)

        before = observed["callbacks"]["elicitation"]
        prompt = await client.get_prompt("trip_plan", {"days": "2"})
        observed["trip_plan"] = {
            "description": prompt.description,
            "messages": [
                {"role": message.role, "text": message.content.text}
                for message in prompt.messages
                if isinstance(message.content, types.TextContent)
            ],
            "elicitations": observed["callbacks"]["elicitation"] - before,
        }


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        anyio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "auto")
    except BaseException:  # noqa: BLE001 - any failure, including ExceptionGroup, must exit non-zero
        traceback.print_exc()
        print(json.dumps(observed, default=str), file=sys.stderr)
        sys.exit(1)
    print(json.dumps(observed, default=str))
