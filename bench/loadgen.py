"""The load generator: a small closed-loop HTTP/1.1 client on raw asyncio streams, run in its own process.

It reads one JSON *spec* on stdin and writes one JSON *result* on stdout, so the benchmark can start it
pinned to a CPU of its choosing (``taskset``) and account for its CPU time separately from the server's.
Each virtual user (VU) owns one keep-alive connection and runs its scenario in a loop:

``echo``
    ``POST /echo`` of a small JSON-RPC request (the Litestar echo baseline).
``mrtr``
    one MRTR round trip: ``tools/call`` (answers ``input_required`` with a ``requestState``), then the
    retry carrying ``inputResponses`` and the state (answers ``complete``). An *op* is the round trip;
    the latency recorded is the resume's (the second request's).
``replay``
    resumes only: each VU gets one ``requestState`` first, then sends the completing retry again and
    again (every retry is verified and completes: the per-request cost of a resume).
``tasks_get``
    ``tasks/get`` over a population of task ids given in the spec (round robin, each VU from its own
    offset).
``lifecycle`` / ``lifecycle_input``
    create a task (``tools/call`` of a ``task="required"`` tool), poll ``tasks/get`` every
    ``poll_ms`` until it ends; with ``_input`` the task first asks a question, which is answered with
    ``tasks/update``. Latency is create-sent -> terminal-seen (client side); the server's own
    ``lastUpdatedAt - createdAt`` is recorded too (``server_latency_ms``).
``populate``
    setup helper, not timed: create ``completed`` instant tasks (waiting until each is completed),
    then ``working`` hold tasks; the result lists their ids.

Timing: every loader process waits until the wall-clock ``start_at`` given in the spec, runs
``warmup_s`` untimed, then counts ops and latencies completing within the next ``seconds``. The
result carries the loader's own CPU time, so its overhead per request is reported alongside.

    echo '{"scenario": "echo", "port": 8000, "path": "/echo", "concurrency": 8, "seconds": 2}' \\
        | python -m bench.loadgen          # or: python -m bench.loadgen SPEC.json
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from ext_tasks.loadgen.http import REQUEST_TIMEOUT_S, Connection
from ext_tasks.loadgen.mcp import TASKS_EXTENSION, Failure, Mcp

CAPABILITIES: dict[str, Any] = {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}
ACCEPT_ANSWER = {"action": "accept", "content": {"confirm": True}}
#: Keep at most this many latency samples per process (uniform reservoir): enough for p99.
MAX_SAMPLES = 50_000
TERMINAL = frozenset({"completed", "failed", "cancelled"})

_encode = msgspec.json.Encoder().encode


#: The server answered something the scenario did not expect (the shared loader's failure).
ProtocolFailure = Failure


def _iso_ms(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000.0


@dataclass
class Tally:
    """What one loader process counted inside the timed window."""

    window: tuple[float, float] = (0.0, 0.0)
    ops: int = 0
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    server_latencies_ms: list[float] = field(default_factory=list)
    #: The lifecycle's create request alone (``tools/call`` sent -> ``CreateTaskResult`` read).
    create_latencies_ms: list[float] = field(default_factory=list)
    seen: int = 0

    def timed(self, at: float) -> bool:
        return self.window[0] <= at < self.window[1]

    def sample(self, into: list[float], value: float) -> None:
        # Reservoir sampling keeps the percentiles unbiased however long the run.
        if len(into) < MAX_SAMPLES:
            into.append(value)
            return
        slot = random.randrange(self.seen)
        if slot < MAX_SAMPLES:
            into[slot] = value

    def op(
        self,
        finished: float,
        latency_ms: float,
        requests: int,
        server_ms: float | None = None,
        create_ms: float | None = None,
    ) -> None:
        if not self.timed(finished):
            return
        self.ops += 1
        self.requests += requests
        self.seen += 1
        self.sample(self.latencies_ms, latency_ms)
        if server_ms is not None:
            self.sample(self.server_latencies_ms, server_ms)
        if create_ms is not None:
            self.sample(self.create_latencies_ms, create_ms)

    def error(self, at: float, exc: BaseException) -> None:
        if self.timed(at):
            self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])


Scenario = Callable[["Vu"], Awaitable[None]]


class Vu:
    """One virtual user: a connection, the request builder and the shared tally."""

    def __init__(self, spec: dict[str, Any], index: int, tally: Tally) -> None:
        self.spec = spec
        self.index = index
        self.tally = tally
        self.conn = Connection(spec.get("host", "127.0.0.1"), int(spec["port"]))
        self.mcp = Mcp(spec.get("path", "/mcp"), token=spec.get("token"), capabilities=CAPABILITIES)
        self.tool: str = spec.get("tool", "")
        self.poll_s = float(spec.get("poll_ms", 2.0)) / 1000.0
        self.state: Any = None

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.wait_for(self.mcp.call(self.conn, method, params), REQUEST_TIMEOUT_S)

    async def tool_call(self, tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return await self.call("tools/call", {"name": tool, "arguments": arguments, **extra})

    async def first_round(self) -> str:
        result = await self.tool_call(self.tool, {"item": f"vu{self.index}"})
        state = result.get("requestState")
        if result.get("resultType") != "input_required" or not isinstance(state, str):
            raise ProtocolFailure("protocol", f"expected input_required with a requestState, got {str(result)[:200]}")
        return state

    async def resume(self, state: str) -> None:
        result = await self.tool_call(
            self.tool, {"item": f"vu{self.index}"}, inputResponses={"confirm": ACCEPT_ANSWER}, requestState=state
        )
        if result.get("resultType", "complete") != "complete" or result.get("isError"):
            raise ProtocolFailure("protocol", f"the resume did not complete: {str(result)[:200]}")

    async def poll_until(self, task_id: str, wanted: frozenset[str]) -> tuple[dict[str, Any], int]:
        polls = 0
        while True:
            task = await self.call("tasks/get", {"taskId": task_id})
            polls += 1
            if task.get("status") in wanted:
                return task, polls
            if task.get("status") in TERMINAL:
                raise ProtocolFailure("protocol", f"task ended {task.get('status')}: {str(task)[:200]}")
            await asyncio.sleep(self.poll_s)


async def _echo(vu: Vu) -> None:
    started = time.perf_counter()
    headers = b"Content-Type: application/json\r\n"
    body = _encode({"jsonrpc": "2.0", "id": vu.index, "method": "echo", "params": {"vu": vu.index}})
    status, _, payload = await asyncio.wait_for(vu.conn.post(vu.mcp.path, headers, body), REQUEST_TIMEOUT_S)
    if status != 200 or b'"result"' not in payload:
        raise ProtocolFailure(f"HTTP {status}", f"echo: {payload[:200]!r}")
    now = time.perf_counter()
    vu.tally.op(now, (now - started) * 1000.0, 1)


async def _mrtr(vu: Vu) -> None:
    state = await vu.first_round()
    started = time.perf_counter()
    await vu.resume(state)
    now = time.perf_counter()
    vu.tally.op(now, (now - started) * 1000.0, 2)


async def _replay(vu: Vu) -> None:
    if vu.state is None:
        vu.state = await vu.first_round()
    started = time.perf_counter()
    await vu.resume(vu.state)
    now = time.perf_counter()
    vu.tally.op(now, (now - started) * 1000.0, 1)


async def _tasks_get(vu: Vu) -> None:
    ids: list[str] = vu.spec["task_ids"]
    if vu.state is None:
        vu.state = vu.index * max(1, len(ids) // max(1, int(vu.spec["concurrency"])))
    task_id = ids[vu.state % len(ids)]
    vu.state += 1
    started = time.perf_counter()
    task = await vu.call("tasks/get", {"taskId": task_id})
    if "status" not in task:
        raise ProtocolFailure("protocol", f"tasks/get without a status: {str(task)[:200]}")
    now = time.perf_counter()
    vu.tally.op(now, (now - started) * 1000.0, 1)


async def _lifecycle(vu: Vu, *, ask: bool) -> None:
    started = time.perf_counter()
    created = await vu.tool_call(vu.tool, {"label": f"vu{vu.index}"})
    create_ms = (time.perf_counter() - started) * 1000.0
    task_id = created.get("taskId")
    if created.get("resultType") != "task" or not isinstance(task_id, str):
        raise ProtocolFailure("protocol", f"expected a CreateTaskResult, got {str(created)[:200]}")
    requests = 1
    if ask:
        waiting, polls = await vu.poll_until(task_id, frozenset({"input_required"}))
        requests += polls
        keys = list(waiting.get("inputRequests") or {})
        if not keys:
            raise ProtocolFailure("protocol", "input_required without inputRequests")
        await vu.call("tasks/update", {"taskId": task_id, "inputResponses": dict.fromkeys(keys, ACCEPT_ANSWER)})
        requests += 1
    task, polls = await vu.poll_until(task_id, TERMINAL)
    now = time.perf_counter()
    if task.get("status") != "completed":
        raise ProtocolFailure("protocol", f"task ended {task.get('status')}")
    server_ms = _iso_ms(task["lastUpdatedAt"]) - _iso_ms(task["createdAt"])
    vu.tally.op(now, (now - started) * 1000.0, requests + polls, server_ms, create_ms)


SCENARIOS: dict[str, Scenario] = {
    "echo": _echo,
    "mrtr": _mrtr,
    "replay": _replay,
    "tasks_get": _tasks_get,
    "lifecycle": lambda vu: _lifecycle(vu, ask=False),
    "lifecycle_input": lambda vu: _lifecycle(vu, ask=True),
}


async def _run_vu(vu: Vu, scenario: Scenario, deadline: float) -> None:
    failures = 0
    while time.perf_counter() < deadline:
        try:
            await scenario(vu)
            failures = 0
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ProtocolFailure) as exc:
            vu.tally.error(time.perf_counter(), exc)
            vu.conn.close()  # a fresh connection for the next op
            vu.state = None if isinstance(exc, ProtocolFailure) and vu.spec["scenario"] == "replay" else vu.state
            failures += 1
            # Back off a little on repeated failures, so a dead server does not spin the loader.
            await asyncio.sleep(min(0.5, 0.01 * failures))


async def run_load(spec: dict[str, Any]) -> dict[str, Any]:
    scenario = SCENARIOS[spec["scenario"]]
    concurrency = int(spec["concurrency"])
    warmup_s = float(spec.get("warmup_s", 1.0))
    seconds = float(spec["seconds"])
    tally = Tally()
    vus = [Vu(spec, index, tally) for index in range(concurrency)]
    await asyncio.gather(*(vu.conn.open() for vu in vus))
    start_at = float(spec.get("start_at") or time.time())
    await asyncio.sleep(max(0.0, start_at - time.time()))
    begin = time.perf_counter()
    window_start = begin + warmup_s
    window_end = window_start + seconds
    tally.window = (window_start, window_end)
    cpu_at: dict[str, float] = {}

    async def cpu_marks() -> None:
        await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
        cpu_at["start"] = time.process_time()
        await asyncio.sleep(max(0.0, window_end - time.perf_counter()))
        cpu_at["end"] = time.process_time()

    marks = asyncio.create_task(cpu_marks())
    workers = [asyncio.create_task(_run_vu(vu, scenario, window_end)) for vu in vus]
    await marks
    # Whatever is still in flight at the end of the window is not counted: stop now.
    await asyncio.wait(workers, timeout=0.05)
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    for vu in vus:
        vu.conn.close()
    return {
        "scenario": spec["scenario"],
        "concurrency": concurrency,
        "elapsed_s": seconds,
        "ops": tally.ops,
        "requests": tally.requests,
        "errors": tally.errors,
        "error_samples": tally.error_samples,
        "loader_cpu_s": cpu_at.get("end", 0.0) - cpu_at.get("start", 0.0),
        "latencies_ms": [round(value, 4) for value in tally.latencies_ms],
        "server_latencies_ms": [round(value, 3) for value in tally.server_latencies_ms],
        "create_latencies_ms": [round(value, 4) for value in tally.create_latencies_ms],
    }


async def populate(spec: dict[str, Any]) -> dict[str, Any]:
    """Create ``completed`` instant tasks (each waited for), then ``working`` hold tasks."""
    vu = Vu({**spec, "poll_ms": 1.0}, 0, Tally())
    completed: list[str] = []
    working: list[str] = []
    deadline = time.perf_counter() + float(spec.get("timeout_s", 60.0))
    conns = [vu]
    batch = int(spec.get("batch", 16))
    conns += [Vu({**spec, "poll_ms": 1.0}, index, Tally()) for index in range(1, batch)]

    async def make(member: Vu, tool: str, arguments: dict[str, Any], finish: bool) -> str:
        created = await member.tool_call(tool, arguments)
        task_id = str(created["taskId"])
        if finish:
            await member.poll_until(task_id, TERMINAL)
        return task_id

    for tool, count, into, finish, arguments in (
        (spec.get("instant_tool", "instant"), int(spec.get("completed", 0)), completed, True, {"label": "p"}),
        (spec.get("hold_tool", "hold"), int(spec.get("working", 0)), working, False, {"seconds": 3000.0}),
    ):
        while len(into) < count:
            if time.perf_counter() > deadline:
                raise TimeoutError("populating the tasks took too long")
            size = min(batch, count - len(into))
            into += await asyncio.gather(*(make(conns[i], tool, arguments, finish) for i in range(size)))
    for member in conns:
        member.conn.close()
    return {"completed": completed, "working": working}


def main() -> int:
    text = sys.stdin.read() if len(sys.argv) < 2 or sys.argv[1] == "-" else Path(sys.argv[1]).read_text()
    spec = json.loads(text)
    runner = populate if spec["scenario"] == "populate" else run_load
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(runner(spec))
    else:
        result = uvloop.run(runner(spec))
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
