"""An independent 2026-07-28 server with the Tasks extension: FastMCP 4 (``fastmcp[tasks]==4.1.4``).

Run with the FastMCP 4 interpreter (``.venvs/fastmcp4``), never the dev one:

    python tests/e2e/peers/fastmcp4_server.py --port 8123

Configured the way FastMCP documents it (``fastmcp_tasks.extension.TasksExtension``): the extension is
registered with ``mcp.add_extension(...)`` on Docket's in-memory backend (``memory://``, the
``DocketSettings.url`` default, one process), and each tool declares its task policy with
``TaskConfig``. It serves the streamable HTTP transport at ``/mcp`` on 127.0.0.1, stateless, so every
2026-07-28 request (``MCP-Protocol-Version: 2026-07-28``) is a self-contained exchange.

The tools mirror the conformance fixtures the legacy client script uses (``ext_tasks.examples``):

* ``greet``: never a task (``mode="forbidden"``);
* ``slow_compute(seconds, label)``: a task when the client opts in (``mode="optional"``);
* ``confirm_delete(filename)``: always a task (``mode="required"``) asking one elicitation inside the
  task. FastMCP refuses ``await ctx.elicit()`` inside a task (``Context.elicit`` raises ``ToolError``
  when ``is_background_task``), so it uses FastMCP's documented guard pattern: the body *returns* an
  ``InputRequiredResult``, the task reports ``input_required``, ``tasks/update`` re-runs the body with
  the answers on ``ctx.input_responses``;
* ``test_input_required_result_elicitation``: a plain call asking a name by MRTR (the same guard
  pattern, answered by retrying ``tools/call`` with ``inputResponses``; the 2026-07-28 era has no
  server→client back-channel, so ``ctx.elicit()`` refuses there too).

The poll interval is set per tool to 200 ms (FastMCP's default is 5 s), only so the test is quick.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import mcp_types as types
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

POLL = timedelta(milliseconds=200)
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _ask(key: str, message: str, schema: dict[str, Any]) -> types.InputRequiredResult:
    request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))
    return types.InputRequiredResult(input_requests={key: request})


def _accepted(ctx: Context, key: str) -> dict[str, Any] | None:
    """The accepted content of the answer to ``key``; None when unanswered, declined or cancelled."""
    answer = (ctx.input_responses or {}).get(key)
    if isinstance(answer, types.ElicitResult) and answer.action == "accept":
        return dict(answer.content or {})
    return None


def build(docket_url: str) -> FastMCP:
    mcp = FastMCP("ext-tasks-e2e-fastmcp4")
    mcp.add_extension(TasksExtension(url=docket_url))

    @mcp.tool(task=TaskConfig(mode="forbidden"), description="Greets by name, never as a task.")
    async def greet(name: str) -> str:
        return f"Hello, {name}!"

    @mcp.tool(
        task=TaskConfig(mode="optional", poll_interval=POLL),
        description="Works for `seconds` seconds; a task when the client allows it.",
    )
    async def slow_compute(seconds: float = 1.0, label: str = "job") -> str:
        await asyncio.sleep(max(0.0, min(seconds, 600.0)))
        return f"{label}: computed after {seconds:g}s"

    @mcp.tool(
        task=TaskConfig(mode="required", poll_interval=POLL),
        description="Deletes a file after asking for confirmation inside the task.",
    )
    async def confirm_delete(ctx: Context, filename: str) -> str | types.InputRequiredResult:
        if "confirm" not in (ctx.input_responses or {}):
            return _ask("confirm", f"Delete {filename}?", CONFIRM)
        content = _accepted(ctx, "confirm")
        if content is not None and content.get("confirm") is True:
            return f"Deleted {filename}."
        return f"Kept {filename}."

    @mcp.tool(description="Asks the user's name by a multi round-trip request, then greets.")
    async def test_input_required_result_elicitation(ctx: Context) -> str | types.InputRequiredResult:
        if "user_name" not in (ctx.input_responses or {}):
            return _ask("user_name", "What is your name?", NAME)
        content = _accepted(ctx, "user_name")
        if content is None:
            return "No name given."
        return f"Hello, {content.get('name')}!"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--docket-url", default="memory://", help="Docket backend (memory:// or redis://...)")
    args = parser.parse_args()
    build(args.docket_url).run(
        transport="http",
        show_banner=False,
        host=args.host,
        port=args.port,
        path="/mcp",
        stateless_http=True,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
