"""The layers contract (import-linter, run by the test command) covers every module of both packages:
a module added without a place in it would escape the check, so this fails until it has one."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_module_has_a_layer() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    layers = next(
        contract["layers"] for contract in config["tool"]["importlinter"]["contracts"] if contract["type"] == "layers"
    )
    placed = [name.strip() for layer in layers for name in layer.split("|")]
    modules = []
    for package in ("ext_tasks", "migration"):
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts == (package, "__init__"):
                continue  # the package itself (its public face imports what it re-exports)
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    missing = [
        module for module in modules if not any(module == place or module.startswith(place + ".") for place in placed)
    ]
    assert missing == [], f"modules without a layer in pyproject.toml: {missing}"
