"""FastMCP 4 (``fastmcp[tasks]==4.1.4``) with the SEP-2663 tasks extension on a shared Valkey.

Configured as its documentation and source (``fastmcp_tasks.extension.TasksExtension``) describe:
``mcp.add_extension(TasksExtension(url="redis://...", name=...))`` puts the Docket queue and the
task records in Valkey; each server process also runs the embedded Docket worker (default
concurrency 10, ``minimum_check_interval`` 50 ms). Tools mirror ``bench.tools``:

* ``instant``: a task (``TaskConfig(mode="required")``) whose body returns at once;
* ``ask_in_task``: asks one elicitation inside the task by returning ``InputRequiredResult`` (FastMCP's
  "guard pattern", end and re-enter), answered with ``tasks/update``, then completes;
* ``hold``: stays ``working`` for ``seconds``.

Served stateless with JSON responses by uvicorn (uvloop/httptools when installed), no access log.

    python bench/peers/fastmcp_server.py --port 8002 --valkey-url redis://127.0.0.1:6379/0 --name q1
"""

from __future__ import annotations

import argparse
import asyncio

import mcp_types as types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

REQUIRED = TaskConfig(mode="required")
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


def build(url: str, name: str) -> FastMCP:
    mcp = FastMCP("ext-tasks-bench-fastmcp")
    mcp.add_extension(TasksExtension(url=url, name=name))

    @mcp.tool(task=REQUIRED, description="A task whose body returns at once")
    async def instant(label: str = "x") -> str:
        return f"done {label}"

    @mcp.tool(task=REQUIRED, description="A task that asks one question, then completes")
    async def ask_in_task(ctx: Context, label: str = "x") -> str | types.InputRequiredResult:
        answers = ctx.input_responses
        if not answers or "confirm" not in answers:
            return types.InputRequiredResult(
                input_requests={
                    "confirm": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(message=f"Go on with {label}?", requested_schema=CONFIRM)
                    )
                }
            )
        return f"{label}: {getattr(answers['confirm'], 'action', 'accept')}"

    @mcp.tool(task=REQUIRED, description="A task that stays working for `seconds`")
    async def hold(seconds: float = 600.0) -> str:
        await asyncio.sleep(min(max(seconds, 0.0), 3600.0))
        return "held"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--valkey-url", required=True)
    parser.add_argument("--name", default="fastmcp-bench", help="Docket queue name (shared by every instance)")
    args = parser.parse_args()
    app = build(args.valkey_url, args.name).http_app(stateless_http=True, json_response=True)
    options: dict[str, object] = {"access_log": False, "log_level": "warning"}
    try:
        import uvloop  # noqa: F401

        options["loop"] = "uvloop"
    except ImportError:
        pass
    try:
        import httptools  # noqa: F401

        options["http"] = "httptools"
    except ImportError:
        pass
    uvicorn.run(app, host=args.host, port=args.port, **options)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
