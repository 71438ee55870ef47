"""Text from a server, made safe to show on a terminal: every string the CLI prints that a server wrote
(results, errors, tool names and descriptions, questions, field titles, status lines, task ids) goes
through :func:`safe_text` or :func:`safe_json` first.

A server is not trusted with the terminal. An escape sequence in a tool's result can write the
clipboard (OSC 52), retitle the window, clear the screen and print a fake "Deployed" line, or hide text;
so these code points are shown as visible escapes instead of being written:

* C0 controls (U+0000-U+001F) and DEL (U+007F): ESC, BEL, CR, backspace ... (``\\x1b``);
* C1 controls (U+0080-U+009F): a terminal that honours 8-bit controls reads U+009B as CSI (``\\x9b``);
* the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they reorder what is
  shown without changing what is sent ("Trojan Source", UTS #55); the marks LRM, RLM and ALM are kept,
  as right-to-left text needs them and they cannot reverse a run of letters;
* the line and paragraph separators (U+2028, U+2029): Python's ``splitlines`` breaks lines on them;
* lone surrogates (U+D800-U+DFFF), which JSON can carry: writing one to a UTF-8 stream raises.

``\\n`` and ``\\t`` are kept where several lines are legitimate (a result's text, a question, a tool's
description; ``\\r\\n`` becomes ``\\n``) and escaped where one line is expected (a name, a status line).
A backslash is left alone: a server writing ``\\x1b`` as four characters shows the same four characters,
which is as harmless as the escaped ESC.

Markup is a separate matter: rich parses ``[link=...]`` and ``[/x]`` in strings it is given, so the
console builds every server string into a ``rich.text.Text`` (never parsed).
"""

from __future__ import annotations

import json
from typing import Final

_BIDI_CONTROLS: Final = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SEPARATORS: Final = (0x2028, 0x2029)
_SURROGATES: Final = range(0xD800, 0xE000)
#: Everything escaped on one line, and its visible form.
_UNSAFE: Final = (*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI_CONTROLS, *_SEPARATORS, *_SURROGATES)


def _visible(code: int) -> str:
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_LINE: Final[dict[int, str]] = {code: _visible(code) for code in _UNSAFE}
_LINES: Final[dict[int, str]] = {code: shown for code, shown in _LINE.items() if code not in (0x09, 0x0A)}
#: In JSON text, C0 controls are escaped by ``json.dumps`` already; the rest may only occur inside
#: strings, where ``\\uXXXX`` is an exact equivalent (the output still parses to the same value).
_JSON: Final[dict[int, str]] = {code: f"\\u{code:04x}" for code in _UNSAFE if code >= 0x20}


def safe_text(value: object, *, multiline: bool = False) -> str:
    """``value`` as text a terminal shows and does not obey: see the module's docstring for what is
    escaped. ``multiline``: keep line breaks and tabs (else they are shown as ``\\n`` and ``\\t``)."""
    text = value if isinstance(value, str) else str(value)
    if multiline:
        return text.replace("\r\n", "\n").translate(_LINES)
    return text.translate(_LINE)


def is_safe(text: str) -> bool:
    """Whether ``text`` holds nothing :func:`safe_text` would escape on one line."""
    return safe_text(text) == text


def safe_json(value: object) -> str:
    """``value`` as indented JSON that parses back to exactly ``value``, with no terminal control in it
    (non-ASCII text stays readable: only the code points above are written as ``\\uXXXX``)."""
    return json.dumps(value, indent=2, ensure_ascii=False).translate(_JSON)
