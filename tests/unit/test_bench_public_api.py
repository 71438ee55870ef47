"""The bench measures ext_tasks from outside: it imports only public names of ``ext_tasks`` (no module
or name with a leading underscore, and no ``module._name`` reached through an imported module).
The import-linter contract "the bench uses the public API only" keeps it off the server's internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def private_uses(source: str) -> list[str]:
    """Every private ``ext_tasks`` name ``source`` imports or reaches through an imported module."""
    found: list[str] = []
    modules: set[str] = set()  # local names bound to an ext_tasks module or object
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ext_tasks":
                    if _private(alias.name):
                        found.append(alias.name)
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ext_tasks":
            module = node.module or ""
            for alias in node.names:
                if _private(f"{module}.{alias.name}"):
                    found.append(f"{module}.{alias.name}")
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id in modules and _private(node.attr):
            found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(BENCH.rglob("*.py")), ids=lambda path: str(path.relative_to(BENCH)))
def test_a_bench_module_uses_no_private_ext_tasks_name(path: Path) -> None:
    assert private_uses(path.read_text()) == []


def test_the_check_sees_each_way_of_reaching_a_private_name() -> None:
    source = (
        "import ext_tasks._hidden\n"
        "from ext_tasks.cli import _hypercorn_config\n"
        "from ext_tasks import cli\n"
        "cli._serve(None)\n"
        "from ext_tasks import Context\n"
        "Context.__name__\n"
    )

    assert private_uses(source) == ["ext_tasks._hidden", "ext_tasks.cli._hypercorn_config", "cli._serve"]
