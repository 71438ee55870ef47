"""The layers contract (import-linter, run by the test command) covers every module of both packages, and
``docs/architecture.md`` draws the same layers: a module added without a place in the contract would escape
the check, and a table that drifted from the contract would describe another design."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _contract() -> dict[str, Any]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return next(contract for contract in contracts if contract["type"] == "layers" and not contract["containers"])


def _contract_layers() -> list[list[str]]:
    """The layers contract's layers, top to bottom, each the modules on its line (``|``: independent of
    each other, ``:``: not)."""
    return [[name.strip() for name in re.split(r"[|:]", layer)] for layer in _contract()["layers"]]


def _contract_layer_names() -> list[str]:
    """The layers' names, from the contract's name: ``layers: entry, composition, ...``."""
    return [name.strip() for name in str(_contract()["name"]).split(":", 1)[1].split(",")]


def _documented_rows() -> list[list[str]]:
    """The rows of the table under "Layers, top to bottom" in docs/architecture.md, as their cells."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Layers, top to bottom", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| layer ")]
    return [row.split(" | ") for row in rows]


def test_every_module_has_a_layer() -> None:
    placed = [name for layer in _contract_layers() for name in layer]
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


def test_the_documented_layers_are_the_contract() -> None:
    rows = _documented_rows()
    assert len(rows) >= 5  # the table was found and read
    assert [row[0].removeprefix("| ") for row in rows] == _contract_layer_names()
    assert [re.findall(r"`([\w.]+)`", row[1]) for row in rows] == _contract_layers(), (
        "the layer table of docs/architecture.md differs from the layers contract of pyproject.toml"
    )
