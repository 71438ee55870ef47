"""A mixed load for failover tests that behaves as a careful client does: a request answered "retry
later" (HTTP 502/503/504) or dropped is resent, creations with the same idempotency key; every task is
followed to its end, answering input and cancelling as it goes.

What it counts: tasks acknowledged (a creation answered with a ``taskId``), tasks later answered
"Task not found" (**lost**), and the final status of each. Every ``tasks/get`` answer goes into the
shared :class:`~tests.support.history.History`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.history import TERMINAL, History
from tests.support.mcp_http import post

CAPABILITIES: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
IDEMPOTENCY_KEY = "dev.ext-tasks/idempotencyKey"
#: How long one request may keep being resent (a promotion takes a few seconds).
RESEND_FOR_S = 45.0
FOLLOW_FOR_S = 60.0
RETRY_LATER = frozenset({502, 503, 504})


class NotFound(Exception):
    """The server answered "Task not found" about a task it had acknowledged."""


@dataclass
class FailoverLoad:
    url: str
    history: History = field(default_factory=History)
    resends: int = 0
    retry_later: Counter[int] = field(default_factory=Counter)
    acknowledged: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: Set once ``_half`` creations were acknowledged (``run`` acts then).
    _halfway: threading.Event = field(default_factory=threading.Event)
    _half: int = 0

    # --- one request, resent while the answer is "retry later" ---------------------------------------

    def request(
        self, client: httpx.Client, method: str, params: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        deadline = time.monotonic() + RESEND_FOR_S
        while True:
            try:
                response, message = post(client, self.url, method, params, capabilities=CAPABILITIES, extra_meta=meta)
            except httpx.TransportError:
                status = 0
            else:
                if response.status_code not in RETRY_LATER:
                    assert response.status_code in (200, 400, 404), f"{method}: HTTP {response.status_code}"
                    return message
                status = response.status_code
            with self._lock:
                self.resends += 1
                self.retry_later[status] += 1
            assert time.monotonic() < deadline, f"{method} {params}: still 'retry later' after {RESEND_FOR_S}s"
            time.sleep(0.1)

    def create(self, client: httpx.Client, tool: str, arguments: Mapping[str, Any]) -> str:
        key = uuid.uuid4().hex  # one key per creation, resent with every retry
        message = self.request(
            client, "tools/call", {"name": tool, "arguments": dict(arguments)}, {IDEMPOTENCY_KEY: key}
        )
        assert "result" in message, message
        assert message["result"]["resultType"] == "task", message
        task_id: str = message["result"]["taskId"]
        self.history.acknowledged(task_id)
        with self._lock:
            self.acknowledged.append(task_id)
            if len(self.acknowledged) >= self._half:
                self._halfway.set()
        return task_id

    def get(self, client: httpx.Client, task_id: str) -> dict[str, Any]:
        sent = self.history.now()
        message = self.request(client, "tasks/get", {"taskId": task_id})
        self.history.answered(task_id, sent, message)
        if "error" in message and "not found" in str(message["error"].get("message", "")).lower():
            raise NotFound(task_id)
        assert "result" in message, message
        task: dict[str, Any] = message["result"]
        return task

    # --- tasks followed to their end ---------------------------------------------------------------

    def one_task(self, client: httpx.Client, number: int) -> None:
        asks = number % 4 == 1
        cancels = not asks and number % 5 == 2
        if asks:
            task_id = self.create(client, "ask_then_finish", {"label": f"task {number}"})
        else:
            task_id = self.create(client, "journaled", {"seconds": 3.0 if cancels else 0.3})
        answered = cancelled = False
        expected = {"cancelled"} if cancels else {"completed"}
        deadline = time.monotonic() + FOLLOW_FOR_S
        try:
            while True:
                task = self.get(client, task_id)
                status = task["status"]
                if status in TERMINAL:
                    break
                if status == "input_required" and not answered:
                    # An answer whose first sending went through is refused when resent: read again.
                    responses = {"name": {"action": "accept", "content": {"name": "Ada"}}}
                    self.request(client, "tasks/update", {"taskId": task_id, "inputResponses": responses})
                    answered = True
                elif cancels and not cancelled and status == "working":
                    # Acknowledged, the cancel is final; refused (the task ended while the resends were
                    # "retry later"), the task may have completed first.
                    cancelled = "result" in self.request(client, "tasks/cancel", {"taskId": task_id})
                assert time.monotonic() < deadline, f"{task_id} still {status} after {FOLLOW_FOR_S}s"
                time.sleep(0.05)
        except NotFound:
            with self._lock:
                self.lost.append(task_id)
            return
        if cancels and not cancelled:
            expected.add("completed")
        with self._lock:
            self.outcomes[task_id] = "expected" if status in expected else status

    def run(self, clients: int, tasks: int, halfway: Callable[[], object]) -> None:
        """``tasks`` tasks over ``clients`` threads; ``halfway()`` runs once half were acknowledged."""
        numbers = iter(range(tasks))
        numbers_lock = threading.Lock()

        def client_loop() -> None:
            with httpx.Client(timeout=15.0) as client:
                while True:
                    with numbers_lock:
                        number = next(numbers, None)
                    if number is None:
                        return
                    try:
                        self.one_task(client, number)
                    except (AssertionError, httpx.HTTPError) as exc:
                        with self._lock:
                            self.errors.append(f"task {number}: {type(exc).__name__}: {exc}")

        self._half = tasks // 2
        threads = [threading.Thread(target=client_loop, name=f"failover-client-{index}") for index in range(clients)]
        for thread in threads:
            thread.start()
        reached = self._halfway.wait(RESEND_FOR_S)
        assert reached, f"only {len(self.acknowledged)} acknowledged: {self.errors[:3]}"
        halfway()
        for thread in threads:
            thread.join(timeout=RESEND_FOR_S + FOLLOW_FOR_S + 30)
            assert not thread.is_alive(), "a client thread did not finish"

    @staticmethod
    def overlapping_runs(journal: Path) -> list[str]:
        """Tasks that ran twice at the same time, from the ``journaled`` tool's journal."""
        lines = journal.read_text().splitlines()
        assert lines, f"nothing journaled in {journal}"
        runs: dict[str, list[tuple[str, float]]] = {}
        for line in lines:
            what, task_id, _pid, at = line.split()
            runs.setdefault(task_id, []).append((what, float(at)))
        found = []
        for task_id, notes in runs.items():
            running = 0
            for what, _ in sorted(notes, key=lambda note: note[1]):
                running += 1 if what == "start" else -1
                if running > 1:
                    found.append(task_id)
                    break
        return found

    def summary(self) -> str:
        unexpected = {task_id: status for task_id, status in self.outcomes.items() if status != "expected"}
        return (
            f"{len(self.acknowledged)} acknowledged, {len(self.lost)} lost, {len(self.outcomes)} ended "
            f"({len(unexpected)} not as expected: {unexpected}), {self.resends} resends {dict(self.retry_later)}"
        )
