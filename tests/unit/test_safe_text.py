"""Server text made safe for a terminal (``safe_text``, ``safe_json``), the addresses a URL question may
offer (``links.offer``), and the elicitation modes the library declares and keeps to."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest

from ext_tasks.client.inputs import InputHandlers
from ext_tasks.client.links import MAX_URL_CHARS, Refused, offer
from ext_tasks.client.safe_text import is_safe, safe_json, safe_text

C0 = [chr(code) for code in range(0x20)]
C1 = [chr(code) for code in range(0x80, 0xA0)]
BIDI = [chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
#: Everything a terminal must never be given from a server, on one line.
UNSAFE = [*C0, "\x7f", *C1, *BIDI, "\u2028", "\u2029", "\ud800", "\udfff"]


def _shown(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


# --- safe_text ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("char", UNSAFE, ids=lambda char: f"U+{ord(char):04X}")
def test_every_control_is_shown_as_a_visible_escape_on_one_line(char: str) -> None:
    assert safe_text(f"a{char}b") == f"a{_shown(char)}b"


@pytest.mark.parametrize("char", [c for c in UNSAFE if c not in "\n\t"], ids=lambda char: f"U+{ord(char):04X}")
def test_every_control_but_newline_and_tab_is_escaped_in_multiline_text(char: str) -> None:
    assert safe_text(f"a{char}b", multiline=True) == f"a{_shown(char)}b"


def test_multiline_text_keeps_its_lines_and_tabs_and_shows_a_lone_carriage_return() -> None:
    assert safe_text("one\r\ntwo\n\tthree\rfake", multiline=True) == "one\ntwo\n\tthree\\x0dfake"
    assert safe_text("one\ntwo\tthree") == "one\\x0atwo\\x09three"


def test_what_is_shown_holds_no_control_character_at_all() -> None:
    everything = "".join(UNSAFE)
    for shown in (safe_text(everything), safe_text(everything, multiline=True).replace("\n", "").replace("\t", "")):
        assert shown.isascii() and shown.isprintable()
        shown.encode("utf-8")  # no lone surrogate left to fail the write


@pytest.mark.parametrize(
    "text",
    [
        "Deployed billing@v1.2 to production as billing-v1.2-#3.",
        "[link=javascript:alert(1)]markup is text here[/link] [/x]",
        "Grüße, 日本語, עברית with marks \u200f\u200e\u061c, emoji 👩\u200d💻, ½ and €",
        "C:\\Users\\ada\\x1b (a backslash is left alone)",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert safe_text(text) == text == safe_text(text, multiline=True)
    assert is_safe(text)


def test_values_that_are_not_strings_are_shown_as_text() -> None:
    assert safe_text(42) == "42"
    assert safe_text(None) == "None"


def test_long_input_is_escaped_whole() -> None:
    hostile = "\x1b]52;c;SE9TVElMRQ==\x07\u202e" * 200_000 + "end"
    shown = safe_text(hostile, multiline=True)
    assert shown == "\\x1b]52;c;SE9TVElMRQ==\\x07\\u202e" * 200_000 + "end"
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown


# --- safe_json ----------------------------------------------------------------------------------------


def test_json_output_parses_back_to_the_same_value_with_no_control_in_it() -> None:
    # Lone surrogates apart: JSON reads a high one followed by a low one as one character.
    value: dict[str, Any] = {
        "text": "|".join(UNSAFE) + "Grüße 日本語",
        f"key{chr(0x9B)}\u202e": [1, 2.5, None, True, {"nested\x1b": "\x7f"}],
    }
    written = safe_json(value)
    assert json.loads(written) == value
    assert all(unicodedata.category(char) != "Cc" or char == "\n" for char in written)
    assert all(is_safe(line) for line in written.split("\n"))
    assert "Grüße 日本語" in written  # readable text stays readable


# --- links.offer --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://auth.example.com/authorize?state=42&scope=a%20b", "auth.example.com"),
        ("HTTPS://Auth.Example.com:8443/x", "auth.example.com"),
        ("http://127.0.0.1:8080/callback", "127.0.0.1"),
        ("http://[::1]:9000/callback", "::1"),
        ("http://localhost/callback", "localhost"),
    ],
)
def test_https_and_loopback_http_addresses_are_offered(url: str, host: str) -> None:
    page = offer(url)
    assert (page.url, page.host, page.written_host) == (url, host, None)


def test_an_internationalised_host_is_shown_in_its_ascii_form() -> None:
    page = offer("https://\u0430pple.com/login")  # U+0430, a Cyrillic letter a
    assert (page.host, page.written_host) == ("xn--pple-43d.com", "\u0430pple.com")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (None, "no address"),
        ("", "no address"),
        ("javascript:alert(document.cookie)", "javascript: addresses are not offered"),
        ("data:text/html,<script>x</script>", "data: addresses are not offered"),
        ("file:///etc/passwd", "file: addresses are not offered"),
        ("//auth.example.com/x", "no scheme"),
        ("http://auth.example.com/x", "only https:"),
        ("http://10.0.0.1/x", "only https:"),
        ("https://bank.example@evil.example/", "user name before its host"),
        ("https://user:pw@evil.example/", "user name before its host"),
        ("https://evil.example/\u202egpj.exe", "control or invisible"),
        ("https://evil.example/\x1b]0;x\x07", "control or invisible"),
        ("https://evil.example/a b", "spaces"),
        ("https://evil.example:99999/", "cannot be read"),
        ("https:///path-only", "no host"),
        ("https://a..b/", "not a valid internationalised name"),
        ("https://e.example/" + "a" * MAX_URL_CHARS, "longer than"),
    ],
)
def test_other_addresses_are_refused(url: object, why: str) -> None:
    with pytest.raises(Refused, match=why):
        offer(url)


# --- elicitation modes --------------------------------------------------------------------------------


async def _accept(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"seen": params.get("mode", "form")}}


@pytest.mark.parametrize(
    ("modes", "declared"),
    [({"form"}, {}), ({"url"}, {"url": {}}), ({"form", "url"}, {"form": {}, "url": {}})],
)
def test_the_declared_elicitation_modes(modes: set[str], declared: dict[str, Any]) -> None:
    assert InputHandlers(_accept, elicitation_modes=frozenset(modes)).capabilities()["elicitation"] == declared


@pytest.mark.parametrize("modes", [frozenset(), frozenset({"form", "voice"})])
def test_unknown_or_no_elicitation_modes_are_refused(modes: frozenset[str]) -> None:
    with pytest.raises(ValueError, match="elicitation_modes"):
        InputHandlers(_accept, elicitation_modes=modes)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("modes", "params", "action"),
    [
        ({"form"}, {"mode": "url", "url": "https://x.example/"}, "decline"),
        ({"form"}, {"message": "no mode: a form"}, "accept"),
        ({"form"}, {"mode": ["form"]}, "decline"),
        ({"url"}, {"mode": "form", "requestedSchema": {}}, "decline"),
        ({"url"}, {}, "decline"),
        ({"form", "url"}, {"mode": "url", "url": "https://x.example/"}, "accept"),
        ({"form", "url"}, {"mode": "telepathy"}, "decline"),
    ],
)
async def test_a_question_in_a_mode_not_declared_is_declined_without_asking(
    modes: set[str], params: dict[str, Any], action: str
) -> None:
    inputs = InputHandlers(_accept, elicitation_modes=frozenset(modes))
    answers = await inputs.answer({"q": {"method": "elicitation/create", "params": params}})
    assert answers["q"]["action"] == action


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
