"""``ext-tasks call``, ``ext-tasks task get|wait|cancel|list`` and ``ext-tasks tools``: the client on the
command line.

::

    ext-tasks call deploy service=billing ref=v1.2 environment=production --url http://127.0.0.1:3001/mcp
    ext-tasks call report year:=2026 tags:='["a","b"]' --json
    ext-tasks task wait TASK_ID
    ext-tasks task list

``call`` keeps a local record of the tasks it starts (:mod:`.recorder`): ``task get|wait|cancel ID``
without ``--url`` ask the server recorded for that id (an id not recorded is a usage error: no server is
guessed), and ``task list`` shows the record.

Arguments follow httpie: ``key=value`` is a string, ``key:=json`` any JSON value. Exit status: 0 for a
completed result, 1 for an ``isError`` result or a task that ended ``failed`` or ``cancelled``, 2 for a
usage or protocol error or when ``--timeout`` passed (a task it started goes on: its id is printed on
stdout), 130 when a second Ctrl-C left the task running (its id is printed on stdout too).
Ctrl-C once cancels the task (a second one within a second leaves it running instead).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TextIO

from .. import tracing, tracing_setup
from . import sign_in
from .client import Client
from .console import Console
from .errors import ClientError, DeadlineExceeded, TaskCancelled, TaskFailed
from .recorder import NotRecorded, Recorder, print_list, server_of
from .safe_text import safe_json, safe_text
from .tasks import TaskHandle, within

DEFAULT_URL: Final = "http://127.0.0.1:3001/mcp"
EXIT_OK: Final = 0
EXIT_TOOL_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_LEFT_RUNNING: Final = 130
#: How long after a first Ctrl-C the task is cancelled: a second one within it leaves the task running.
CANCEL_GRACE_S: Final = 1.0


class UsageError(Exception):
    pass


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The client's subcommands, on the ``ext-tasks`` parser."""
    call = commands.add_parser("call", help="call a tool of a 2026-07-28 server and print its result")
    call.add_argument("tool", help="the tool's name")
    call.add_argument("items", nargs="*", metavar="key=value|key:=json", help="the tool's arguments")
    _connection_flags(call)
    _timeout_flag(call)
    task = commands.add_parser("task", help="follow a task (get, wait or cancel), or list the tasks started here")
    task.add_argument("action", choices=("get", "wait", "cancel", "list"))
    task.add_argument("task_id", nargs="?", help="the task's id (not for list)")
    _connection_flags(
        task, url_help="the server's MCP endpoint (default: the one recorded for the task; for list, a filter)"
    )
    _timeout_flag(task)
    tools = commands.add_parser("tools", help="list a server's tools")
    _connection_flags(tools)
    sign_in.add_commands(commands)


def _connection_flags(parser: argparse.ArgumentParser, *, url_help: str | None = None) -> None:
    if url_help is None:
        parser.add_argument("--url", default=DEFAULT_URL, help=f"the server's MCP endpoint (default {DEFAULT_URL})")
    else:  # no default: None says "look the task up in the record"
        parser.add_argument("--url", help=url_help)
    parser.add_argument("--token", help="bearer token sent as Authorization")
    parser.add_argument("--json", action="store_true", help="print the result as JSON and nothing else on stdout")
    parser.add_argument("--no-input", action="store_true", help="never ask questions (no elicitation declared)")
    sign_in.add_auth_flags(parser)


def _timeout_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="stop waiting after SECONDS (exit 2; a task goes on, its id printed)",
    )


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError("the timeout must be a positive number of seconds")
    return seconds


def parse_items(items: Sequence[str]) -> dict[str, Any]:
    """httpie's convention: ``key=value`` (a string) and ``key:=json`` (any JSON value)."""
    arguments: dict[str, Any] = {}
    for item in items:
        raw_key, json_sep, raw_json = item.partition(":=")
        if json_sep and "=" not in raw_key:
            try:
                arguments[raw_key] = json.loads(raw_json)
            except ValueError as exc:
                raise UsageError(f"{item!r}: the value after := is not JSON ({exc})") from None
            key = raw_key
        else:
            key, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"{item!r}: expected key=value or key:=json")
            arguments[key] = value
        if not key:
            raise UsageError(f"{item!r}: the argument has no name")
    return arguments


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run one client subcommand; its exit status."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    if args.command in ("login", "logout"):
        return _sign_in(args, err)
    console = Console(err, interactive=not args.json and err.isatty(), ask=not args.no_input and sys.stdin.isatty())
    try:
        if args.command == "task":
            if args.action == "list":
                return print_list(console, out, server=args.url, as_json=args.json)
            if args.task_id is None:
                raise UsageError(f"task {args.action} needs a TASK_ID")
            if args.url is None:
                args.url = server_of(args.task_id, console)
        # OTEL_* variables may turn tracing on: then the command is one trace, its requests CLIENT spans
        # whose context travels in their _meta (SEP-414).
        traced = tracing_setup.configure("ext-tasks-client")
        try:
            return asyncio.run(tracing.root_span(f"ext-tasks {_command_name(args)}", _run(args, console, out)))
        finally:
            if traced:
                tracing_setup.shutdown()
    except (UsageError, NotRecorded, sign_in.LoginUsageError, tracing_setup.TracingUnavailable) as exc:
        print(f"ext-tasks {args.command}: {exc}", file=err)
        return EXIT_USAGE


def _command_name(args: argparse.Namespace) -> str:
    """The command's span name: ``call TOOL``, ``task ACTION``, ``tools``."""
    if args.command == "call":
        return f"call {getattr(args, 'tool', '')}".strip()
    if args.command == "task":
        return f"task {args.action}"
    return str(args.command)


def _sign_in(args: argparse.Namespace, err: TextIO) -> int:
    command = sign_in.login if args.command == "login" else sign_in.logout
    try:
        return asyncio.run(command(args, err))
    except ClientError as exc:  # usage errors included
        print(f"ext-tasks {args.command}: {exc}", file=err)
        return EXIT_USAGE


async def _run(args: argparse.Namespace, console: Console, out: TextIO) -> int:
    arguments = parse_items(args.items) if args.command == "call" else {}
    recorder = Recorder(console, args.url, args.tool if args.command == "call" else None)
    if args.command == "task":
        recorder.picked_up(args.task_id)
    # A login may need a person: only when one is there to open the browser and come back.
    interactive = sys.stdin.isatty() and console.stream.isatty()
    async with contextlib.AsyncExitStack() as stack:
        oauth = sign_in.oauth_for(args, args.url, interactive=interactive)
        if oauth is not None:
            await stack.enter_async_context(oauth)
        client = await stack.enter_async_context(
            Client(
                args.url,
                token=args.token,
                auth=oauth,
                elicitation=console.elicit if console.ask else None,
                elicitation_modes=console.elicitation_modes,
            )
        )
        try:
            if args.command == "tools":
                return _print_tools(await client.list_tools(), out, as_json=args.json)
            if args.command == "task" and args.action == "get":
                async with within(args.timeout, args.task_id):
                    state = await client.task(args.task_id).status()
                recorder.seen(state, final=True)
                _print_json(state, out)
                return EXIT_OK
            if args.command == "task" and args.action == "cancel":
                async with within(args.timeout, args.task_id):
                    await client.task(args.task_id).cancel()
                console.say(f"cancellation of {args.task_id} requested")
                return EXIT_OK
            if args.command == "task":
                return await _follow(console, out, args, recorder, lambda: _started(client.task(args.task_id)))
            return await _follow(console, out, args, recorder, lambda: client.start_tool(args.tool, arguments))
        except TaskFailed as exc:
            console.say(f"task {exc.task_id} failed: {exc.message} (JSON-RPC {exc.code})")
            return EXIT_TOOL_ERROR
        except TaskCancelled as exc:
            console.say(f"task {exc.task_id} was cancelled")
            return EXIT_TOOL_ERROR
        except DeadlineExceeded as exc:
            console.say(f"error: {exc}")
            if exc.task_id is not None:
                console.say(f"follow it with: ext-tasks task wait {exc.task_id}")
                print(safe_text(exc.task_id), file=out)  # what a script needs to pick it up again
            return EXIT_USAGE
        except ClientError as exc:
            console.say(f"error: {exc}")
            return EXIT_USAGE
        finally:
            await recorder.close()


async def _started(handle: TaskHandle) -> TaskHandle:
    return handle


async def _follow(
    console: Console,
    out: TextIO,
    args: argparse.Namespace,
    recorder: Recorder,
    start: Callable[[], Awaitable[TaskHandle]],
) -> int:
    """Start (or pick up) the call, show its task while it runs, print the result (Ctrl-C: see
    :class:`_Interrupts`)."""
    waiting = asyncio.current_task()
    assert waiting is not None
    loop = asyncio.get_running_loop()
    interrupts = _Interrupts(console, waiting)
    loop.add_signal_handler(signal.SIGINT, interrupts.pressed)
    try:
        async with within(args.timeout) as deadline:  # DeadlineExceeded, not CancelledError: not a Ctrl-C
            interrupts.handle = await start()
            deadline.task_id = interrupts.handle.task_id
            await recorder.begin(interrupts.handle)
            if interrupts.handle.task_id is not None:
                console.started(interrupts.handle.task_id)
            result = await _wait_showing(console, interrupts.handle, recorder)
    except asyncio.CancelledError:
        return interrupts.stopped(out)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        console.done()
        if interrupts.handle is not None:
            recorder.seen(interrupts.handle.last, final=True)
        await interrupts.settle()
    if args.json:
        _print_json(result, out)
    else:
        console.print_result(result, out)
    return EXIT_TOOL_ERROR if result.get("isError") is True else EXIT_OK


class _Interrupts:
    """Ctrl-C while a call runs. Once: the task is cancelled on the server, after :data:`CANCEL_GRACE_S`
    (the time a second Ctrl-C has to change that). Twice: waiting stops and the task is left running,
    its id printed on stdout. Before a task exists, Ctrl-C just stops."""

    def __init__(self, console: Console, waiting: asyncio.Task[Any]) -> None:
        self._console = console
        self._waiting = waiting
        self.handle: TaskHandle | None = None
        self._pending: asyncio.TimerHandle | None = None
        self._sent = False
        self._accepted = False
        self._jobs: set[asyncio.Future[None]] = set()

    def pressed(self) -> None:
        task_id = self.handle.task_id if self.handle is not None else None
        if task_id is None or self._pending is not None:
            if self._pending is not None:
                self._pending.cancel()  # not sent yet, if within the grace: the task keeps running
            self._waiting.cancel()
            return
        self._console.say(f"cancelling task {task_id} (Ctrl-C again to leave it running)")
        self._pending = asyncio.get_running_loop().call_later(CANCEL_GRACE_S, self._send)

    def _send(self) -> None:
        assert self.handle is not None
        self._sent = True
        self._console.say(f"cancelling task {self.handle.task_id}")
        job = asyncio.ensure_future(self.handle.cancel())
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        job.add_done_callback(self._answered)

    def _answered(self, job: asyncio.Future[None]) -> None:
        failed = None if job.cancelled() else job.exception()
        if failed is not None:  # the task goes on: say so (a next Ctrl-C stops waiting and leaves it running)
            self._sent = False
            self._console.say(f"the cancellation was not accepted: {failed}")
            return
        self._accepted = True
        if self._console.prompting:
            # A question on the screen cannot be taken back (input() blocks its thread): the server has
            # the cancellation, so stop waiting for the answer instead.
            self._waiting.cancel()

    def stopped(self, out: TextIO) -> int:
        """The exit status once waiting was stopped, and what the person is told."""
        task_id = self.handle.task_id if self.handle is not None else None
        if task_id is None:
            return EXIT_LEFT_RUNNING
        if self._accepted:
            self._console.say(f"task {task_id} was cancelled (not waiting for it to settle)")
            return EXIT_TOOL_ERROR
        if self._sent:
            self._console.say(f"stopped waiting; the cancellation of task {task_id} was sent")
            return EXIT_TOOL_ERROR
        self._console.say(f"left task {task_id} running; follow it with: ext-tasks task wait {task_id}")
        print(safe_text(task_id), file=out)  # what a script needs to pick it up again
        return EXIT_LEFT_RUNNING

    async def settle(self) -> None:
        if self._jobs:
            await asyncio.wait(self._jobs, timeout=5)


async def _wait_showing(console: Console, handle: TaskHandle, recorder: Recorder) -> dict[str, Any]:
    if handle.task_id is None:
        return await handle.wait()
    watcher = asyncio.ensure_future(_show(console, handle, recorder))
    try:
        return await handle.wait()
    finally:
        watcher.cancel()


async def _show(console: Console, handle: TaskHandle, recorder: Recorder) -> None:
    """Refresh the status line from the handle's latest state (the elapsed time ticks on its own), and
    the task's entry in the record (a few times a minute at most)."""
    while True:
        console.status(handle.last)
        recorder.seen(handle.last)
        await asyncio.sleep(0.1)


def _print_tools(tools: list[dict[str, Any]], out: TextIO, *, as_json: bool) -> int:
    if as_json:
        _print_json(tools, out)
        return EXIT_OK
    names = [safe_text(tool.get("name", "")) for tool in tools]
    width = max(map(len, names), default=0)
    for name, tool in zip(names, tools, strict=True):
        # A description's further lines are indented under its first: none can pass for another tool.
        lines = safe_text(tool.get("description") or "", multiline=True).split("\n")
        print(f"{name:<{width}}  {lines[0]}".rstrip(), file=out)
        for line in lines[1:]:
            print(f"{'':<{width}}  {line}".rstrip(), file=out)
    return EXIT_OK


def _print_json(value: object, out: TextIO) -> None:
    print(safe_json(value), file=out)
