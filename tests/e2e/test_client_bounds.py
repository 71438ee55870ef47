"""The client and ``ext-tasks call`` against a hostile server (``tests.support.hostile``, a real HTTP server
on loopback): an answer too large is a typed error read only up to the limit, a deadline bounds a whole
call (naming the task it leaves running), and a server asking for polls every 0 ms gets ten a second.

Memory is measured in a child process (its peak RSS, VmHWM, at exit), where this test's own allocations
do not count.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ext_tasks.client import Client, ClientError, DeadlineExceeded, ResponseTooLarge
from tests.support.hostile import HostileServer
from tests.support.memory import MEASURED_CLI, split_peak
from tests.support.processes import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TIMEOUT_S = 60
#: What reading a 48 MiB answer may cost a client capped at 16 MiB (its default), over a small answer.
GROWTH_BOUND_MIB = 40.0

#: Run in a child: one call_tool through the library, capped at 1 MiB; what it raised, and how much its
#: peak RSS (VmHWM) grew meanwhile, as JSON.
_MEASURED_CALL = """
import asyncio, json, sys
from ext_tasks.client import Client

def peak() -> float:
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    return int(hwm.split()[1]) / 1024

async def main() -> None:
    async with Client(sys.argv[1], max_response_bytes=1024 * 1024) as client:
        await client.call_tool("ok")
        before = peak()
        try:
            await client.call_tool(sys.argv[2])
            raised = None
        except Exception as exc:
            raised = type(exc).__name__
    print(json.dumps({"raised": raised, "growth_mib": peak() - before}))

asyncio.run(main())
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer(huge_bytes=48 * 1024 * 1024) as server:
        yield server


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``ext-tasks`` (stdin closed, no terminal): the outcome, and the child's peak RSS in MiB."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURED_CLI, *args],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    stderr, peak = split_peak(done.stderr)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr), peak


@pytest.mark.parametrize("tool", ["huge", "endless-line", "endless-event"])
def test_an_answer_too_large_is_a_typed_error_read_only_up_to_the_limit(hostile: HostileServer, tool: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED_CALL, hostile.url, tool],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout)
    print(f"{tool}: {outcome}")
    assert outcome["raised"] == "ResponseTooLarge"
    assert outcome["growth_mib"] < 8, "a 1 MiB limit, and 48 MiB (or an endless line) read"
    assert issubclass(ResponseTooLarge, ClientError)


def test_the_cli_says_the_answer_is_too_large_and_stays_small(hostile: HostileServer) -> None:
    small, small_peak = _cli("call", "ok", "--url", hostile.url)
    assert small.returncode == 0, small.stderr
    huge, huge_peak = _cli("call", "huge", "--url", hostile.url)
    print(f"peak RSS: {small_peak:.1f} MiB for a small answer, {huge_peak:.1f} MiB for a 48 MiB one")
    assert huge.returncode == 2 and huge.stdout == ""
    assert "larger than 16777216 bytes" in huge.stderr
    assert huge_peak - small_peak < GROWTH_BOUND_MIB


def test_timeout_leaves_the_task_running_and_names_it(hostile: HostileServer) -> None:
    polls_before = hostile.count("tasks/get")
    started = time.monotonic()
    done, _ = _cli("call", "forever", "--url", hostile.url, "--timeout", "2")
    took = time.monotonic() - started
    polls = hostile.count("tasks/get") - polls_before
    print(f"call --timeout 2: exit {done.returncode} after {took:.1f}s, {polls} polls; {done.stderr!r}")
    assert done.returncode == 2
    assert "no result within 2 s (task t-forever is still running)" in done.stderr
    assert "ext-tasks task wait t-forever" in done.stderr
    assert done.stdout == "t-forever\n"
    assert took < 2 + 8  # the interpreter's start included
    assert polls <= 2 / 0.1 + 3, "pollIntervalMs 0 asks for polls as fast as the network answers"

    waited, _ = _cli("task", "wait", "t-forever", "--url", hostile.url, "--timeout", "1")
    assert waited.returncode == 2 and waited.stdout == "t-forever\n"
    assert "no result within 1 s (task t-forever is still running)" in waited.stderr

    stalled, _ = _cli("call", "stall", "--url", hostile.url, "--timeout", "1")
    assert stalled.returncode == 2 and stalled.stdout == ""
    assert "no result within 1 s (no task was created)" in stalled.stderr

    unanswered, _ = _cli("task", "cancel", "t-forever", "--url", hostile.url, "--timeout", "1")
    assert unanswered.returncode == 2 and unanswered.stdout == "t-forever\n"
    assert "no result within 1 s" in unanswered.stderr


async def test_polls_are_at_most_ten_a_second_whatever_the_server_says(hostile: HostileServer) -> None:
    async with Client(hostile.url) as client:
        handle = await client.start_tool("forever")
        before = hostile.count("tasks/get")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await handle.wait()
        polls = hostile.count("tasks/get") - before
    print(f"{polls} polls in 2 s at pollIntervalMs 0")
    assert 2 <= polls <= 2 / 0.1 + 2


async def test_a_deadline_bounds_a_whole_call(hostile: HostileServer) -> None:
    async with Client(hostile.url) as client:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded) as exceeded:
            await client.call_tool("forever", deadline_s=1)
        assert exceeded.value.task_id == "t-forever" and isinstance(exceeded.value, TimeoutError)
        with pytest.raises(DeadlineExceeded) as stalled:
            await client.call_tool("stall", deadline_s=1)
        assert stalled.value.task_id is None
    assert time.monotonic() - started < 1 + 1 + 2
