"""Calling a tool function and mapping its outcome, shared by the inline path and the task worker.

A tool's own failure is a *result*: ``ToolError`` becomes an ``isError`` result with its message, any
other exception an ``isError`` result with a generic text (the exception goes to the log, since its text
may hold anything). ``InputRequired``, ``StartTask`` and ``ProtocolError`` pass through: the caller turns them into an
``input_required`` answer or task status, or a JSON-RPC error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .context import Context, InputRequired, StartTask, ToolError
from .protocol.errors import ProtocolError
from .protocol.result_types import ToolCallResult
from .results import tool_error_result, tool_result
from .tools import Tool

logger = logging.getLogger("ext_tasks.invoke")


async def invoke_tool(tool: Tool, arguments: Mapping[str, Any], ctx: Context) -> ToolCallResult:
    kwargs = tool.bind(arguments, ctx)
    try:
        value = await tool.fn(**kwargs)
    except (InputRequired, StartTask, ProtocolError):
        raise
    except ToolError as exc:
        return tool_error_result(str(exc))
    except Exception:
        logger.exception("tool %s raised", tool.name)
        return tool_error_result(f"Tool {tool.name!r} failed with an internal error")
    return tool_result(value)
