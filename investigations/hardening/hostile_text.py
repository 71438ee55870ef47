"""Hostile text: what a hostile server's strings do to the terminal of ``ext-tasks``, before and after.

    python -m investigations.hardening.hostile_text [--before REV|DIR] [--after REV|DIR] [--versions before after]

The server is ``tests/support/hostile_server.py`` (run here, on loopback). Each scenario runs the
checkout's CLI (``python -m ext_tasks``) in a pseudo-terminal twice:

* ``TERM=dumb``: rich writes no escape sequence of its own then, so every ESC byte in the captured
  output came from the server (column ``ESC``);
* ``TERM=xterm-256color``: the server's sequences counted by kind (:data:`HOSTILE_BYTES`: clipboard,
  title, screen clear, cursor home, BEL, C1 CSI, RLO, and OSC 8 hyperlinks made from its markup).

Questions are answered when the CLI has been quiet for a second (the next of the scenario's answers;
the Enter key declines a yes/no question). Also: whether the run crashed (a traceback), its exit
status, and the answer the server received. One more row runs the checkout's library
(``Client(elicitation=accept_everything)``, form mode declared) on the URL-mode question.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pexpect

from tests.support.hostile_server import HOSTILE_BYTES, HostileServer

from .figlib import Checkout, check_shadowing, checkouts, parser, say
from .figlib import work_dir as make_work_dir

BEFORE: str = "217690e"
RUN_TIMEOUT_S = 30.0
QUIET_S = 1.0


@dataclass(frozen=True)
class Scenario:
    name: str
    argv: tuple[str, ...]
    answers: tuple[str, ...] = ()


SCENARIOS = (
    Scenario("tools", ("tools",)),
    Scenario("result", ("call", "hostile_result")),
    Scenario("result --json", ("call", "hostile_result", "--json")),
    Scenario("error", ("call", "hostile_error")),
    Scenario("task status", ("call", "hostile_task")),
    Scenario("question", ("call", "hostile_question"), ("Ada", "[/x]blue")),
    Scenario("question with a link", ("call", "link_question"), ("Ada",)),
    Scenario("url question", ("call", "url_question"), ("",)),
    Scenario("bad url question", ("call", "bad_url_question"), ("",)),
    Scenario("form without fields", ("call", "empty_form"), ("",)),
)

LIBRARY = """
import asyncio, sys
from ext_tasks.client import Client

async def accept_everything(params):
    return {"action": "accept", "content": {}}

async def main():
    async with Client(sys.argv[1], elicitation=accept_everything) as client:
        await client.call_tool("url_question")

asyncio.run(main())
"""


def run_cli(checkout: Checkout, cwd: Path, scenario: Scenario, url: str, term: str) -> tuple[bytes, int | None]:
    """The bytes the CLI wrote to its terminal, and its exit status (None: killed at the deadline)."""
    child = pexpect.spawn(
        checkout.python, ["-m", "ext_tasks", *scenario.argv, "--url", url], cwd=str(cwd),
        env=checkout.env({"TERM": term}), timeout=RUN_TIMEOUT_S, dimensions=(40, 160),
    )  # fmt: skip
    answers = list(scenario.answers)
    out = b""
    quiet = 0
    try:
        while quiet * QUIET_S < RUN_TIMEOUT_S:
            try:
                out += child.read_nonblocking(65536, timeout=QUIET_S)
                quiet = 0
            except pexpect.TIMEOUT:
                quiet += 1
                if answers:
                    child.sendline(answers.pop(0))
    except pexpect.EOF:
        pass
    child.close(force=True)
    return out, child.exitstatus


def row(checkout: Checkout, cwd: Path, scenario: Scenario) -> dict[str, object]:
    with HostileServer() as server:
        plain, status = run_cli(checkout, cwd, scenario, server.url, "dumb")
    with HostileServer() as server:
        styled, _ = run_cli(checkout, cwd, scenario, server.url, "xterm-256color")
        answers = server.answers
    kinds = {repr(seq)[2:-1]: styled.count(seq) for seq in HOSTILE_BYTES if styled.count(seq)}
    return {
        "version": checkout.label, "scenario": scenario.name, "exit": status,
        "crashed": b"Traceback" in plain or b"Traceback" in styled, "ESC": plain.count(b"\x1b"),
        "hostile sequences": sum(kinds.values()), "kinds": kinds, "answers": answers,
    }  # fmt: skip


def library_row(checkout: Checkout, cwd: Path) -> dict[str, object]:
    with HostileServer() as server:
        done = subprocess.run(
            [checkout.python, "-c", LIBRARY, server.url], cwd=cwd, env=checkout.env(),
            capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        )  # fmt: skip
        return {"version": checkout.label, "scenario": "library: url question, form declared", "exit": done.returncode,
                "crashed": "Traceback" in done.stderr, "answers": server.answers}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("hostile_text", __doc__ or "")
    p.set_defaults(before=BEFORE)
    args = p.parse_args(argv)
    work = make_work_dir(args)
    rows: list[dict[str, object]] = []
    with checkouts(args) as found:
        for checkout in found:
            check_shadowing(checkout, work)
            rows += [row(checkout, work, scenario) for scenario in SCENARIOS]
            rows.append(library_row(checkout, work))
    for found_row in rows:
        say(json.dumps(found_row, ensure_ascii=True))
    (work / "hostile_text.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
