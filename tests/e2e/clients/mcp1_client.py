"""A real 2025-11-25 client (``mcp==1.27.2``, experimental tasks API) against a legacy-serving URL.

Run with the mcp 1.x interpreter: ``python mcp1_client.py URL``. Prints one JSON object with what it
observed; exits non-zero on any error. Uses the conformance fixture tools (``slow_compute``,
``confirm_delete``, ``test_input_required_result_elicitation``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult

observed: dict[str, Any] = {"elicitations": []}


async def on_elicit(context: RequestContext[ClientSession, Any], params: ElicitRequestParams) -> ElicitResult:
    observed["elicitations"].append(params.message)
    if "name" in params.message.lower():
        return ElicitResult(action="accept", content={"name": "Grace"})
    return ElicitResult(action="accept", content={"confirm": True})


async def main(url: str) -> None:
    async with (
        streamablehttp_client(url) as (read, write, _),
        ClientSession(read, write, elicitation_callback=on_elicit) as session,
    ):
        init = await session.initialize()
        observed["protocolVersion"] = init.protocolVersion
        observed["tasksCapability"] = init.capabilities.tasks is not None
        tools = await session.list_tools()
        observed["taskSupport"] = {
            tool.name: tool.execution.taskSupport
            for tool in tools.tools
            if tool.execution is not None and tool.name in ("slow_compute", "confirm_delete", "greet")
        }

        # A task polled to completion, then its result.
        arguments = {"seconds": 1, "label": "job"}
        created = await session.experimental.call_tool_as_task("slow_compute", arguments, ttl=90000)
        task_id = created.task.taskId
        observed["created"] = {"status": created.task.status, "ttl": created.task.ttl}
        observed["polled"] = [status.status async for status in session.experimental.poll_task(task_id)]
        result = await session.experimental.get_task_result(task_id, CallToolResult)
        observed["result"] = result.content[0].text  # type: ignore[union-attr]
        observed["relatedTask"] = (result.meta or {}).get("io.modelcontextprotocol/related-task")

        # A task that needs input inside it: tasks/result relays the question to the elicitation callback.
        asking = await session.experimental.call_tool_as_task("confirm_delete", {"filename": "old.log"})
        answered = await session.experimental.get_task_result(asking.task.taskId, CallToolResult)
        observed["inputTask"] = answered.content[0].text  # type: ignore[union-attr]
        observed["inputTaskStatus"] = (await session.experimental.get_task(asking.task.taskId)).status

        # The list shows this session's tasks; cancelling a running one sticks.
        listed = await session.experimental.list_tasks()
        observed["listed"] = sorted(task.taskId for task in listed.tasks)
        observed["expectedListed"] = sorted([task_id, asking.task.taskId])
        slow = await session.experimental.call_tool_as_task("slow_compute", {"seconds": 30, "label": "slow"})
        cancelled = await session.experimental.cancel_task(slow.task.taskId)
        observed["cancelledTaskId"] = slow.task.taskId
        observed["cancelled"] = cancelled.status
        observed["afterCancel"] = (await session.experimental.get_task(slow.task.taskId)).status

        # Task augmentation of a tool that never runs as a task: refused (-32601) where the policy is known;
        # through a proxy, where it is not, the inline answer arrives as a completed task.
        try:
            inline = await session.experimental.call_tool_as_task("greet", {"name": "Ada"})
            greeted = await session.experimental.get_task_result(inline.task.taskId, CallToolResult)
            observed["forbiddenAsTask"] = greeted.content[0].text  # type: ignore[union-attr]
        except McpError as exc:
            observed["forbiddenAsTask"] = exc.error.code

        # A plain call of a tool that asks (MRTR on the server) arrives as a real elicitation request.
        plain = await session.call_tool("test_input_required_result_elicitation", {})
        observed["mrtr"] = plain.content[0].text  # type: ignore[union-attr]
    print(json.dumps(observed))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
