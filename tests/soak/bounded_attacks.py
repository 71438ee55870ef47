"""The hostile soak's attacks on what a request may make a server hold (issue 24), each answered as
documented for the whole run:

- **unread inline streams**: a ``tools/call`` of ``spew`` (progress as fast as it can, with a
  ``progressToken``) on a raw connection that reads nothing for ``UNREAD_S``, then only the response
  head (200 ``text/event-stream``), and goes away: the server's buffer for it is bounded;
- **large task arguments**: a task creation with arguments over ``EXT_TASKS_MAX_TASK_ARGUMENT_BYTES``:
  HTTP 413, -32602 with ``data.argumentBytes``;
- **large answers**: a task asks (``confirm_delete``), and ``tasks/update`` answers with more than
  ``EXT_TASKS_MAX_ANSWER_BYTES``: HTTP 413, -32602 with ``data.answerBytes``; the task is then cancelled;
- **a loud status**: a task sets a 1,000,000-character status message; ``tasks/get`` shows at most
  1,024 characters of it;
- **a legacy task's lifetime**: a 2025-11-25 task-augmented call with ``ttl`` 10**15 that the tool
  answers inline (the shim keeps a task of its own): the task's ``ttl`` is at most the maximum;
- **costly listens** from another principal (``flooder``), from ``FLOODERS`` connections sent again as
  soon as answered (``Retry-After`` ignored): acknowledged (200) or refused by the principal's budget
  (HTTP 429, -31429, ``data.limit`` ``"pacing"``, ``Retry-After``), never anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import Counter
from collections.abc import Coroutine, Mapping
from typing import Any

import httpx

from ext_tasks.protocol.errors import INVALID_PARAMS, LIMIT_EXCEEDED
from ext_tasks.protocol.tasks import MAX_STATUS_CHARS
from tests.support.mcp_http import modern_request, parse_reply
from tests.support.processes import ServerProcess

SOAK_TOKEN = "soak-token"
FLOOD_TOKEN = "flood-token"
TOKENS = f"{SOAK_TOKEN}=soak,{FLOOD_TOKEN}=flooder"
AUTH = {"Authorization": f"Bearer {SOAK_TOKEN}"}
CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
UNREAD_S = 2.0
OVER_BOUND = 300_000  # characters: over the 256 KiB default of task arguments and of answers
LOUD_STATUS = 1_000_000
MAX_TTL_MS = 86_400_000  # EXT_TASKS_TASK_MAX_TTL_MS's default
FLOODERS = 8
LISTEN_IDS = 1000
PAUSE_S = 0.5
ANSWER_TIMEOUT_S = 30.0
LEGACY = "2025-11-25"


def _head(port: int, headers: Mapping[str, str], body: bytes) -> bytes:
    lines = ["POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join([*lines, f"Content-Length: {len(body)}"]) + "\r\n\r\n").encode("latin-1") + body


class BoundedAttacks:
    def __init__(self, servers: list[ServerProcess], stop: asyncio.Event) -> None:
        self.servers = servers
        self.stop = stop
        self.outcomes: Counter[str] = Counter()
        self.surprises: list[str] = []
        self._turn = itertools.cycle(servers)

    def url(self) -> str:
        return next(self._turn).url

    def surprise(self, kind: str, detail: object) -> None:
        self.surprises.append(f"{kind}: {str(detail)[:400]}")

    def clients(self) -> list[Coroutine[Any, Any, None]]:
        return [
            self.unread_streams(),
            self.large_arguments(),
            self.large_answers(),
            self.loud_status(),
            self.legacy_lifetime(),
            *(self.costly_listens() for _ in range(FLOODERS)),
        ]

    async def paced(self) -> bool:
        """Wait ``PAUSE_S`` (less if the run stops); whether to go on."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), PAUSE_S)
        return not self.stop.is_set()

    async def call(self, client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        headers, body = modern_request(method, params, capabilities=CAPS)
        response = await client.post(self.url(), headers={**headers, **AUTH}, json=body)
        return response.status_code, parse_reply(response)

    # --- what each attack expects ------------------------------------------------------------------

    async def unread_streams(self) -> None:
        headers, body = modern_request(
            "tools/call",
            {"name": "spew", "arguments": {"seconds": UNREAD_S * 2}, "_meta": {"progressToken": "soak"}},
            capabilities=CAPS,
        )
        raw = json.dumps(body).encode()
        while not self.stop.is_set():
            server = next(self._turn)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            except OSError as exc:
                self.surprise("unread stream", f"connect: {exc!r}")
                continue
            try:
                writer.write(_head(server.port, {**headers, **AUTH}, raw))
                await writer.drain()
                await asyncio.sleep(UNREAD_S)  # the tool reports all this while; nothing is read
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_TIMEOUT_S)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                self.surprise("unread stream", repr(exc))
                continue
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            if head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head.lower():
                self.outcomes["inline streams left unread"] += 1
            else:
                self.surprise("unread stream", head)

    async def large_arguments(self) -> None:
        async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S) as client:
            while await self.paced():
                arguments = {"blob": "x" * OVER_BOUND}
                status, message = await self.call(client, "tools/call", {"name": "keep", "arguments": arguments})
                data = message.get("error", {}).get("data") or {}
                if (
                    status == 413
                    and message["error"]["code"] == INVALID_PARAMS
                    and data.get("argumentBytes", 0) > OVER_BOUND
                ):
                    self.outcomes["task arguments over the bound refused"] += 1
                else:
                    self.surprise("large arguments", f"HTTP {status} {message}")

    async def large_answers(self) -> None:
        async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S) as client:
            while await self.paced():
                _, created = await self.call(
                    client, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "f"}}
                )
                task_id = created.get("result", {}).get("taskId")
                waiting = await self.poll(client, task_id, "input_required")
                keys = list(waiting.get("inputRequests", {}))
                if not keys:
                    self.surprise("large answers", waiting)
                    continue
                answer = {"action": "accept", "content": {"confirm": True, "pad": "y" * OVER_BOUND}}
                status, message = await self.call(
                    client, "tasks/update", {"taskId": task_id, "inputResponses": {keys[0]: answer}}
                )
                data = message.get("error", {}).get("data") or {}
                if (
                    status == 413
                    and message["error"]["code"] == INVALID_PARAMS
                    and data.get("answerBytes", 0) > OVER_BOUND
                ):
                    self.outcomes["answers over the bound refused"] += 1
                else:
                    self.surprise("large answers", f"HTTP {status} {message}")
                _, cancelled = await self.call(client, "tasks/cancel", {"taskId": task_id})
                if "result" not in cancelled:
                    self.surprise("large answers: cancel", cancelled)

    async def loud_status(self) -> None:
        async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S) as client:
            while await self.paced():
                _, created = await self.call(
                    client, "tools/call", {"name": "chatter", "arguments": {"size": LOUD_STATUS}}
                )
                done = await self.poll(client, created.get("result", {}).get("taskId"), "completed")
                shown = done.get("statusMessage", "")
                if done.get("status") == "completed" and len(shown) == MAX_STATUS_CHARS and shown.endswith("…"):
                    self.outcomes["loud status messages cut"] += 1
                else:
                    self.surprise("loud status", {**done, "statusMessage": f"{len(shown)} characters"})

    async def poll(self, client: httpx.AsyncClient, task_id: object, wanted: str) -> dict[str, Any]:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while time.monotonic() < deadline:
            _, message = await self.call(client, "tasks/get", {"taskId": task_id})
            task: dict[str, Any] = message.get("result", {})
            if task.get("status") == wanted or not task:
                return task or message
            await asyncio.sleep(0.05)
        return {"status": "timed out"}

    async def legacy_lifetime(self) -> None:
        async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S, headers=AUTH) as client:
            params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "ttl", "version": "0"}}
            init = await client.post(
                self.url(), json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
            )
            session = {"Mcp-Session-Id": init.headers.get("mcp-session-id", ""), "MCP-Protocol-Version": LEGACY}
            call = {"name": "instant", "arguments": {}, "task": {"ttl": 10**15}}
            while await self.paced():
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
                created = parse_reply(await client.post(self.url(), headers=session, json=body))
                task = created.get("result", {}).get("task", {})
                if 0 < task.get("ttl", 0) <= MAX_TTL_MS:
                    self.outcomes["legacy lifetimes capped"] += 1
                else:
                    self.surprise("legacy lifetime", created)

    async def costly_listens(self) -> None:
        ids = [f"bd.{index:024d}" for index in range(LISTEN_IDS)]
        headers, body = modern_request("subscriptions/listen", {"notifications": {"taskIds": ids}}, capabilities=CAPS)
        headers["Authorization"] = f"Bearer {FLOOD_TOKEN}"
        raw = json.dumps(body).encode()
        async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT_S) as client:
            while not self.stop.is_set():
                async with client.stream("POST", self.url(), headers=headers, content=raw) as response:
                    if response.status_code == 200:
                        self.outcomes["costly listens acknowledged"] += 1
                        continue  # closed at once: the acknowledgement is all a flooder wants
                    error = json.loads(await response.aread()).get("error", {})
                    paced = error.get("code") == LIMIT_EXCEEDED and (error.get("data") or {}).get("limit") == "pacing"
                    if response.status_code == 429 and paced and response.headers.get("retry-after", "").isdigit():
                        self.outcomes["costly listens paced (429)"] += 1
                    else:
                        self.surprise("costly listen", f"HTTP {response.status_code} {error}")

    @staticmethod
    def expected_kinds() -> list[str]:
        return [
            "inline streams left unread",
            "task arguments over the bound refused",
            "answers over the bound refused",
            "loud status messages cut",
            "legacy lifetimes capped",
            "costly listens acknowledged",
            "costly listens paced (429)",
        ]
