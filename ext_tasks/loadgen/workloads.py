"""What one operation of each workload is, against any 2026-07-28 server.

* ``call``: one ``tools/call`` (a floor for that server; a task answer counts like a result).
* ``mrtr``: a full multi round-trip: ``tools/call`` -> ``input_required`` -> the retry with answers
  filled from each request's schema and the ``requestState`` echoed -> ``complete``.
* ``replay``: the completing retry, sent again and again (the per-resume cost: it needs a server that
  accepts a state more than once; one that does not answers each replay with an error, counted).
* ``tasks-get``: ``tasks/get`` over a population of tasks created before the run.
* ``lifecycle``: create a task, poll it at its advertised ``pollIntervalMs`` (or a fixed interval) to
  its end, answering its questions with ``tasks/update``.

An operation returns how many requests it sent, or raises :class:`~.mcp.Failure`. It may leave named
durations of its own in ``vu.marks`` (seconds), recorded beside its latency. A ``completed``
result with ``isError``, and a task that ends ``failed`` or ``cancelled``, are failures of the
operation (the server answered, the work did not succeed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final

from .http import REQUEST_TIMEOUT_S, Connection
from .mcp import Failure, Mcp, answers_for

TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
MAX_ROUNDS: Final = 16
#: The poll interval when a task suggests none.
DEFAULT_POLL_S: Final = 1.0


class Vu:
    """One virtual user: its own connection, and what its workload keeps between operations."""

    def __init__(self, mcp: Mcp, host: str, port: int, spec: dict[str, Any], index: int) -> None:
        self.mcp = mcp
        self.conn = Connection(host, port)
        self.spec = spec
        self.index = index
        self.tool: str = spec.get("tool") or ""
        self.arguments: dict[str, Any] = dict(spec.get("arguments") or {})
        #: replay: the completing retry's params; tasks-get: the next task's position.
        self.resume: dict[str, Any] | None = None
        self.cursor = index * 7919
        #: The operation's own durations (seconds, by name), taken by the loader after each operation.
        self.marks: dict[str, float] = {}
        #: When the latest request was sent (``latency_from: "last"`` measures an operation from there).
        self.last_sent = 0.0

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.last_sent = time.perf_counter()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                return await self.mcp.call(self.conn, method, params)
        except TimeoutError:
            self.conn.close()  # its answer may still come: the connection cannot carry another request
            raise Failure("timeout", f"{method}: no answer within {REQUEST_TIMEOUT_S:g}s") from None

    def tool_params(self, **extra: Any) -> dict[str, Any]:
        return {"name": self.tool, "arguments": dict(self.arguments), **extra}


def _failed_result(result: dict[str, Any]) -> None:
    if result.get("isError") is True:
        text = " ".join(str(item.get("text", "")) for item in result.get("content") or () if isinstance(item, dict))
        raise Failure("isError", text or "a result with isError")


async def call_op(vu: Vu) -> int:
    result = await vu.call("tools/call", vu.tool_params())
    _failed_result(result)
    return 1


async def _rounds(vu: Vu) -> tuple[dict[str, Any], int, dict[str, Any] | None]:
    """``tools/call`` until it completes: the result, the requests sent, and the last retry's params."""
    params = vu.tool_params()
    retry: dict[str, Any] | None = None
    for sent in range(1, MAX_ROUNDS + 1):
        result = await vu.call("tools/call", params)
        kind = result.get("resultType", "complete")
        if kind != "input_required":
            if kind != "complete":
                raise Failure("protocol", f"tools/call answered resultType {kind!r}")
            return result, sent, retry
        params = vu.tool_params()
        if result.get("inputRequests"):
            params["inputResponses"] = answers_for(result["inputRequests"])
        if isinstance(result.get("requestState"), str):
            params["requestState"] = result["requestState"]
        retry = dict(params)
    raise Failure("protocol", f"still input_required after {MAX_ROUNDS} rounds")


async def mrtr_op(vu: Vu) -> int:
    result, sent, retry = await _rounds(vu)
    if retry is None:
        raise Failure("protocol", f"{vu.tool} answered without input_required: not a multi round-trip tool")
    _failed_result(result)
    return sent


async def replay_op(vu: Vu) -> int:
    sent = 0
    if vu.resume is None:  # once per connection: the rounds up to the completing retry
        _, sent, retry = await _rounds(vu)
        if retry is None:
            raise Failure("protocol", f"{vu.tool} answered without input_required: nothing to replay")
        vu.resume = retry
    result = await vu.call("tools/call", dict(vu.resume))
    if result.get("resultType", "complete") != "complete":
        raise Failure("protocol", f"a replayed retry answered resultType {result.get('resultType')!r}")
    _failed_result(result)
    return sent + 1


async def tasks_get_op(vu: Vu) -> int:
    ids: list[str] = vu.spec["task_ids"]
    task_id = ids[vu.cursor % len(ids)]
    vu.cursor += 1
    state = await vu.call("tasks/get", {"taskId": task_id})
    if not isinstance(state.get("status"), str):
        raise Failure("protocol", f"tasks/get without a status: {str(state)[:200]}")
    return 1


async def lifecycle_op(vu: Vu) -> int:
    created = await vu.call("tools/call", vu.tool_params())
    create_s = time.perf_counter() - vu.last_sent
    if created.get("resultType") != "task" or not isinstance(created.get("taskId"), str):
        raise Failure("protocol", f"{vu.tool} answered without a task: {str(created)[:160]}")
    task_id: str = created["taskId"]
    fixed = vu.spec.get("poll_ms")
    # poll_first: the first tasks/get right after the create answer (the bench's instant tasks), not a pause later.
    pause_next = not vu.spec.get("poll_first")
    state, sent = created, 1
    answered: set[str] = set()
    while state.get("status") not in TERMINAL:
        if pause_next:
            await asyncio.sleep(fixed / 1000.0 if fixed is not None else _advertised_s(state))
        pause_next = True
        state = await vu.call("tasks/get", {"taskId": task_id})
        sent += 1
        if state.get("status") == "input_required":
            outstanding = {k: v for k, v in (state.get("inputRequests") or {}).items() if k not in answered}
            if outstanding:
                await vu.call("tasks/update", {"taskId": task_id, "inputResponses": answers_for(outstanding)})
                answered.update(outstanding)
                sent += 1
    if state["status"] != "completed":
        error = state.get("error") or {}
        raise Failure(f"task {state['status']}", str(error.get("message", state.get("statusMessage", ""))))
    _failed_result(state.get("result") or {})
    vu.marks["create"] = create_s
    with contextlib.suppress(KeyError, TypeError, ValueError):  # timestamps are optional: no server figure then
        vu.marks["server"] = _instant(state["lastUpdatedAt"]) - _instant(state["createdAt"])
    return sent


def _instant(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _advertised_s(state: dict[str, Any]) -> float:
    interval = state.get("pollIntervalMs")
    if isinstance(interval, int | float) and not isinstance(interval, bool) and interval >= 0:
        return float(interval) / 1000.0
    return DEFAULT_POLL_S


#: The echo floor's request: a small JSON-RPC request object (the bench's Litestar echo decodes it).
ECHO_BODY: Final = b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"vu":1}}'


async def echo_op(vu: Vu) -> int:
    """A JSON-RPC request to an echo server (the self-check's, or the bench's floor): a result must come back."""
    status, _, payload = await vu.conn.post(vu.mcp.path, b"Content-Type: application/json\r\n", ECHO_BODY)
    if status != 200 or b'"result"' not in payload:
        raise Failure(f"HTTP {status}", repr(payload[:100]))
    return 1


Operation = Callable[[Vu], Awaitable[int]]
WORKLOADS: Final[dict[str, Operation]] = {
    "call": call_op,
    "mrtr": mrtr_op,
    "replay": replay_op,
    "tasks-get": tasks_get_op,
    "lifecycle": lifecycle_op,
    "echo": echo_op,
}
