"""The tree ``ext_tasks/protocol/errors.py`` draws is the real one: every ``ProtocolError`` subclass of
``ext_tasks`` and ``migration`` under its real parent, with its real code, HTTP status, extra headers and
module. A subclass added without its line (or a line left for a class gone) fails here.

Not drawn: a tool author's own subclasses (``ext_tasks.examples`` uses the tool-author API as any author
would; their codes are the author's) and those tests define."""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

import ext_tasks
import migration
from ext_tasks.protocol import errors
from ext_tasks.protocol.errors import ProtocolError

_LINE = re.compile(r"^(?P<indent> *)(?P<name>\w+)(?:\((?P<values>[^)]*)\))?(?:\s+(?P<module>[\w.]+))?\s*$")


@dataclass
class Drawn:
    name: str
    parent: str | None
    code: int
    status: int
    headers: bool
    module: str


def _drawn() -> dict[str, Drawn]:
    doc = errors.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    drawn: dict[str, Drawn] = {}
    stack: list[tuple[int, Drawn]] = []
    for line in block.splitlines():
        found = _LINE.match(line)
        assert found, f"not a line of the tree: {line!r}"
        depth = len(found["indent"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        values = [value.strip() for value in (found["values"] or "").split(",") if value.strip()]
        numbers = [int(value) for value in values if re.fullmatch(r"-?\d+", value)]
        code = next((n for n in numbers if n < 0), parent.code if parent else 0)
        status = next((n for n in numbers if n > 0), parent.status if parent else 0)
        headers = any(not re.fullmatch(r"-?\d+", value) for value in values) or bool(parent and parent.headers)
        module = found["module"] or "ext_tasks.protocol.errors"
        node = Drawn(found["name"], parent.name if parent else None, code, status, headers, module)
        assert node.name not in drawn, f"{node.name} drawn twice"
        drawn[node.name] = node
        stack.append((depth, node))
    return drawn


def _real() -> dict[str, type[ProtocolError]]:
    for package in (ext_tasks, migration):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    found: dict[str, type[ProtocolError]] = {"ProtocolError": ProtocolError}
    pending = [ProtocolError]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            served = sub.__module__.startswith(("ext_tasks.", "migration."))
            if served and not sub.__module__.startswith("ext_tasks.examples."):
                assert sub.__name__ not in found, f"two ProtocolErrors named {sub.__name__}"
                found[sub.__name__] = sub
    return found


def test_the_drawn_tree_is_the_class_tree() -> None:
    drawn, real = _drawn(), _real()
    assert sorted(drawn) == sorted(real), "classes drawn in protocol/errors.py vs. defined"
    for name, cls in real.items():
        line = drawn[name]
        parents: list[str | None] = [base.__name__ for base in cls.__bases__ if issubclass(base, ProtocolError)]
        assert [line.parent] == (parents or [None]), f"{name}'s parent"
        assert (line.code, line.status) == (cls.code, cls.http_status), f"{name}'s code and status"
        assert line.headers == (cls.http_headers is not ProtocolError.http_headers), f"{name}'s headers"
        assert line.module == cls.__module__, f"{name}'s module"
