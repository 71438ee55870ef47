"""Tools for the long-wait tests (``test_waits``), written with the public ``ext_tasks`` API only.

* ``slow``: a task (when the client allows one) that sleeps, so ``tasks/result`` has something to wait for;
* ``secret_report``: a ``required`` task whose result is ``sensitive``;
* ``toggle_tool``: adds or removes the tool ``comes_and_goes``, so the tool list changes at run time;
* ``touch_resource``: tells subscribers that a resource changed (``registry.resource_updated``);
* the resources ``test://waits/watched`` and ``test://waits/other``, to subscribe to.
"""

from __future__ import annotations

import asyncio

from ext_tasks import ToolRegistry

registry = ToolRegistry("waits-e2e", version="0.0.1")

WATCHED = "test://waits/watched"
OTHER = "test://waits/other"


@registry.tool(task="optional", description="Sleeps for `seconds` seconds (at most 600); a task when allowed.")
async def slow(seconds: float = 1.0) -> str:
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s"


@registry.tool(task="required", sensitive=True, description="A task whose result is sensitive.")
async def secret_report(label: str) -> str:
    return f"the secret of {label}"


async def _comes_and_goes() -> str:
    return "here for now"


@registry.tool(description="Adds or removes the tool comes_and_goes, so the tool list changes.")
async def toggle_tool() -> str:
    if registry.remove_tool("comes_and_goes") is not None:
        return "removed comes_and_goes"
    registry.tool("comes_and_goes", description="Appears and disappears with toggle_tool.")(_comes_and_goes)
    return "added comes_and_goes"


@registry.tool(description="Tells the subscribers of `uri` that its contents changed.")
async def touch_resource(uri: str) -> str:
    registry.resource_updated(uri)
    return f"touched {uri}"


@registry.resource(WATCHED, name="watched", mime_type="text/plain")
async def watched() -> str:
    """A resource to subscribe to."""
    return "watched contents"


@registry.resource(OTHER, name="other", mime_type="text/plain")
async def other() -> str:
    """Another resource, never subscribed to."""
    return "other contents"
