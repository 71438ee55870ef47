"""Figure 5: every buffer has a bound (issue 24, item 4), before (default 217690e) and after.

    python -m investigations.hardening fig5 [--spew-s 10] [--answer-mib 100] [--stall-wait-s 30]
                                   [--before REV|DIR] [--after REV|DIR] [--versions before after]

1. **Server, a client that never reads**: ``figtools.spew`` reports progress (1,000 characters each) as
   fast as it can for ``--spew-s`` seconds; a raw socket sends the request with a ``progressToken`` and
   never reads. The server's RSS (``/proc``) before, every second, and its peak.
2. **ext-tasks proxy against a hostile upstream** (``tests.support.hostile``, in this process): the
   proxy's peak RSS (VmHWM) while a ``--answer-mib`` JSON answer is asked for through it (the answer is
   read and thrown away here), and what it answers to a 307 with an empty body, an empty 502, a result
   nested 100,000 levels, and an upstream that never answers (waited for at most ``--stall-wait-s``; the
   proxy runs with ``EXT_TASKS_PROXY_READ_TIMEOUT_S=5``, which ``before`` does not know).
3. **The client** (``ext-tasks call`` of the checkout, in a child): its peak RSS (VmHWM) for a
   small answer and for the ``--answer-mib`` one, and its exit status.
4. **Polls a second** at ``pollIntervalMs: 0``: the checkout's ``Client`` follows a task that never ends
   (``subscriptions/listen`` refused) for 3 s; ``tasks/get`` requests counted at the hostile server.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from tests.support.hostile import HostileServer
from tests.support.memory import MEASURED_CLI, split_peak

from .figlib import Checkout, check_shadowing, modern_request, parser, rss_mib, run_figure, running_server, say

CHILD_TIMEOUT_S = 120.0
POLL_S = 3.0

_POLLS = """
import asyncio, sys
from ext_tasks.client import Client

async def main() -> None:
    async with Client(sys.argv[1]) as client:
        handle = await client.start_tool("forever")
        try:
            async with asyncio.timeout(float(sys.argv[2])):
                await handle.wait()
        except TimeoutError:
            pass

asyncio.run(main())
"""


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- 1. the server ------------------------------------------------------------------------------------


def spew(checkout: Checkout, work: Path, seconds: float) -> None:
    tag = f"[{checkout.label}/server]"
    headers, body = modern_request("tools/call", {"name": "spew", "arguments": {"seconds": seconds, "pad": 1000}})
    body["params"]["_meta"]["progressToken"] = "fig5"
    payload = json.dumps(body).encode()
    with running_server(checkout, work, env={"EXT_TASKS_LOG_LEVEL": "warning"}) as server:
        fields = {**headers, "Host": f"127.0.0.1:{server.port}", "Content-Length": str(len(payload))}
        head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
        baseline = rss_mib(server.pid)
        samples = []
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + payload)  # never read
            started = time.monotonic()
            for second in range(1, int(seconds) + 1):
                time.sleep(max(0.0, started + second - time.monotonic()))
                samples.append(round(rss_mib(server.pid), 1))
            peak = _peak_mib(server.pid)
    say(f"{tag} a client that never reads, {seconds:g} s of progress: RSS {baseline:.1f} MiB before, "
        f"each second {samples}, peak {peak:.1f} MiB (+{peak - baseline:.1f})")  # fmt: skip


# --- 2. the proxy -------------------------------------------------------------------------------------


@contextmanager
def running_proxy(checkout: Checkout, work: Path, upstream: str) -> Iterator[procs.Proc]:
    port = procs.free_port()
    command = [checkout.python, "-m", "ext_tasks.cli", "proxy", "--upstream", upstream, "--port", str(port)]
    env = checkout.env({"EXT_TASKS_LOG_LEVEL": "warning", "EXT_TASKS_PROXY_READ_TIMEOUT_S": "5"})
    log = work / "proxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work)
    proc = procs.Proc(f"proxy-{checkout.label}", process, log, port)
    try:
        procs.wait_http(proc, "/mcp", timeout_s=30)
        yield proc
    finally:
        proc.stop(timeout_s=10)


def _ask(port: int, tool: str, wait_s: float) -> dict[str, Any]:
    """One tools/call through the proxy: status, bytes of the answer (read and dropped), its start, seconds."""
    headers, body = modern_request("tools/call", {"name": tool, "arguments": {}})
    started = time.monotonic()
    outcome: dict[str, Any] = {}
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(10, read=wait_s)) as client,
            client.stream("POST", f"http://127.0.0.1:{port}/mcp", headers=headers, json=body) as response,
        ):
            size, start = 0, b""
            for chunk in response.iter_raw():
                start = start or chunk[:160]
                size += len(chunk)
            outcome.update(status=response.status_code, bytes=size, body=start.decode(errors="replace"))
    except httpx.TimeoutException:
        outcome["status"] = f"no answer within {wait_s:g} s"
    outcome["seconds"] = round(time.monotonic() - started, 2)
    return outcome


def proxy(checkout: Checkout, work: Path, hostile: HostileServer, answer_mib: int, stall_wait_s: float) -> None:
    tag = f"[{checkout.label}/proxy]"
    with running_proxy(checkout, work, hostile.url) as proxied:
        baseline = rss_mib(proxied.pid)
        huge = _ask(proxied.port, "huge", 60)
        peak = _peak_mib(proxied.pid)
        say(f"{tag} {answer_mib} MiB answer: HTTP {huge['status']}, {huge['bytes']:,} bytes relayed in "
            f"{huge['seconds']} s; proxy RSS {baseline:.1f} MiB before, peak {peak:.1f} MiB")  # fmt: skip
        for tool in ("redirect", "empty-502", "deep"):
            outcome = _ask(proxied.port, tool, 60)
            say(f"{tag} {tool}: HTTP {outcome['status']} {outcome['body'][:150]!r}")
        stall = _ask(proxied.port, "stall", stall_wait_s)
        say(f"{tag} upstream never answers: {stall['status']} after {stall['seconds']} s")


# --- 3. and 4. the client -----------------------------------------------------------------------------


def _cli(checkout: Checkout, work: Path, *args: str) -> tuple[int, float, str]:
    done = subprocess.run(
        [checkout.python, "-c", MEASURED_CLI, *args], env=checkout.env(), cwd=work, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    stderr, peak = split_peak(done.stderr)
    return done.returncode, peak, stderr.replace("\n", " | ")[-160:]


def client(checkout: Checkout, work: Path, hostile: HostileServer, answer_mib: int) -> None:
    tag = f"[{checkout.label}/client]"
    status, small, _ = _cli(checkout, work, "call", "ok", "--url", hostile.url)
    say(f"{tag} ext-tasks call, a small answer: exit {status}, peak RSS {small:.1f} MiB")
    status, peak, said = _cli(checkout, work, "call", "huge", "--url", hostile.url, "--json")
    say(f"{tag} ext-tasks call, a {answer_mib} MiB answer: exit {status}, peak RSS {peak:.1f} MiB; {said!r}")
    before = hostile.count("tasks/get")
    subprocess.run(
        [checkout.python, "-c", _POLLS, hostile.url, str(POLL_S)], env=checkout.env(), cwd=work,
        capture_output=True, timeout=CHILD_TIMEOUT_S, check=True,
    )  # fmt: skip
    polls = hostile.count("tasks/get") - before
    say(f"{tag} pollIntervalMs 0: {polls} tasks/get in {POLL_S:g} s ({polls / POLL_S:.1f}/s)")


def run(checkout: Checkout, root: Path, args: argparse.Namespace) -> None:
    work = root / f"fig5-{checkout.label}"
    work.mkdir(parents=True, exist_ok=True)
    say(checkout.label, "imports:", check_shadowing(checkout, work))
    spew(checkout, work, args.spew_s)
    with HostileServer(huge_bytes=args.answer_mib * 1024 * 1024) as hostile:
        proxy(checkout, work, hostile, args.answer_mib, args.stall_wait_s)
        client(checkout, work, hostile, args.answer_mib)


def build_parser() -> argparse.ArgumentParser:
    p = parser("fig5", __doc__ or "")
    p.set_defaults(before="217690e")
    p.add_argument("--spew-s", type=float, default=10.0, help="seconds of progress (default %(default)s)")
    p.add_argument("--answer-mib", type=int, default=100, help="the huge answer's size (default %(default)s)")
    p.add_argument("--stall-wait-s", type=float, default=30.0, help="longest wait on a stall (default %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_figure(build_parser(), argv, run)


if __name__ == "__main__":
    raise SystemExit(main())
