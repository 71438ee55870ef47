"""Task tools with flow control, for the end-to-end flow-control tests, written against the public
``ext_tasks`` API only.

Every run notes in the file ``journal`` names one line when it starts and one when it ends::

    start <key> <label> <pid> <monotonic time>
    end <key> <label> <pid> <monotonic time>

Each line is one ``write`` on a file opened ``O_APPEND``, so the lines of runs on any instance never mix,
and the file's order is the order the runs noted them in: a run's ``end`` is written before it returns,
so before its place is given back and the next run of its gate can start. ``CLOCK_MONOTONIC`` is the
machine's, shared by the processes of a fleet on one host.

A run holds (between its two lines) until the file ``release`` names exists, if it names one (at most
:data:`MAX_HOLD_S`, so a test that failed never leaves a fleet busy for good), then ``hold_s`` more. A
run stopped by its task's cancellation notes its end too; one whose process was killed does not.

- ``deploy``: one run per ``service`` at once over the fleet (``concurrency_key``).
- ``render``: :data:`RENDERS` runs at once over the fleet (``concurrency``).
- ``work``: no gate of its own (the principal's cap, when one is configured, applies to it).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from ext_tasks import ToolRegistry

registry = ToolRegistry("flow-e2e", version="0.0.1")

#: Renders at once over the fleet.
RENDERS = 2
#: The longest a run waits for its ``release`` file.
MAX_HOLD_S = 60.0
_POLL_S = 0.02


@registry.tool(
    task="required",
    description="Deploy `service` (one deploy per service at once); the run noted in `journal`.",
    concurrency_key=lambda args: args["service"],
)
async def deploy(service: str, journal: str, label: str, release: str = "", hold_s: float = 0.0) -> str:
    return await _run(journal, service, label, release, hold_s)


@registry.tool(task="required", description="Render (two at once); the run noted in `journal`.", concurrency=RENDERS)
async def render(journal: str, label: str, release: str = "", hold_s: float = 0.0) -> str:
    return await _run(journal, "render", label, release, hold_s)


@registry.tool(task="required", description="Some work of the caller's; the run noted in `journal`.")
async def work(journal: str, label: str, release: str = "", hold_s: float = 0.0) -> str:
    return await _run(journal, "work", label, release, hold_s)


async def _run(journal: str, key: str, label: str, release: str, hold_s: float) -> str:
    _note(journal, "start", key, label)
    try:
        # Another process's file, so no event to wait on: looked at every few milliseconds, for a while.
        for _ in range(int(MAX_HOLD_S / _POLL_S) if release else 0):
            if _released(release):
                break
            await asyncio.sleep(_POLL_S)
        if hold_s:
            await asyncio.sleep(hold_s)
    finally:  # a run stopped (its task cancelled) ends too; one whose process was killed does not
        _note(journal, "end", key, label)
    return f"{label} ran in pid {os.getpid()}"


def _released(release: str) -> bool:
    """One ``stat`` of a local file: no need for a thread."""
    return Path(release).exists()


def _note(journal: str, event: str, key: str, label: str) -> None:
    """One line in one ``write`` (a short local write: no need for a thread)."""
    line = f"{event} {key} {label} {os.getpid()} {time.monotonic():.6f}\n".encode()
    descriptor = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
