"""Task tools with retry policies, for the end-to-end retry tests, written against the public
``ext_tasks`` API only.

- ``flaky_upstream``: each attempt appends ``<wall time> <pid>`` to the file ``journal`` names (the
  attempts of one task may run on any instance: the file is their shared count), fails with a transient
  error while fewer than ``failures`` + 1 attempts were made, then succeeds. Its policy: 3 attempts,
  0.5 s then 1 s apart (no jitter, so a test can bound the delays).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ext_tasks import Backoff, Retry, ToolRegistry

registry = ToolRegistry("retry-e2e", version="0.0.1")

#: The tool's backoff: a test asserts the delays between attempts against these.
BACKOFF = Backoff(base_s=0.5, factor=2.0, cap_s=5.0, jitter=0.0)
ATTEMPTS = 3


class UpstreamUnavailable(Exception):
    """The upstream failed for a moment: worth another attempt."""


@registry.tool(
    task="required",
    description="Fail `failures` times (transiently), then succeed; each attempt noted in `journal`.",
    retry=Retry(attempts=ATTEMPTS, backoff=BACKOFF, on=(UpstreamUnavailable,)),
)
async def flaky_upstream(journal: str, failures: int) -> str:
    attempt = _noted(Path(journal))
    if attempt <= failures:
        raise UpstreamUnavailable(f"attempt {attempt} failed")
    return f"succeeded on attempt {attempt} in pid {os.getpid()}"


def _noted(path: Path) -> int:
    """Note this attempt (one short local write: no need for a thread); how many were made in all."""
    with path.open("a") as notes:
        notes.write(f"{time.time():.6f} {os.getpid()}\n")
    return len(path.read_text().splitlines())
