"""Node 22 from the npm registry (through ``npx -p node@22``), and the npm packages of a test directory.

The machine's own Node may be older; ``npx -y -p node@22`` fetches Node 22 once into npm's cache. The
binary's path is resolved once per test session and reused, so a test starts ``node`` directly (one
process, stopped by its PID) instead of going through npx each time. ``bash scripts/test.sh`` warms the
cache and runs ``npm ci`` in each directory with a ``package-lock.json``; without that, tests fail saying so.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from .processes import REPO

NODE_TIMEOUT_S = 180


def node22(setup_hint: str) -> Path:
    """The Node 22 binary; the test fails (never skips) with ``setup_hint`` when it cannot be had."""
    binary, problem = _resolve_node22()
    if binary is None:
        pytest.fail(f"{problem}: {setup_hint}", pytrace=False)
    return binary


@functools.cache
def _resolve_node22() -> tuple[Path | None, str]:
    """Once a session (npx takes a second even with a warm cache): the binary, or what went wrong."""
    npx = shutil.which("npx")
    if npx is None:
        return None, "npx is not on PATH, so Node 22 cannot be fetched: install Node.js"
    try:
        completed = subprocess.run(
            [npx, "-y", "-p", "node@22", "-c", "node -p \"process.version + ' ' + process.execPath\""],
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT_S,
            cwd=REPO,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"npx did not provide Node 22 within {NODE_TIMEOUT_S}s"
    version, _, binary = completed.stdout.strip().rpartition("\n")[2].partition(" ")
    if completed.returncode != 0 or not version.startswith("v22.") or not Path(binary).exists():
        return None, (
            f"npx -p node@22 gave no Node 22 (exit {completed.returncode}, {completed.stdout!r}, "
            f"{completed.stderr[-2000:]!r})"
        )
    return Path(binary), ""


def require_packages(directory: Path, pinned: Mapping[str, str], setup_hint: str) -> None:
    """Fail unless ``npm ci`` has installed each pinned package, at its pinned version, in ``directory``."""
    for package, version in pinned.items():
        manifest = directory / "node_modules" / package / "package.json"
        if not manifest.exists():
            pytest.fail(f"{package} is not installed in {directory}: {setup_hint}", pytrace=False)
        installed = json.loads(manifest.read_text())["version"]
        if installed != version:
            pytest.fail(
                f"{package} {installed} is installed in {directory}, not {version}: {setup_hint}", pytrace=False
            )
