"""One loader process: one step of one workload, closed or open loop, for a timed window.

* **Closed loop** (``concurrency``): each virtual user sends its next operation when the previous one
  is answered. Latency is measured from the send.
* **Open loop** (``rate``): operations start on a fixed schedule whatever the server does, each on an
  idle connection (a new one if none is idle), and latency is measured from the *scheduled* start, so a
  server that stalls shows it in the percentiles instead of slowing the loader down with it (the
  coordinated-omission correction of wrk2).

It reads one JSON spec line on stdin and answers ``{"ready": true}``; then it reads ``{"start_at": T}``
(the same wall-clock start for every loader of a step, so their windows coincide), prints a progress
line (``{"progress": ops, "errors": n}``) every half second, and ends with ``{"result": ...}``: the
counts and the encoded histogram of the window.

    python -m ext_tasks.loadgen.driver      # spec line, then start line, on stdin
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Final

from .mcp import Failure, Mcp
from .record import Recorder
from .workloads import WORKLOADS, Operation, Vu

#: Connections one open-loop loader may hold at once; a schedule needing more counts as loader errors.
MAX_OPEN_CONNECTIONS: Final = 2048
_PROGRESS_EVERY_S: Final = 0.5
_LOST: Final = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


def _failure_key(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, Failure):
        return exc.key, exc.sample
    return "connection", f"{type(exc).__name__}: {exc}"[:300]


class Step:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.operation: Operation = WORKLOADS[spec["workload"]]
        self.mcp = Mcp(spec["path"], token=spec.get("token"), header_params=spec.get("header_params"))
        self.recorder = Recorder()
        self._made = 0
        #: "last": an operation's latency runs from its last request's send (the bench: a resume alone).
        self._from_last = spec.get("latency_from") == "last"

    def new_vu(self) -> Vu:
        self._made += 1
        return Vu(self.mcp, self.spec["host"], int(self.spec["port"]), self.spec, self._made)

    async def _one(self, vu: Vu, started: float) -> bool:
        """One operation; True when it succeeded."""
        try:
            requests = await self.operation(vu)
        except (Failure, *_LOST) as exc:
            key, sample = _failure_key(exc)
            self.recorder.error(time.perf_counter(), key, sample)
            vu.conn.close()  # a fresh connection (and state) for the next operation
            vu.resume = None
            return False
        now = time.perf_counter()
        self.recorder.op(now, now - (vu.last_sent if self._from_last else started), requests, vu.marks)
        vu.marks = {}
        return True

    async def closed(self, concurrency: int, end: float) -> None:
        async def user(vu: Vu) -> None:
            failures = 0
            while time.perf_counter() < end:
                if await self._one(vu, time.perf_counter()):
                    failures = 0
                else:  # a dead server must not spin the loader
                    failures += 1
                    await asyncio.sleep(min(0.5, 0.01 * failures))

        await asyncio.gather(*(user(self.new_vu()) for _ in range(concurrency)))

    async def open(self, rate: float, begin: float, end: float, offset: float) -> None:
        idle: list[Vu] = []
        running: set[asyncio.Task[None]] = set()
        busy = 0

        async def scheduled(vu: Vu, at: float) -> None:
            nonlocal busy
            try:
                await self._one(vu, at)
            finally:
                busy -= 1
                idle.append(vu)

        interval = 1.0 / rate
        index = 0
        while True:
            at = begin + offset + index * interval
            if at >= end:
                break
            index += 1
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if not idle and busy >= MAX_OPEN_CONNECTIONS:
                self.recorder.error(time.perf_counter(), "loader: out of connections", f"{busy} in flight")
                continue
            vu = idle.pop() if idle else self.new_vu()
            busy += 1
            task = asyncio.create_task(scheduled(vu, at))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.wait(running, timeout=max(0.0, end - time.perf_counter()) + 0.05)

    async def run(self) -> dict[str, Any]:
        spec = self.spec
        await asyncio.sleep(max(0.0, float(spec.get("start_at") or 0.0) - time.time()))
        begin = time.perf_counter()
        window_start = begin + float(spec["warmup_s"])
        window_end = window_start + float(spec["duration_s"])
        self.recorder.window = (window_start, window_end)
        progress = asyncio.create_task(self._progress())
        cpu = asyncio.create_task(self._window_cpu(window_start, window_end))
        if spec.get("rate"):
            work = self.open(float(spec["rate"]), begin, window_end, float(spec.get("offset_s", 0.0)))
        else:
            work = self.closed(int(spec["concurrency"]), window_end)
        loops = asyncio.ensure_future(work)
        await asyncio.wait([loops], timeout=max(0.0, window_end - time.perf_counter()) + 0.1)
        loops.cancel()  # whatever is still in flight after the window is not counted
        await asyncio.gather(loops, return_exceptions=True)
        progress.cancel()
        return {**self.recorder.to_json(), "loader_cpu_s": await cpu}

    @staticmethod
    async def _window_cpu(start: float, end: float) -> float:
        """The loader's CPU seconds inside the timed window (the warm-up's excluded), read at its edges."""
        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        begin = time.process_time()
        await asyncio.sleep(max(0.0, end - time.perf_counter()))
        return time.process_time() - begin

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(_PROGRESS_EVERY_S)
            line = {"progress": self.recorder.seen_ops, "errors": self.recorder.seen_errors}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()


def main() -> int:
    spec = json.loads(sys.stdin.readline())
    # Ready (interpreter up, modules imported): the parent sends the common start once every loader is.
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    spec["start_at"] = json.loads(sys.stdin.readline())["start_at"]
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(Step(spec).run())
    else:
        result = uvloop.run(Step(spec).run())
    sys.stdout.write(json.dumps({"result": result}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
