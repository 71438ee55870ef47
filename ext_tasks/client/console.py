"""The terminal side of ``ext-tasks call``: a live status line while a task runs, questions asked
from an elicitation's schema, and the result printed for a person.

Everything but the result goes to stderr, so ``--json`` leaves stdout to the result alone. Without a
terminal there is no live line: each change of the task's status is one plain line instead.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO, TypeVar

from rich.console import Console as RichConsole
from rich.prompt import Confirm, Prompt
from rich.status import Status

T = TypeVar("T")


class Console:
    def __init__(self, stream: TextIO, *, interactive: bool, ask: bool) -> None:
        self.interactive = interactive
        #: Whether questions may be asked (a terminal on stdin, and no ``--no-input``).
        self.ask = ask
        self._rich = RichConsole(file=stream, force_terminal=interactive, highlight=False, soft_wrap=True)
        self._status: Status | None = None
        #: A question is on the screen, waiting for the person.
        self.prompting = False
        self._started = time.monotonic()
        self._last_line = ""

    # --- the status line --------------------------------------------------------------------------

    def started(self, task_id: str) -> None:
        self._started = time.monotonic()
        self.say(f"task {task_id} started")

    def status(self, state: Mapping[str, Any]) -> None:
        line = str(state.get("status", "?"))
        if state.get("statusMessage"):
            line += f" · {state['statusMessage']}"
        if not self.interactive:
            if line != self._last_line:
                self._last_line = line
                self._rich.print(line)
            return
        text = f"{line} · {time.monotonic() - self._started:.1f}s"
        if self._status is None:
            self._status = Status(text, console=self._rich)
            self._status.start()
        else:
            self._status.update(text)

    def say(self, text: str) -> None:
        """One line for the person, above the status line."""
        self._rich.print(text, markup=False)

    def done(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    # --- questions ----------------------------------------------------------------------------------

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ask the person an elicitation's questions, one per property of its ``requestedSchema``."""
        paused = self._status is not None
        self.done()
        self.prompting = True
        try:
            return await _in_thread(lambda: self._ask_form(params))
        finally:
            self.prompting = False
            if paused:
                self.status({"status": "working"})

    def _ask_form(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self._rich.print(f"[bold]{params.get('message', 'The server asks:')}[/bold]")
        schema = params.get("requestedSchema")
        schema = schema if isinstance(schema, Mapping) else {}
        properties = schema.get("properties")
        required = set(schema.get("required") or ())
        content: dict[str, Any] = {}
        for name, spec in (properties or {}).items() if isinstance(properties, Mapping) else ():
            value = self._ask_field(str(name), spec if isinstance(spec, Mapping) else {}, name in required)
            if value is not None:
                content[str(name)] = value
        return {"action": "accept", "content": content}

    def _ask_field(self, name: str, spec: Mapping[str, Any], required: bool) -> Any:
        label = str(spec.get("title") or spec.get("description") or name)
        kind = spec.get("type")
        default = spec.get("default")
        if kind == "boolean":
            return Confirm.ask(label, console=self._rich, default=bool(default) if default is not None else False)
        choices = [str(choice) for choice in spec.get("enum", ())] or None
        while True:
            shown = "" if default is None else str(default)
            answer = Prompt.ask(label, console=self._rich, choices=choices, default=shown, show_default=bool(shown))
            if answer == "" and not required:
                return None
            try:
                return _typed(answer, kind)
            except ValueError:
                self._rich.print(f"[red]{name} must be a{'n' if kind == 'integer' else ''} {kind}[/red]")

    # --- the result -------------------------------------------------------------------------------

    def print_result(self, result: Mapping[str, Any], out: TextIO) -> None:
        """The result's content for a person: text as text, anything else described in one line."""
        printed = False
        for item in result.get("content") or ():
            if not isinstance(item, Mapping):
                continue
            printed = True
            if item.get("type") == "text":
                print(item.get("text", ""), file=out)
            else:
                kind = item.get("mimeType") or item.get("uri") or ""
                print(f"[{item.get('type')} {kind}]".replace(" ]", "]"), file=out)
        if not printed and "structuredContent" in result:
            print(json.dumps(result["structuredContent"], indent=2, ensure_ascii=False), file=out)
        if result.get("isError") is True:
            self.say("the tool reported an error")


def _typed(answer: str, kind: object) -> Any:
    if kind == "integer":
        return int(answer)
    if kind == "number":
        return float(answer)
    return answer


async def _in_thread(ask: Callable[[], T]) -> T:
    """Run a blocking prompt in a daemon thread: the event loop keeps serving Ctrl-C meanwhile, and a
    prompt left unanswered does not keep the process alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def target() -> None:
        try:
            value = ask()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, value, None)

    threading.Thread(target=target, name="ext-tasks-prompt", daemon=True).start()
    return await future


def _settle(future: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]
