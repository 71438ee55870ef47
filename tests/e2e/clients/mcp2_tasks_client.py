"""Drive the Tasks-extension test tools with the real ``mcp==2.3.0`` client; run with that package's interpreter.

    python mcp2_tasks_client.py URL [auto|2026-07-28]

mcp 2.3.0 has no tasks support, so this script adds the small client extension of SEP-2663 through
the SDK's public extension API (``mcp.client.extension``): a ``ResultClaim`` for ``resultType: "task"``
whose resolver polls ``tasks/get`` (and answers ``input_required`` with ``tasks/update``) until the task
is terminal, plus ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` request types whose ``name_param``
makes the SDK send ``Mcp-Name: <taskId>``. Declaring the extension puts
``extensions["io.modelcontextprotocol/tasks"]`` in every request's client capabilities.

It calls ``quick_sum`` (tasked, polled to completed), ``approve_release`` (input asked inside the task,
answered through ``tasks/update``) and starts ``long_export`` and cancels it, then prints one JSON
object with what it saw. Any failure exits non-zero with the traceback on stderr.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession

EXTENSION = "io.modelcontextprotocol/tasks"
TASK_DEADLINE_S = 30.0
ANSWERS: dict[str, Any] = {"approver": "Ada", "confirm": True}

observed: dict[str, Any] = {
    "tasks": {},  # per tool: the CreateTaskResult, every status seen, every tasks/update sent
    "questions": [],  # every input request answered through tasks/update
    "callbacks": {"elicitation": 0},  # MRTR callbacks: a task's input never goes through them
}


# --- the SEP-2663 types (wire names come from the SDK's camelCase alias generator) ------------------


class CreateTaskResult(types.Result):
    """``resultType: "task"`` on ``tools/call``: a flat ``Task``."""

    model_config = {"extra": "allow"}
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    """The ``tasks/get`` result: ``DetailedTask`` with ``resultType: "complete"``."""

    model_config = {"extra": "allow"}
    result_type: str | None = None
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Ack(types.Result):
    """The empty acknowledgement of ``tasks/update`` and ``tasks/cancel``."""

    model_config = {"extra": "allow"}
    result_type: str | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateTaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, dict[str, Any]]


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # the SDK mirrors it into Mcp-Name (SEP-2663 MUST)


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


def wire(model: types.Result) -> dict[str, Any]:
    """What the server sent (minus the SDK-filled defaults), with wire names."""
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dumped


def ack_summary(ack: Ack) -> dict[str, Any]:
    sent = wire(ack)
    return {"keys": sorted(key for key in sent if key != "_meta"), "resultType": sent.get("resultType")}


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    return await session.send_request(GetTaskRequest(params=TaskIdParams(task_id=task_id)), DetailedTask)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, dict[str, Any]]) -> Ack:
    request = UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=responses))
    return await session.send_request(request, Ack)


async def cancel_task(session: ClientSession, task_id: str) -> Ack:
    return await session.send_request(CancelTaskRequest(params=TaskIdParams(task_id=task_id)), Ack)


# --- answering input inside a task ------------------------------------------------------------------


def answer(key: str, request: dict[str, Any]) -> dict[str, Any]:
    """The user's answer to one input request (only form elicitations are expected here)."""
    params = request.get("params") or {}
    entry: dict[str, Any] = {"key": key, "method": request.get("method"), "message": params.get("message")}
    observed["questions"].append(entry)
    if request.get("method") != "elicitation/create" or params.get("mode", "form") != "form":
        entry["answer"] = "decline"
        return {"action": "decline"}
    properties = (params.get("requestedSchema") or {}).get("properties") or {}
    content = {name: ANSWERS[name] for name in properties if name in ANSWERS}
    entry["answer"] = content
    return {"action": "accept", "content": content}


async def resolve(created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
    """Poll the task to a terminal status, answering every outstanding input request on the way."""
    entry: dict[str, Any] = {"created": wire(created), "statuses": [], "updates": [], "gets": 0}
    observed["tasks"][ctx.tool_name] = entry
    answered: set[str] = set()
    with anyio.fail_after(TASK_DEADLINE_S):
        while True:
            task = await get_task(ctx.session, created.task_id)
            entry["gets"] += 1
            if not entry["statuses"] or entry["statuses"][-1] != task.status:
                entry["statuses"].append(task.status)
            entry["last"] = wire(task)
            if task.status == "completed":
                assert task.result is not None, "a completed task must carry its result"
                return types.CallToolResult.model_validate(task.result)
            if task.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {task.status}: {task.error}")
            outstanding = {key: value for key, value in (task.input_requests or {}).items() if key not in answered}
            if task.status == "input_required" and outstanding:
                responses = {key: answer(key, request) for key, request in outstanding.items()}
                ack = await update_task(ctx.session, created.task_id, responses)
                answered.update(responses)
                entry["updates"].append({"keys": sorted(responses), "ack": ack_summary(ack)})
                continue
            await anyio.sleep((task.poll_interval_ms or 500) / 1000)


class Tasks(ClientExtension):
    """The client side of SEP-2663: advertises the extension and resolves ``resultType: "task"``."""

    identifier = EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=resolve)]


async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    # Declared so the requests carry the elicitation capability; tasks ask through tasks/get instead.
    observed["callbacks"]["elicitation"] += 1
    return types.ElicitResult(action="decline")


def _texts(blocks: list[Any]) -> list[str]:
    return [block.text for block in blocks if isinstance(block, types.TextContent)]


# --- the scenario -----------------------------------------------------------------------------------


async def cancel_scenario(client: Client) -> dict[str, Any]:
    created = await client.session.call_tool("long_export", {"seconds": 120}, allow_claimed=True)
    assert isinstance(created, CreateTaskResult), type(created)
    summary: dict[str, Any] = {"created": wire(created)}
    summary["before"] = (await get_task(client.session, created.task_id)).status
    summary["ack"] = ack_summary(await cancel_task(client.session, created.task_id))
    # Cancellation is eventually consistent: poll until the task is terminal.
    with anyio.fail_after(TASK_DEADLINE_S):
        while True:
            task = await get_task(client.session, created.task_id)
            if task.status in ("completed", "failed", "cancelled"):
                break
            await anyio.sleep((task.poll_interval_ms or 500) / 1000)
    summary["after"] = wire(task)
    summary["againAck"] = ack_summary(await cancel_task(client.session, created.task_id))
    summary["final"] = wire(await get_task(client.session, created.task_id))
    return summary


async def main(url: str, mode: str) -> None:
    async with Client(url, mode=mode, extensions=[Tasks()], elicitation_callback=on_elicit) as client:
        observed["protocolVersion"] = client.protocol_version
        tools = await client.list_tools()
        observed["tools"] = sorted(tool.name for tool in tools.tools)

        summed = await client.call_tool("quick_sum", {"a": 2, "b": 3})
        observed["quick_sum"] = {"texts": _texts(summed.content), "isError": summed.is_error}

        approved = await client.call_tool("approve_release", {"version": "1.2.3"})
        observed["approve_release"] = {"texts": _texts(approved.content), "isError": approved.is_error}

        observed["long_export"] = await cancel_scenario(client)


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
