"""Running a benchmark's steps: the setup a workload needs, then each step in ``processes`` loader
processes at once, their progress read live and their histograms merged exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from ..client import Client, ClientError
from ..protocol.outbound import header_params_of
from .record import Merged

#: Between the last loader reporting ready and the common start: time to hand each its start line.
_START_LEAD_S: Final = 0.2
#: How long a loader process may take to start (interpreter, imports).
_READY_TIMEOUT_S: Final = 60.0
_POPULATE_AT_ONCE: Final = 16


class BenchError(Exception):
    """The benchmark cannot run as asked (a bad URL, a tool that is not there or does not fit)."""


@dataclass
class Plan:
    url: str
    workload: str
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    token: str | None = None
    concurrency: tuple[int, ...] = (16,)
    rates: tuple[float, ...] = ()
    duration_s: float = 10.0
    warmup_s: float = 2.0
    processes: int = 1
    population: int = 100
    poll_ms: float | None = None

    @property
    def open_loop(self) -> bool:
        return bool(self.rates)

    def levels(self) -> list[float]:
        return list(self.rates) if self.open_loop else [float(c) for c in self.concurrency]


Progress = Callable[[str, float, int, int], None]


@dataclass
class StepResult:
    label: str
    level: float
    merged: Merged
    loader_cpu_s: float

    def to_json(self) -> dict[str, Any]:
        return {"step": self.label, "level": self.level, "loader_cpu_s": self.loader_cpu_s, **self.merged.summary()}


async def prepare(plan: Plan) -> dict[str, Any]:
    """What every loader needs to know before the run: where to send, the tool's headers, and for
    ``tasks-get`` the ids of the tasks to poll (created here with ``--tool``)."""
    parts = urlsplit(plan.url)
    if parts.scheme != "http" or not parts.hostname:
        raise BenchError(f"--url must be an http:// URL (TLS is not supported by the loader): {plan.url!r}")
    base: dict[str, Any] = {
        "workload": plan.workload,
        "host": parts.hostname,
        "port": parts.port or 80,
        "path": parts.path or "/",
        "token": plan.token,
        "tool": plan.tool,
        "arguments": plan.arguments,
        "poll_ms": plan.poll_ms,
    }
    if plan.workload == "echo":
        return base
    async with Client(plan.url, token=plan.token) as client:
        try:
            tools = await client.list_tools()
        except ClientError as exc:
            raise BenchError(f"tools/list failed: {exc}") from None
        names = {str(tool.get("name")) for tool in tools}
        if plan.tool not in names:
            raise BenchError(f"the server has no tool {plan.tool!r} (it has: {', '.join(sorted(names))})")
        base["header_params"] = {str(tool["name"]): header_params_of(tool) for tool in tools}
        if plan.workload == "tasks-get":
            base["task_ids"] = await _population(client, plan)
    return base


async def _population(client: Client, plan: Plan) -> list[str]:
    assert plan.tool is not None
    ids: list[str] = []
    while len(ids) < plan.population:
        size = min(_POPULATE_AT_ONCE, plan.population - len(ids))
        try:
            handles = await asyncio.gather(*(client.start_tool(plan.tool, plan.arguments) for _ in range(size)))
        except ClientError as exc:
            raise BenchError(f"creating the tasks to poll failed: {exc}") from None
        for handle in handles:
            if handle.task_id is None:
                raise BenchError(f"{plan.tool} answered inline: tasks-get needs a tool that runs as a task")
            ids.append(handle.task_id)
    return ids


async def run_step(
    plan: Plan,
    base: dict[str, Any],
    level: float,
    progress: Progress | None,
    *,
    command_prefix: tuple[str, ...] = (),
    on_start: Callable[[float], None] | None = None,
) -> StepResult:
    """One step in ``plan.processes`` loader processes, each started under ``command_prefix`` (the bench:
    ``taskset -c 0``); ``on_start`` gets the wall-clock start of the warm-up, once every loader is ready."""
    label = f"rate {level:g}/s" if plan.open_loop else f"c={int(level)}"
    processes = max(1, min(plan.processes, int(level)) if not plan.open_loop else plan.processes)
    specs = []
    for index in range(processes):
        spec = {**base, "warmup_s": plan.warmup_s, "duration_s": plan.duration_s}
        if plan.open_loop:
            # Each loader sends every processes-th operation of one schedule: offsets interleave them.
            spec |= {"rate": level / processes, "offset_s": index / level}
        else:
            spec["concurrency"] = int(level) // processes + (1 if index < int(level) % processes else 0)
        specs.append(spec)
    loaders = [await _Loader.start(spec, command_prefix) for spec in specs]
    try:
        await asyncio.gather(*(loader.ready() for loader in loaders))
        start_at = time.time() + _START_LEAD_S
        for loader in loaders:
            loader.go(start_at)
        if on_start is not None:
            on_start(start_at)
        total_s = _START_LEAD_S + plan.warmup_s + plan.duration_s

        def seen() -> None:
            if progress is not None:
                done = min(1.0, max(0.0, time.time() - start_at + _START_LEAD_S) / total_s)
                progress(label, done, sum(loader.ops for loader in loaders), sum(loader.errors for loader in loaders))

        results = await asyncio.gather(*(loader.result(seen) for loader in loaders))
    finally:
        for loader in loaders:
            await loader.stop()
    merged = Merged(plan.duration_s)
    for part in results:
        merged.add(part)
    return StepResult(label, level, merged, sum(float(part["loader_cpu_s"]) for part in results))


class _Loader:
    """One loader process of a step (``python -m ext_tasks.loadgen.driver``), spoken to in JSON lines."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self.ops = 0
        self.errors = 0

    @classmethod
    async def start(cls, spec: dict[str, Any], command_prefix: tuple[str, ...] = ()) -> _Loader:
        process = await asyncio.create_subprocess_exec(
            *command_prefix, sys.executable, "-m", "ext_tasks.loadgen.driver",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        loader = cls(process)
        loader._send(spec)
        return loader

    def _send(self, line: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(line).encode() + b"\n")

    async def _line(self) -> dict[str, Any] | None:
        assert self._process.stdout is not None
        raw = await self._process.stdout.readline()
        if not raw:
            return None
        line: dict[str, Any] = json.loads(raw)
        return line

    async def ready(self) -> None:
        if await asyncio.wait_for(self._line(), _READY_TIMEOUT_S) is None:
            raise BenchError(f"a loader process did not start:\n{await self._problems()}")

    def go(self, start_at: float) -> None:
        self._send({"start_at": start_at})

    async def result(self, seen: Callable[[], None]) -> dict[str, Any]:
        while (line := await self._line()) is not None:
            if "progress" in line:
                self.ops, self.errors = int(line["progress"]), int(line["errors"])
                seen()
            elif "result" in line:
                result: dict[str, Any] = line["result"]
                return result
        raise BenchError(f"a loader process exited without a result:\n{await self._problems()}")

    async def _problems(self) -> str:
        assert self._process.stderr is not None
        return (await self._process.stderr.read()).decode(errors="replace")[-2000:]

    async def stop(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        await self._process.wait()
