"""The hostile soak's tools: the conformance fixtures the well-behaved load calls, and four tools of the
hardening figures that the bounded-resource attacks call (``spew``: progress as fast as it can; ``keep``:
a task that keeps its argument; ``chatter``: a status message of any size; ``instant``: a task-optional
tool that finishes inline, which the legacy shim turns into a task of its own)."""

from __future__ import annotations

from ext_tasks.examples.conformance import registry
from investigations.hardening import figtools

for name in ("spew", "keep", "chatter", "instant"):
    registry.add_tool(figtools.registry.tools[name])

__all__ = ["registry"]
