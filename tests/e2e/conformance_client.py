"""The conformance referee's client adapter for ``ext_tasks.client``.

The referee (``conformance client --command "python tests/e2e/conformance_client.py"``) starts one mock
server per scenario and runs this script with the server's URL as the last argument and the scenario's
name in ``MCP_CONFORMANCE_SCENARIO``. Each scenario gets what a real caller would do with the client:
list, call, answer.

The ``auth/*`` scenarios run the client with :class:`ext_tasks.client.oauth.OAuth`; the adapter plays the
person's browser: it GETs the authorization URL without following the redirect, then GETs the
``Location`` (the client's loopback listener). ``MCP_CONFORMANCE_CONTEXT`` carries pre-registered
credentials (``client_id``, ``client_secret``) or, for client credentials with a JWT assertion,
``private_key_pem`` and ``signing_algorithm``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from ext_tasks.client import Client, ClientError
from ext_tasks.client.oauth import AuthorizationError, OAuth

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


#: The Client ID Metadata Document URL the referee's ``auth/basic-cimd`` expects (it is never fetched).
CIMD_URL = "https://conformance-test.local/client-metadata.json"


async def _play_browser(url: str) -> None:
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as http:
        answer = await http.get(url)
        location = answer.headers.get("location")
        if location:
            await http.get(location)


async def authorized(url: str) -> None:
    """Every ``auth/*`` scenario: list the tools and call one, authorizing as the server asks."""
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    name = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    oauth = OAuth(
        url,
        client_id=context.get("client_id"),
        client_secret=context.get("client_secret"),
        private_key=context.get("private_key_pem"),
        signing_alg=context.get("signing_algorithm") or "RS256",
        client_credentials=name.startswith("auth/client-credentials"),
        client_metadata_url=CIMD_URL,
        open_url=_play_browser,
        callback_timeout_s=10,
    )
    async with oauth, Client(url, auth=oauth) as client:
        await client.list_tools()
        await client.call_tool("test-tool", {})


def _stub_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    stubs = {"string": "x", "integer": 1, "number": 1, "boolean": True}
    properties = schema.get("properties") or {}
    return {name: stubs.get(str(properties.get(name, {}).get("type")), "x") for name in schema.get("required") or ()}


def main() -> int:
    name = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    run = authorized if name.startswith("auth/") else SCENARIOS.get(name)
    if run is None:
        print(f"scenario {name!r} is not run with this client", file=sys.stderr)
        return 1
    try:
        asyncio.run(run(sys.argv[-1]))
    except AuthorizationError as refused:  # what the referee's negative scenarios expect
        print(f"{name}: {type(refused).__name__}: {refused}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
