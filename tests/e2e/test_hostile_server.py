"""``ext-tasks`` and the client library against a hostile server (``tests/support/hostile_server.py``, a
real HTTP server on loopback): its strings are shown, never obeyed, and it gets nothing the person did
not agree to.

The CLI runs in a real pseudo-terminal (pexpect) and every byte it writes there is captured. With
``TERM=xterm-256color`` rich styles its own output, so the check is that none of the server's sequences
(:data:`HOSTILE_BYTES`: clipboard, title, screen clear, bell, C1 CSI, RLO, an OSC 8 hyperlink made from
its markup) is among them; with ``TERM=dumb`` rich writes no escape at all, so there must be no ESC.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pexpect
import pytest

from ext_tasks.client import Client
from tests.support.hostile_server import BAD_URL, HOSTILE_BYTES, LINK, RESULT, URL, HostileServer
from tests.support.processes import REPO

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "ext_tasks"]
TIMEOUT_S = 30
BOTH_TERMS = pytest.mark.parametrize("term", ["xterm-256color", "dumb"])


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as served:
        yield served


class Terminal:
    """The CLI in a pseudo-terminal, every byte it writes kept in :attr:`seen`."""

    def __init__(self, server: HostileServer, *args: str, term: str = "xterm-256color") -> None:
        env = {**os.environ, "TERM": term, "PYTHONPATH": str(REPO)}
        env.pop("NO_COLOR", None)
        self.term = term
        self.child = pexpect.spawn(CLI[0], [*CLI[1:], *args, "--url", server.url], cwd=str(REPO), env=env,
                                   timeout=TIMEOUT_S, dimensions=(40, 160))  # fmt: skip
        self._seen = io.BytesIO()
        self.child.logfile_read = self._seen

    def expect(self, text: str) -> None:
        """Wait for ``text`` to be shown exactly as written."""
        self.child.expect_exact(text.encode())

    def answer(self, line: str) -> None:
        self.child.sendline(line.encode())

    def finish(self) -> bytes:
        """Everything the CLI wrote, once it exited 0; none of it from the server's controls."""
        self.child.expect(pexpect.EOF)
        self.child.close()
        seen = self._seen.getvalue()
        assert self.child.exitstatus == 0, seen
        assert_nothing_obeyed(seen, self.term)
        return seen


def assert_nothing_obeyed(seen: bytes, term: str) -> None:
    assert b"Traceback" not in seen, seen
    assert [sequence for sequence in HOSTILE_BYTES if sequence in seen] == [], seen
    if term == "dumb":
        assert b"\x1b" not in seen, seen


def lines(seen: bytes) -> list[str]:
    return seen.decode().replace("\r\n", "\n").split("\n")


# --- shown, not obeyed ------------------------------------------------------------------------------


@BOTH_TERMS
def test_tool_names_and_descriptions_are_shown_not_obeyed(server: HostileServer, term: str) -> None:
    seen = Terminal(server, "tools", term=term).finish()
    listed = lines(seen)
    assert listed[0].startswith(
        r"\x1b[2J\x1b[Hls\x1b]0;HOSTILE TITLE\x07  \x1b]52;c;SE9TVElMRQ==\x07lists\u202etxt.exe"
    )
    assert listed[0].endswith(LINK)
    # The description's second line is indented under the first: it cannot pass for another tool.
    assert re.fullmatch(r" {30,}rm_everything  Deletes nothing, promise", listed[1])
    assert "hostile_result" in listed


@BOTH_TERMS
def test_a_result_is_shown_not_obeyed(server: HostileServer, term: str) -> None:
    terminal = Terminal(server, "call", "hostile_result", term=term)
    # The clear-screen and carriage return before the fake line are shown, on the same line as the rest.
    terminal.expect(
        r"result \x1b]52;c;SE9TVElMRQ==\x07\x1b]0;HOSTILE TITLE\x07\x9b31mred\u202edesrever\x7f\x08"
        r"\x1b[2J\x1b[H\x0dDeployed billing@v9 to production."
    )
    terminal.finish()


def test_json_output_is_the_exact_result_with_no_control_in_it(server: HostileServer) -> None:
    seen = Terminal(server, "call", "hostile_result", "--json").finish()
    assert json.loads(seen.decode().replace("\r\n", "\n")) == {"resultType": "complete", **RESULT}
    assert rb"\u001b]52;" in seen and rb"\u009b31m" in seen and rb"\u202e" in seen


def test_an_error_is_shown_not_obeyed(server: HostileServer) -> None:
    terminal = Terminal(server, "call", "hostile_error")
    terminal.expect(r"error: failed [/x] \x1b]0;HOSTILE TITLE\x07\x1b[2J\x1b[H\x0dDeployed billing@v9")
    terminal.child.expect(pexpect.EOF)
    terminal.child.close()
    assert terminal.child.exitstatus == 2
    assert_nothing_obeyed(terminal._seen.getvalue(), "xterm")


def test_a_question_with_markup_and_escapes_is_asked_as_written(server: HostileServer) -> None:
    terminal = Terminal(server, "call", "hostile_question")
    terminal.expect(rf"Deploy? {LINK} [/x] \x1b]0;HOSTILE TITLE\x07\x1b]52;c;SE9TVElMRQ==\x07")
    terminal.expect(r"[bold red]Name[/x]\x1b[2J\x1b[H")
    terminal.answer("Ada")
    terminal.expect(rf"Colour {LINK}")
    terminal.expect(r"[red\x9b31m/[/x]blue]")
    terminal.answer("[/x]blue")
    terminal.expect("answered hostile_question")
    terminal.finish()
    # The choice shown escaped is sent back as the server wrote it.
    assert server.answers["hostile_question"] == {
        "who": {"action": "accept", "content": {"name": "Ada", "color": "[/x]blue"}}
    }


def test_markup_in_a_question_makes_no_hyperlink(server: HostileServer) -> None:
    terminal = Terminal(server, "call", "link_question")
    terminal.expect(f"Deploy? {LINK}")
    terminal.expect(f"Name {LINK}")
    terminal.answer("Ada")
    terminal.expect("answered link_question")
    terminal.finish()  # no OSC 8 among the bytes


def test_a_tasks_status_lines_are_shown_not_obeyed(server: HostileServer) -> None:
    terminal = Terminal(server, "call", "hostile_task")
    terminal.expect(r"task task-\x1b]0;HOSTILE TITLE\x07-1 started")
    terminal.expect(rf"working · {LINK} \x1b]0;HOSTILE TITLE\x07step 1")
    terminal.expect(r"\x1b[2J\x1b[H\x0dDeployed billing@v9 to production.")
    terminal.finish()


# --- what the person agrees to ----------------------------------------------------------------------


@pytest.mark.parametrize(("typed", "action"), [("", "decline"), ("n", "decline"), ("y", "accept")])
def test_a_url_question_shows_where_it_leads_and_needs_a_typed_yes(
    server: HostileServer, typed: str, action: str
) -> None:
    terminal = Terminal(server, "call", "url_question")
    terminal.expect("Sign in")
    terminal.expect(f"  {URL}")
    terminal.expect("it leads to ")
    terminal.expect("auth.example.com")
    terminal.expect(" over https")
    terminal.expect("[y/n]")
    terminal.answer(typed)
    terminal.expect("answered url_question")
    terminal.finish()
    assert server.answers["url_question"] == {"open": {"action": action}}
    # URL mode is declared on a terminal only (questions can be asked there).
    assert server.declared["url_question"]["elicitation"] == {"form": {}, "url": {}}


def test_an_address_other_than_https_is_declined_without_asking(server: HostileServer) -> None:
    terminal = Terminal(server, "call", "bad_url_question")
    terminal.expect(f"The server asks you to open {BAD_URL}")
    terminal.expect("Declined: javascript: addresses are not offered (only https:).")
    terminal.expect("answered bad_url_question")
    assert b"[y/n]" not in terminal.finish()
    assert server.answers["bad_url_question"] == {"open": {"action": "decline"}}


@pytest.mark.parametrize(("typed", "answer"), [("", {"action": "decline"}), ("y", {"action": "accept", "content": {}})])
def test_a_form_without_fields_needs_a_typed_yes(server: HostileServer, typed: str, answer: dict[str, Any]) -> None:
    terminal = Terminal(server, "call", "empty_form")
    terminal.expect("Allow the server to delete every task?")
    terminal.expect("only whether you agree")
    terminal.expect("Agree? ")
    terminal.expect("[y/n]")
    terminal.answer(typed)
    terminal.expect("answered empty_form")
    terminal.finish()
    assert server.answers["empty_form"] == {"ok": answer}


# --- the library ------------------------------------------------------------------------------------


def _recording(asked: list[dict[str, Any]]) -> Callable[[dict[str, Any]], Any]:
    async def accept_everything(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {}} if params.get("mode") != "url" else {"action": "accept"}

    return accept_everything


@pytest.mark.anyio
async def test_the_library_declines_a_url_question_it_did_not_declare(server: HostileServer) -> None:
    asked: list[dict[str, Any]] = []
    async with Client(server.url, elicitation=_recording(asked)) as client:
        result = await client.call_tool("url_question")
    assert result["content"] == [{"type": "text", "text": "answered url_question"}]
    assert asked == []  # the callback, written for forms, never saw it
    assert server.answers["url_question"] == {"open": {"action": "decline"}}
    assert server.declared["url_question"]["elicitation"] == {}  # form only


@pytest.mark.anyio
async def test_the_library_hands_a_declared_url_question_to_its_callback(server: HostileServer) -> None:
    asked: list[dict[str, Any]] = []
    async with Client(server.url, elicitation=_recording(asked), elicitation_modes=("form", "url")) as client:
        await client.call_tool("url_question")
    assert [params["url"] for params in asked] == [URL]
    assert server.answers["url_question"] == {"open": {"action": "accept"}}
    assert server.declared["url_question"]["elicitation"] == {"form": {}, "url": {}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
