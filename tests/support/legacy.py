"""A hand-driven 2025-11-25 session and SSE readers, for tests that talk the wire to real servers.

::

    session = Session(server.url)                     # initialize; session.initialized is its result
    task_id = session.call("tools/call", {"name": "slow", "arguments": {}, "task": {}})["result"]["task"]["taskId"]
    stream = Stream(session)                          # the session's GET stream, read in a thread
    stream.next_notification()                        # ... or next_request(), final.get(), close()

    listen = SseReader(url, "POST", headers, body)    # any streamed request (e.g. subscriptions/listen)

A reader thread sees its stop flag only when a line arrives (a blocked httpx read cannot be interrupted
from another thread), so servers under test should send keep-alives often (``EXT_TASKS_KEEPALIVE_S``);
:func:`close_all` drops many streams in one keep-alive interval instead of one after the other.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

LEGACY_VERSION = "2025-11-25"
WAIT_S = 15.0


class Session:
    """A hand-driven 2025-11-25 session; requests go to ``urls`` in turn (one server, or instances).
    ``token``: sent as ``Authorization: Bearer``."""

    def __init__(
        self,
        *urls: str,
        token: str | None = None,
        capabilities: Mapping[str, Any] | None = None,
        client_name: str = "get-stream-test",
    ) -> None:
        self.urls = urls
        self._turn = 0
        auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
        self.auth = auth
        self.client = httpx.Client(timeout=10.0, headers={"Accept": "application/json, text/event-stream", **auth})
        init = {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": dict(capabilities) if capabilities is not None else {"elicitation": {}},
            "clientInfo": {"name": client_name, "version": "1"},
        }
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
        response = self.client.post(self.next_url(), json=body)
        assert response.status_code == 200, response.text
        self.initialized: dict[str, Any] = response.json()["result"]
        self.session_id: str = response.headers["mcp-session-id"]
        self.headers = {**auth, "Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": LEGACY_VERSION}
        self.ids = iter(range(1, 10_000))

    def next_url(self) -> str:
        self._turn += 1
        return self.urls[self._turn % len(self.urls)]

    def body(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": dict(params)}

    def post(self, method: str, params: Mapping[str, Any]) -> httpx.Response:
        return self.client.post(self.next_url(), json=self.body(method, params), headers=self.headers)

    def call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = self.post(method, params).json()
        return message

    def start_task(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """``tools/call`` with ``params.task``: the new task's id."""
        created = self.call("tools/call", {"name": tool, "arguments": dict(arguments), "task": {}})
        assert "result" in created, created
        task_id: str = created["result"]["task"]["taskId"]
        return task_id

    def start_confirm_delete(self, filename: str) -> str:
        return self.start_task("confirm_delete", {"filename": filename})

    def answer(self, request: dict[str, Any], confirm: bool = True) -> None:
        response = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"action": "accept", "content": {"confirm": confirm}},
        }
        reply = self.client.post(self.next_url(), json=response, headers=self.headers)
        assert reply.status_code == 202, reply.text

    def status(self, task_id: str) -> str:
        status: str = self.call("tasks/get", {"taskId": task_id})["result"]["status"]
        return status

    def close(self) -> None:
        self.client.close()


class SseReader:
    """One HTTP request whose answer is read in a thread: an SSE stream (each server→client request lands
    in ``requests``, each notification in ``notifications``, the final response in ``final``), or a JSON
    answer given at once (in ``final``). ``status`` and ``response_headers`` are set when the answer
    starts. With ``wait=True`` the constructor returns once the answer began: the first line of a stream
    (a GET stream's first line comes once its subscriptions are live), or the JSON answer."""

    def __init__(
        self,
        url: str,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        body: dict[str, Any] | None = None,
        *,
        wait: bool = True,
    ) -> None:
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        self.notifications: queue.Queue[dict[str, Any]] = queue.Queue()
        self.final: queue.Queue[dict[str, Any]] = queue.Queue()
        self.status: int | None = None
        self.response_headers: httpx.Headers | None = None
        self.opened = threading.Event()
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(10.0, read=30.0))
        request_headers = {"Accept": "text/event-stream, application/json", **(headers or {})}
        self._thread = threading.Thread(target=self._read, args=(url, method, request_headers, body), daemon=True)
        self._thread.start()
        assert not wait or self.ready.wait(WAIT_S), "the stream did not open"

    @property
    def streaming(self) -> bool:
        return self.opened.is_set()

    def _read(self, url: str, method: str, headers: dict[str, str], body: dict[str, Any] | None) -> None:
        try:
            with (
                contextlib.suppress(httpx.TransportError, RuntimeError),  # (closed from the test's thread)
                self._client.stream(method, url, headers=headers, json=body) as response,
            ):
                self.status, self.response_headers = response.status_code, response.headers
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    self.final.put(json.loads(response.read()))  # answered at once, without a stream
                    return
                for line in response.iter_lines():
                    self.opened.set()
                    self.ready.set()
                    if self._stop.is_set():
                        return
                    if not line.startswith("data:"):
                        continue
                    message = json.loads(line[5:])
                    if "method" in message and "id" in message:
                        self.requests.put(message)
                    elif "method" in message:
                        self.notifications.put(message)
                    elif "id" in message:
                        self.final.put(message)
        finally:
            self.ready.set()

    def next_request(self, timeout_s: float = WAIT_S) -> dict[str, Any]:
        return self.requests.get(timeout=timeout_s)

    def next_notification(self, timeout_s: float = WAIT_S) -> dict[str, Any]:
        return self.notifications.get(timeout=timeout_s)

    def no_request_within(self, seconds: float) -> bool:
        try:
            self.requests.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def begin_close(self) -> None:
        """Ask the reader to drop the connection at its next line (see :meth:`close`)."""
        self._stop.set()

    def close(self) -> None:
        """Drop the connection, as a client that goes away does."""
        self.begin_close()
        self._client.close()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive()


class Stream(SseReader):
    """A streamed request of ``session``: its GET stream by default, or a POST of ``body`` (a waiting
    ``tasks/result`` sends nothing, not even its headers, until it has something to say, so a POST is
    not waited for)."""

    def __init__(self, session: Session, method: str = "GET", body: dict[str, Any] | None = None) -> None:
        super().__init__(session.next_url(), method, session.headers, body, wait=method != "POST")


def close_all(streams: Iterable[SseReader]) -> None:
    """Drop every stream, all within one keep-alive interval."""
    streams = list(streams)
    for stream in streams:
        stream.begin_close()
    for stream in streams:
        stream.close()
