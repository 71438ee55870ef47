"""Tools for the notification-buffer tests (``test_notification_buffer.py``), public ``ext_tasks`` API only.

- ``spew``: reports progress as fast as it can for ``seconds``, each report carrying ``pad`` characters.
- ``spew_count``: the same, ``count`` reports, then answers how many it sent.
"""

from __future__ import annotations

import time

from ext_tasks import Context, ToolRegistry

registry = ToolRegistry("buffers-e2e", version="0.0.1")


@registry.tool(description="Report progress as fast as possible for `seconds`, then answer.")
async def spew(ctx: Context, seconds: float = 3.0, pad: int = 1000) -> str:
    ends = time.monotonic() + max(0.0, min(seconds, 60.0))
    text = "x" * max(0, min(pad, 100_000))
    sent = 0
    while time.monotonic() < ends:
        sent += 1
        await ctx.report_progress(sent, None, text)
    return f"reported {sent}"


@registry.tool(description="Report progress `count` times as fast as possible, then answer.")
async def spew_count(ctx: Context, count: int = 1000, pad: int = 1000) -> str:
    text = "x" * max(0, min(pad, 100_000))
    for sent in range(1, max(0, min(count, 1_000_000)) + 1):
        await ctx.report_progress(sent, count, text)
    return f"reported {count}"
