"""Real protocol clients, each in its own virtualenv (mcp 1.x and mcp 2.x never share one).

``bash scripts/test.sh`` creates the virtualenvs under ``.venvs/`` and exports their interpreters;
a missing interpreter is a broken setup, so tests fail (never skip) with a message saying how to fix it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from .processes import REPO, stop


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


def run_interactive_client(
    argv: Sequence[str],
    authorize: Callable[[str], str],
    *,
    timeout_s: float = 120,
    context: Callable[[], str] = str,
) -> dict[str, Any]:
    """Run a client that may send its user to an authorization URL on the way: for each line
    ``{"authorize": URL}`` it prints, ``authorize(URL)`` plays the browser and its answer (the URL the
    browser landed on) goes to the client's stdin as one line. The client must exit 0 with its report,
    one JSON object, as the last line of stdout. The whole run is bounded by ``timeout_s``; past it the
    client is stopped by its PID."""
    process = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    assert stdin is not None and stdout is not None and stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[str] = []
    readers = [
        threading.Thread(target=_lines_then_none, args=(stdout, lines), daemon=True),
        threading.Thread(target=lambda: errors.extend(stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout_s
    printed: list[str] = []

    def failure(what: str) -> str:
        output, diagnostics = "".join(printed), "".join(errors)[-4000:]
        return f"{Path(argv[1]).name} {what}\nstdout:\n{output}\nstderr:\n{diagnostics}\n{context()}"

    try:
        while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            printed.append(line)
            message = json.loads(line) if line.startswith('{"authorize"') else {}
            if isinstance(message.get("authorize"), str):
                stdin.write(authorize(message["authorize"]) + "\n")
                stdin.flush()
        returncode = process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except (queue.Empty, subprocess.TimeoutExpired):
        stop(process)
        pytest.fail(failure(f"did not finish within {timeout_s}s"))
    finally:
        stdin.close()
        for reader in readers:
            reader.join(timeout=5)
    if returncode != 0 or not printed:
        pytest.fail(failure(f"exited {returncode}"))
    observed: dict[str, Any] = json.loads(printed[-1])
    return observed


def _lines_then_none(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
