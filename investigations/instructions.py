"""Instructions a request costs the ASGI app alone: an MRTR resume and a ``tasks/get`` through ext-tasks'
app against the Litestar echo app fed the resume's body, counted by callgrind (valgrind).

On a shared VM, requests/s and CPU time per request swing by 20 % from one round to the next; the number
of instructions a request executes does not (it repeats to within about 1 %). This measures the
protocol's own cost in that unit, without an HTTP server, a loader or a network in the way:

    python -m investigations.instructions [--requests 1000]

Each mode runs in its own ``valgrind --tool=callgrind`` process: ``idle`` builds both apps, checks the
resume completes and a task can be polled, warms every path up, then stops; ``resume``, ``poll``
(``tasks/get`` of a completed task, in memory) and ``echo`` do the same and then ``--requests`` more
requests. Instructions per request are a mode's total minus ``idle``'s, divided
by the count. Needs valgrind (``apt install valgrind``); the HTTP stack's share is in ``python -m bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import msgspec

MODES: Final = ("idle", "resume", "poll", "echo")
WARM_UP: Final = 200
_HOST: Final = (b"host", b"127.0.0.1:3001")

Asgi = Callable[..., Awaitable[None]]


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [_HOST, *headers], "scheme": "http", "server": ("127.0.0.1", 3001),
            "client": ("127.0.0.1", 50000), "http_version": "1.1", "root_path": "", "asgi": {"version": "3.0"},
            "state": {}}  # fmt: skip


async def _request(app: Asgi, scope: dict[str, Any], body: bytes) -> bytes:
    """One request through ``app``; the body of its answer."""
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays: the app never needs a second message
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return bytes(sent[-1]["body"])


def _headers_of(block: bytes) -> list[tuple[bytes, bytes]]:
    pairs = (line.split(b": ", 1) for line in block.split(b"\r\n") if line)
    return [(name.lower(), value) for name, value in pairs]


async def drive(mode: str, requests: int) -> None:
    """Build both apps, check a resume completes, warm both up, then send ``requests`` of ``mode``."""
    from bench.echo_app import create_app as echo_app
    from ext_tasks.compose import serve_app
    from ext_tasks.config import Settings
    from ext_tasks.loadgen.mcp import Mcp, answers_for

    runtime, app = serve_app(Settings(tools="bench.tools", state_keys=("A" * 43,)))
    await runtime.start()
    try:
        mcp = Mcp("/mcp")
        head, body = mcp.request("tools/call", {"name": "ask_once", "arguments": {"item": "x"}})
        first = msgspec.json.decode(await _request(app, _scope("/mcp", _headers_of(head)), body))["result"]
        assert first["resultType"] == "input_required", first
        retry = {"name": "ask_once", "arguments": {"item": "x"}, "requestState": first["requestState"],
                 "inputResponses": answers_for(first["inputRequests"])}  # fmt: skip
        head, body = mcp.request("tools/call", retry)
        resume = _scope("/mcp", _headers_of(head))
        answer = msgspec.json.decode(await _request(app, resume, body))
        assert answer.get("result", {}).get("resultType") == "complete", answer
        poll, poll_body = await _completed_task_poll(app, mcp)
        echo, echo_scope = echo_app(), _scope("/echo", [(b"content-type", b"application/json")])
        for _ in range(WARM_UP):
            await _request(app, resume, body)
            await _request(app, poll, poll_body)
            await _request(echo, echo_scope, body)  # the resume's own body: the same bytes to decode
        target, scope, sent = {"resume": (app, resume, body), "poll": (app, poll, poll_body)}.get(
            mode, (echo, echo_scope, body)
        )
        for _ in range(requests if mode != "idle" else 0):
            await _request(target, scope, sent)
    finally:
        await runtime.stop()


async def _completed_task_poll(app: Asgi, mcp: Any) -> tuple[dict[str, Any], bytes]:
    """The scope and body of a ``tasks/get`` of a task that has completed (``instant``, awaited)."""
    head, body = mcp.request("tools/call", {"name": "instant", "arguments": {"label": "x"}})
    created = msgspec.json.decode(await _request(app, _scope("/mcp", _headers_of(head)), body))["result"]
    assert created["resultType"] == "task", created
    head, body = mcp.request("tasks/get", {"taskId": created["taskId"]})
    scope = _scope("/mcp", _headers_of(head))
    async with asyncio.timeout(10):
        # Polling tasks/get is how a client learns a task is done.
        while (msgspec.json.decode(await _request(app, scope, body))["result"]["status"]) != "completed":  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    return scope, body


def _count(mode: str, requests: int) -> int:
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
               "investigations.instructions", "--drive", mode, "--requests", str(requests)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{mode}: valgrind failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m investigations.instructions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--requests", type=int, default=1000, help="requests counted per mode (default 1000)")
    parser.add_argument("--drive", choices=MODES, help=argparse.SUPPRESS)  # one mode, inside valgrind
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    if args.drive is not None:
        import uvloop

        uvloop.run(drive(args.drive, args.requests))
        return 0
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt install valgrind)")
    idle = _count("idle", args.requests)
    resume, poll, echo = ((_count(mode, args.requests) - idle) / args.requests for mode in MODES[1:])
    print(f"MRTR resume through ext-tasks' app: {resume:9,.0f} instructions a request")
    print(f"tasks/get (completed, in memory):   {poll:9,.0f} instructions a request")
    print(f"Litestar echo app, resume's body:   {echo:9,.0f} instructions a request")
    print(f"a resume's protocol cost:           {resume - echo:9,.0f} instructions a request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
