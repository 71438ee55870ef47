"""The terminal side of ``ext-tasks call``: a live status line while a task runs, questions asked
from an elicitation's schema, and the result printed for a person.

Everything but the result goes to stderr, so ``--json`` leaves stdout to the result alone. Without a
terminal there is no live line: each change of the task's status is one plain line instead.

Every string a server wrote is shown through :mod:`.safe_text` (its escape sequences shown, never
obeyed) and as a ``rich.text.Text`` (its ``[markup]`` shown as written, never parsed). A URL-mode
elicitation shows the address and where it leads, and is accepted only when the person types ``y``
(:mod:`.links` decides which addresses are offered at all); a form without fields is a yes/no question,
declined unless the person types ``y``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO, TypeVar

from rich.console import Console as RichConsole
from rich.prompt import Confirm, Prompt
from rich.status import Status
from rich.text import Text

from .links import Refused, offer
from .safe_text import safe_json, safe_text

T = TypeVar("T")


class Console:
    #: What :meth:`elicit` can ask (declared only when questions may be asked: :attr:`ask`).
    elicitation_modes: Final = ("form", "url")

    def __init__(self, stream: TextIO, *, interactive: bool, ask: bool) -> None:
        self.interactive = interactive
        #: Where everything but the result goes (stderr).
        self.stream = stream
        #: Whether questions may be asked (a terminal on stdin, and no ``--no-input``).
        self.ask = ask
        # No markup, emoji codes or highlighting in plain strings either: server text is given as Text.
        self._rich = RichConsole(
            file=stream, force_terminal=interactive, highlight=False, markup=False, emoji=False, soft_wrap=True
        )
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
        line = safe_text(state.get("status", "?"))
        if state.get("statusMessage"):
            line += f" · {safe_text(state['statusMessage'])}"
        if not self.interactive:
            if line != self._last_line:
                self._last_line = line
                self._rich.print(Text(line))
            return
        text = Text(f"{line} · {time.monotonic() - self._started:.1f}s")
        if self._status is None:
            self._status = Status(text, console=self._rich)
            self._status.start()
        else:
            self._status.update(text)

    def say(self, text: str) -> None:
        """One line for the person, above the status line (server text in it shown, not obeyed)."""
        self._rich.print(Text(safe_text(text)))

    def done(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    # --- questions ----------------------------------------------------------------------------------

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ask the person an elicitation: a page to open (URL mode), or one question per property of its
        ``requestedSchema`` (form mode; only declared modes reach here)."""
        paused = self._status is not None
        self.done()
        self.prompting = True
        ask = self._ask_url if params.get("mode") == "url" else self._ask_form
        try:
            return await _in_thread(lambda: ask(params))
        finally:
            self.prompting = False
            if paused:
                self.status({"status": "working"})

    def _ask_form(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self._question(params)
        schema = params.get("requestedSchema")
        schema = schema if isinstance(schema, Mapping) else {}
        properties = schema.get("properties")
        fields = properties if isinstance(properties, Mapping) else {}
        if not fields:
            # Nothing to fill in: accepting is agreeing to whatever the message says, so it is asked.
            self._rich.print(Text("The server asks for no information, only whether you agree."))
            return self._agreed(Text("Agree?"), content={})
        listed = schema.get("required")
        required = {str(name) for name in listed} if isinstance(listed, list) else set()
        content: dict[str, Any] = {}
        for name, spec in fields.items():
            value = self._ask_field(str(name), spec if isinstance(spec, Mapping) else {}, str(name) in required)
            if value is not None:
                content[str(name)] = value
        return {"action": "accept", "content": content}

    def _ask_url(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self._question(params)
        try:
            page = offer(params.get("url"))
        except Refused as why:
            self._rich.print(Text(f"The server asks you to open {safe_text(params.get('url'))}", style="bold"))
            self._rich.print(Text(f"Declined: {why}.", style="red"))
            return {"action": "decline"}
        self._rich.print(Text("The server asks you to open this page (it is not opened for you):"))
        self._rich.print(Text(f"  {page.url}", style="bold"))
        host = Text("  it leads to ").append(page.host, style="bold underline").append(f" over {page.scheme}")
        if page.written_host is not None:
            host.append(f" (written {page.written_host} in the address)")
        self._rich.print(host)
        return self._agreed(Text("Open it yourself and go ahead?"), content=None)

    def _question(self, params: Mapping[str, Any]) -> None:
        message = params.get("message")
        shown = safe_text(message, multiline=True) if message else "The server asks:"
        self._rich.print(Text(shown, style="bold"))

    def _agreed(self, question: Text, *, content: dict[str, Any] | None) -> dict[str, Any]:
        """``accept`` only when the person types yes (the default, and anything else, is ``decline``)."""
        if not Confirm.ask(question, console=self._rich, default=False):
            return {"action": "decline"}
        return {"action": "accept"} if content is None else {"action": "accept", "content": content}

    def _ask_field(self, name: str, spec: Mapping[str, Any], required: bool) -> Any:
        label = Text(safe_text(spec.get("title") or spec.get("description") or name))
        kind = spec.get("type")
        default = spec.get("default")
        if kind == "boolean":
            return Confirm.ask(label, console=self._rich, default=bool(default) if default is not None else False)
        # Choices are offered as shown; the answer maps back to the value the server wrote.
        enum = spec.get("enum")
        values = {safe_text(value): value for value in enum} if isinstance(enum, list) else {}
        shown = "" if default is None else safe_text(default)
        while True:
            answer = Prompt.ask(
                label, console=self._rich, choices=list(values) or None, default=shown, show_default=bool(shown)
            )
            if answer == "" and not required:
                return None
            if answer in values:
                return values[answer]
            if shown and answer == shown:
                return default
            try:
                return _typed(answer, kind)
            except ValueError:
                article = "an" if kind == "integer" else "a"
                self._rich.print(Text(f"{safe_text(name)} must be {article} {safe_text(kind)}", style="red"))

    # --- the result -------------------------------------------------------------------------------

    def print_result(self, result: Mapping[str, Any], out: TextIO) -> None:
        """The result's content for a person: text as text, anything else described in one line."""
        printed = False
        content = result.get("content")
        for item in content if isinstance(content, list) else ():
            if not isinstance(item, Mapping):
                continue
            printed = True
            if item.get("type") == "text":
                print(safe_text(item.get("text", ""), multiline=True), file=out)
            else:
                kind = item.get("mimeType") or item.get("uri") or ""
                print(safe_text(f"[{item.get('type')} {kind}]".replace(" ]", "]")), file=out)
        if not printed and "structuredContent" in result:
            print(safe_json(result["structuredContent"]), file=out)
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
