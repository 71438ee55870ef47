"""Calling a tool function and mapping its outcome, shared by the inline path and the task worker.

A tool's own failure is a *result*: ``ToolError`` becomes an ``isError`` result with its message, any
other exception an ``isError`` result with a generic text (the exception goes to the log, since its text
may hold anything). ``InputRequired``, ``StartTask`` and ``ProtocolError`` pass through: the caller turns them into an
``input_required`` answer or task status, or a JSON-RPC error.

Inside a task, ``ctx.retry_later`` and an exception the tool's retry policy names (``retry=Retry(on=...)``)
pass through as :class:`~ext_tasks.context.RetryLater`: the worker schedules the next attempt
(:mod:`ext_tasks.retry`). Inline, there is no later: ``retry_later`` ends the call with an ``isError``
result saying its reason, and a transient exception is mapped like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .context import Context, InputRequired, RetryLater, StartTask, ToolError
from .protocol.errors import ProtocolError
from .protocol.result_types import ToolCallResult
from .results import tool_error_result, tool_result
from .retry import transient_reason
from .tools import Tool

logger = logging.getLogger("ext_tasks.invoke")


async def invoke_tool(tool: Tool, arguments: Mapping[str, Any], ctx: Context) -> ToolCallResult:
    kwargs = tool.bind(arguments, ctx)
    try:
        value = await tool.fn(**kwargs)
    except (InputRequired, StartTask):
        raise
    except RetryLater as asked:
        if ctx.task_id is not None:
            raise  # the worker schedules the next attempt
        return tool_error_result(asked.reason)  # inline: nothing can run it later
    except Exception as exc:
        if ctx.task_id is not None and tool.retry is not None and tool.retry.retries(exc):
            raise RetryLater(None, transient_reason(exc)) from exc
        if isinstance(exc, ProtocolError):
            raise
        if isinstance(exc, ToolError):
            return tool_error_result(str(exc))
        logger.exception("tool %s raised", tool.name)
        return tool_error_result(f"Tool {tool.name!r} failed with an internal error")
    return tool_result(value)
