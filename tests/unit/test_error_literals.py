"""The JSON-RPC error codes are written as numbers in one place of the tests: here.

Every other test names them (``INVALID_PARAMS``, not ``-32602``), imported from
``ext_tasks.protocol.errors``: a reader sees which error is meant, and a code cannot drift in one test
file while the server changes. This file pins the constants to the numbers of the spec (protocol.md
§1.4), so a wrong constant cannot pass unnoticed behind tests that all use it, and scans ``tests/`` so
a literal code written in code (a comparison, a dict, an argument) fails here. Prose is not scanned:
a comment or docstring may cite the spec's number.
"""

from __future__ import annotations

import io
import itertools
import tokenize
from pathlib import Path

from ext_tasks.protocol import errors

#: Each constant and its number in the spec (protocol.md §1.4) or, for ``LIMIT_EXCEEDED``, the
#: application-defined code outside the reserved space (see its comment in ``protocol/errors.py``).
SPEC_CODES = {
    "PARSE_ERROR": -32700,
    "INVALID_REQUEST": -32600,
    "METHOD_NOT_FOUND": -32601,
    "INVALID_PARAMS": -32602,
    "INTERNAL_ERROR": -32603,
    "HEADER_MISMATCH": -32020,
    "MISSING_REQUIRED_CLIENT_CAPABILITY": -32021,
    "UNSUPPORTED_PROTOCOL_VERSION": -32022,
    "LIMIT_EXCEEDED": -31429,
}

TESTS = Path(__file__).resolve().parents[1]
#: Scripts run by other interpreters (the mcp 1.x / 2.x and fastmcp virtualenvs), which have no
#: ``ext_tasks`` to import the constants from: what they write is another implementation's view.
OTHER_INTERPRETERS = (TESTS / "e2e" / "clients", TESTS / "e2e" / "peers")


def literal_codes(source: str) -> list[tuple[int, int]]:
    """``(line, code)`` of each error code written as a literal in code: a ``-`` and the number, as two
    adjacent tokens (so strings and comments, single tokens of their own, never match)."""
    known = {-value for value in SPEC_CODES.values()}
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    found = []
    for sign, number in itertools.pairwise(tokens):
        if sign.type != tokenize.OP or sign.string != "-" or number.type != tokenize.NUMBER:
            continue
        if number.string.replace("_", "").isdigit() and int(number.string.replace("_", "")) in known:
            found.append((number.start[0], -int(number.string.replace("_", ""))))
    return found


def test_error_codes_are_the_numbers_of_the_spec() -> None:
    assert {name: getattr(errors, name) for name in SPEC_CODES} == SPEC_CODES


def test_the_scan_finds_a_code_in_code_and_not_in_prose() -> None:
    source = (
        '"""Answers -32602."""\n'
        "# -32601 for a legacy client\n"
        'assert reply["error"]["code"] == -32602\n'
        'EXPECTED = {"code": - 32_603, "message": "x (JSON-RPC -32603)"}\n'
        "PORT_OFFSET = -32000\n"
    )
    assert literal_codes(source) == [(3, -32602), (4, -32603)]


def test_no_test_writes_an_error_code_as_a_literal() -> None:
    files = [path for path in sorted(TESTS.rglob("*.py")) if is_ours(path)]
    assert len(files) > 100, f"the scan found only {len(files)} files under {TESTS}"
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}: {code} (write errors.{name_of(code)})"
        for path in files
        for line, code in literal_codes(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "error codes written as numbers; import the constant from ext_tasks.protocol.errors:\n" + (
        "\n".join(found)
    )


def is_ours(path: Path) -> bool:
    """A test module of this project's interpreter: not this file, not a script of another interpreter,
    not a file npm installed (``node_modules`` may hold Python build scripts)."""
    if path.resolve() == Path(__file__).resolve() or "node_modules" in path.parts:
        return False
    return not any(path.is_relative_to(folder) for folder in OTHER_INTERPRETERS)


def name_of(code: int) -> str:
    return next(name for name, value in SPEC_CODES.items() if value == code)
