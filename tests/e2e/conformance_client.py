"""The conformance referee's client adapter for ``ext_tasks.client``.

The referee (``conformance client --command "python tests/e2e/conformance_client.py"``) starts one mock
server per scenario and runs this script with the server's URL as the last argument and the scenario's
name in ``MCP_CONFORMANCE_SCENARIO``. Each scenario gets what a real caller would do with the client:
list, call, answer. The ``auth/*`` scenarios are not run: the client has no OAuth.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from ext_tasks.client import Client, ClientError

Scenario = Callable[[str], Coroutine[Any, Any, None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(run: Scenario) -> Scenario:
        SCENARIOS[name] = run
        return run

    return register


async def _accept(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"confirmed": True}}


async def _sample(params: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "stub", "stopReason": "endTurn"}


@scenario("tools_call")
async def tools_call(url: str) -> None:
    async with Client(url) as client:
        await client.call_tool("add_numbers", {"a": 5, "b": 3})


@scenario("request-metadata")
async def request_metadata(url: str) -> None:
    async with Client(url, elicitation=_accept, sampling=_sample, roots=[{"uri": "file:///tmp"}]) as client:
        await client.discover()
        await client.list_tools()
        await client.call_tool("add_numbers", {"a": 5, "b": 3})


@scenario("sep-2322-client-request-state")
async def request_state(url: str) -> None:
    async with Client(url, elicitation=_accept) as client:
        # The tool without a resultType goes last: a client that chokes on it loses nothing after it.
        for tool in ("test_mrtr_echo_state", "test_mrtr_unrelated", "test_mrtr_no_state", "test_mrtr_no_result_type"):
            await client.call_tool(tool, {})


@scenario("http-standard-headers")
async def standard_headers(url: str) -> None:
    async with Client(url) as client:
        for tool in await client.list_tools():
            await client.call_tool(tool["name"], {})
        for resource in await client.list_resources():
            await client.read_resource(resource["uri"])
        for prompt in await client.list_prompts():
            await client.get_prompt(prompt["name"])


@scenario("http-custom-headers")
async def custom_headers(url: str) -> None:
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    async with Client(url) as client:
        await client.list_tools()
        for call in context.get("toolCalls", []):
            try:
                await client.call_tool(call["name"], call.get("arguments") or call.get("args") or {})
            except ClientError as exc:
                print(f"{call['name']}: {exc}", file=sys.stderr)


@scenario("http-invalid-tool-headers")
async def invalid_tool_headers(url: str) -> None:
    async with Client(url) as client:
        for tool in await client.list_tools():  # the invalid ones are not offered
            await client.call_tool(tool["name"], _stub_arguments(tool.get("inputSchema") or {}))


@scenario("json-schema-ref-no-deref")
async def ref_no_deref(url: str) -> None:
    async with Client(url) as client:
        await client.list_tools()


@scenario("json-schema-2020-12-preservation")
async def schema_preservation(url: str) -> None:
    async with Client(url) as client:
        tools = {tool["name"]: tool for tool in await client.list_tools()}
        await client.call_tool("json_schema_echo", {"schema": tools["json_schema_2020_12_tool"]["inputSchema"]})


def _stub_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    stubs = {"string": "x", "integer": 1, "number": 1, "boolean": True}
    properties = schema.get("properties") or {}
    return {name: stubs.get(str(properties.get(name, {}).get("type")), "x") for name in schema.get("required") or ()}


def main() -> int:
    name = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    run = SCENARIOS.get(name)
    if run is None:
        print(f"scenario {name!r} is not run with this client (no OAuth)", file=sys.stderr)
        return 1
    asyncio.run(run(sys.argv[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
