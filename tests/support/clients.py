"""Real protocol clients, each in its own virtualenv (mcp 1.x and mcp 2.x never share one).

``bash scripts/test.sh`` creates the virtualenvs under ``.venvs/`` and exports their interpreters;
a missing interpreter is a broken setup, so tests fail (never skip) with a message saying how to fix it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .processes import REPO


def interpreter(env_var: str, venv: str, package: str) -> Path:
    configured = os.environ.get(env_var)
    python = Path(configured) if configured else REPO / ".venvs" / venv / "bin" / "python"
    if not python.exists():
        pytest.fail(
            f"no {package} interpreter at {python}: run the README's test command (bash scripts/test.sh, "
            f"which creates .venvs/{venv}), or point {env_var} at a Python that has {package} installed.",
            pytrace=False,
        )
    return python


def mcp1_python() -> Path:
    return interpreter("EXT_TASKS_MCP1_PYTHON", "mcp1", "mcp==1.27.2")


def mcp2_python() -> Path:
    return interpreter("EXT_TASKS_MCP2_PYTHON", "mcp2", "mcp==2.3.0")


def run_json_client(
    python: Path, script: Path, *args: str, timeout_s: float = 120, context: Callable[[], str] = str
) -> dict[str, Any]:
    """Run a client script; it must exit 0 and print one JSON object as its last line. ``context`` adds
    to a failure report (e.g. the server's log)."""
    try:
        completed = subprocess.run(
            [str(python), str(script), *args], capture_output=True, text=True, timeout=timeout_s, cwd=REPO, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{script.name} did not finish within {timeout_s}s:\n{exc.stderr!r}\n{context()}")
    if completed.returncode != 0:
        pytest.fail(
            f"{script.name} exited {completed.returncode}\nstdout:\n{completed.stdout}\n"
            f"stderr:\n{completed.stderr[-4000:]}\n{context()}"
        )
    observed: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return observed
