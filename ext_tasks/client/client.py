"""An async client for 2026-07-28 servers with the Tasks extension (this one or any other).

::

    async with Client("http://127.0.0.1:3001/mcp", elicitation=ask_user) as client:
        result = await client.call_tool("deploy", {"service": "billing", "ref": "v1.2"})

        handle = await client.start_tool("deploy", {"service": "billing", "ref": "v1.3"})
        async for state in handle.updates():
            print(state["status"], state.get("statusMessage", ""))
        result = await handle.wait()

``call_tool`` follows everything between the call and its result: multi round-trip input
(``input_required``: answered by the callbacks, the call sent again with ``inputResponses`` and the
``requestState`` echoed byte for byte), a task (followed to its end; its questions answered with
``tasks/update``), and lost answers (resent, with the call's idempotency key, so a task is created once).
Every request carries the per-request ``_meta`` and the SEP-2243 headers the transport asks for.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Final

import httpx

from .. import answers, tracing
from ..protocol.envelope import META_IDEMPOTENCY_KEY
from ..protocol.outbound import InvalidHeaderAnnotation, header_params_of, mirror_headers
from ..protocol.versions import META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN_VERSIONS
from .errors import ClientError, InvalidResponse, UnsupportedVersion
from .inputs import Elicit, InputHandlers, Roots, Sample
from .tasks import LISTEN_QUIET_S, TaskHandle, within
from .transport import Notify, RetryPolicy, Transport

CLIENT_INFO: Final = {"name": "ext-tasks-client", "version": "0.1.0"}
#: How many ``input_required`` rounds one call may take before the client gives up on the server.
MAX_ROUNDS: Final = 32


class Client:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        elicitation: Elicit | None = None,
        elicitation_modes: Collection[str] = ("form",),
        sampling: Sample | None = None,
        roots: Roots | None = None,
        tasks: bool = True,
        listen: bool = True,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        client_info: Mapping[str, Any] | None = None,
        on_notification: Notify | None = None,
        http: httpx.AsyncClient | None = None,
        max_response_bytes: int = answers.DEFAULT_LIMIT,
        auth: httpx.Auth | None = None,
    ) -> None:
        """``token``: sent as ``Authorization: Bearer``. ``elicitation``, ``sampling``, ``roots``: answer
        the server's input requests (and declare those capabilities); ``elicitation_modes``: the modes the
        ``elicitation`` callback handles (``"form"``, ``"url"``): a request in another mode is declined
        without calling it. ``tasks``: declare the Tasks
        extension. ``listen``: follow tasks with ``subscriptions/listen`` where offered (else: poll).
        ``timeout_s``: per request (a request that times out is resent). ``on_notification``: progress
        and log notifications sent while a request runs. ``http``: an httpx client to share (not closed
        here). ``max_response_bytes``: the largest answer read, a JSON body or one event of a stream
        (16 MiB by default); a larger one raises :class:`ResponseTooLarge`. A whole call is bounded by
        the ``deadline_s`` of :meth:`call_tool` and :meth:`TaskHandle.wait`. ``auth``: an ``httpx.Auth``
        for every request, such as :class:`ext_tasks.client.oauth.OAuth` (OAuth 2.1: discovery, login,
        refresh, step-up); given to the httpx client built here (with ``http=``, set it there instead)."""
        self.inputs = InputHandlers(elicitation, sampling, roots, tasks, frozenset(elicitation_modes))
        self.listen = listen
        self._own_http = http is None
        if http is not None and auth is not None:
            raise ValueError("auth= applies to the httpx client built here: with http=, give it auth= itself")
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), auth=auth)
        extra = dict(headers or {})
        if token is not None:
            extra["Authorization"] = f"Bearer {token}"
        self._transport = Transport(
            url,
            self._http,
            headers=extra,
            retry=retry,
            on_notification=on_notification,
            max_response_bytes=max_response_bytes,
        )
        self._client_info = dict(client_info or CLIENT_INFO)
        self._version = MODERN_VERSIONS[0]
        #: Each tool's ``Mcp-Param-*`` headers (header name -> argument), from ``tools/list``; or why
        #: its annotations cannot be followed.
        self._tool_headers: dict[str, dict[str, str] | InvalidHeaderAnnotation] | None = None
        #: Tools the last listing left out: name -> what is wrong with their header annotations.
        self.refused_tools: dict[str, str] = {}

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    # --- one request --------------------------------------------------------------------------------

    def _meta(self, idempotency_key: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            META_PROTOCOL_VERSION: self._version,
            META_CLIENT_CAPABILITIES: self.inputs.capabilities(),
            META_CLIENT_INFO: self._client_info,
        }
        if idempotency_key is not None:
            meta[META_IDEMPOTENCY_KEY] = idempotency_key
        # SEP-414: the current trace context (this client's span, or the application's), if any.
        tracing.inject(meta)
        return meta

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        header_params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request (``_meta`` and headers added, resent while its answer is lost): its ``result``.
        With tracing configured in this process (``ext_tasks.tracing``), a ``CLIENT`` span."""
        tracer = tracing.active()
        if tracer is None:
            return await self._request(method, params, idempotency_key, header_params)
        started = tracing.client_span(tracer, method, params or {})
        try:
            return await tracing.within(started.span, self._request(method, params, idempotency_key, header_params))
        finally:
            started.span.end()

    async def _request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        idempotency_key: str | None,
        header_params: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        body = dict(params or {})
        for last_try in (False, True):
            body["_meta"] = self._meta(idempotency_key)
            headers = mirror_headers(self._version, method, body, header_params or {})
            try:
                return await self._transport.request(method, body, headers)
            except UnsupportedVersion as refused:
                # Once per request: speak the revision the server lists that this client prefers (the one
                # just sent too: a server may refuse a request before it knows what it speaks).
                chosen = next((version for version in MODERN_VERSIONS if version in refused.supported), None)
                if last_try or chosen is None:
                    raise
                self._version = chosen
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def listen_tasks(self, task_ids: list[str]) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A ``subscriptions/listen`` stream for ``task_ids``: its acknowledgement, then task states."""
        params = {"notifications": {"taskIds": task_ids}, "_meta": self._meta()}
        headers = mirror_headers(self._version, "subscriptions/listen", params, {})
        async with self._transport.listen(params, headers, quiet_s=LISTEN_QUIET_S) as notifications:
            yield notifications

    # --- what callers use ------------------------------------------------------------------------------

    async def discover(self) -> dict[str, Any]:
        """``server/discover``: versions, capabilities (``extensions`` among them), server info."""
        return await self.request("server/discover")

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool, following ``nextCursor``, schemas as the server wrote them. Tools whose
        ``x-mcp-header`` annotations are invalid are left out (and refused by ``call_tool``); why is in
        :attr:`refused_tools`."""
        tools = await self._listing("tools/list", "tools")
        self._tool_headers = {str(tool.get("name")): _headers_or_error(tool) for tool in tools}
        self.refused_tools = {
            name: str(found) for name, found in self._tool_headers.items() if isinstance(found, InvalidHeaderAnnotation)
        }
        # A tool whose headers cannot be followed is not offered (SEP-2243: the client rejects it).
        return [tool for tool in tools if str(tool.get("name")) not in self.refused_tools]

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        """Run a tool to its end: the final ``CallToolResult`` (``isError`` results included).

        Raises :class:`TaskFailed` / :class:`TaskCancelled` when the task ends so, :class:`RpcError`
        subclasses for refusals, :class:`TransportError` when no answer came after the resends,
        :class:`DeadlineExceeded` when ``deadline_s`` seconds pass first (resends and polls included; a
        task already created goes on, and the exception names it)."""
        async with within(deadline_s) as deadline:
            handle = await self.start_tool(name, arguments, idempotency_key=idempotency_key)
            deadline.task_id = handle.task_id
            return await handle.wait()

    async def start_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        deadline_s: float | None = None,
    ) -> TaskHandle:
        """Call a tool up to its task (or its inline answer): a handle to follow it.

        Input requested before a task exists is answered here (multi round-trip requests). The call's
        idempotency key (minted here unless given) goes with every send of it, resends included.
        ``deadline_s`` bounds this part only (:class:`DeadlineExceeded`)."""
        async with within(deadline_s):
            return await self._start_tool(name, arguments, idempotency_key)

    async def _start_tool(
        self, name: str, arguments: Mapping[str, Any] | None, idempotency_key: str | None
    ) -> TaskHandle:
        key = idempotency_key or secrets.token_urlsafe(18)
        header_params = await self._header_params(name)
        base = {"name": name, "arguments": dict(arguments or {})}
        result = await self._rounds("tools/call", base, idempotency_key=key, header_params=header_params)
        if result.get("resultType") == "task" and self.inputs.tasks:
            task_id = result.get("taskId")
            if not isinstance(task_id, str) or not isinstance(result.get("status"), str):
                raise InvalidResponse("a CreateTaskResult without taskId or status")
            return TaskHandle(self, task_id, result)
        return TaskHandle.finished(self, result)

    async def list_prompts(self) -> list[dict[str, Any]]:
        return await self._listing("prompts/list", "prompts")

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> dict[str, Any]:
        """``prompts/get``, its input rounds answered by the callbacks."""
        return await self._rounds("prompts/get", {"name": name, "arguments": dict(arguments or {})})

    async def list_resources(self) -> list[dict[str, Any]]:
        return await self._listing("resources/list", "resources")

    async def read_resource(self, uri: str) -> dict[str, Any]:
        """``resources/read``, its input rounds answered by the callbacks."""
        return await self._rounds("resources/read", {"uri": uri})

    async def _rounds(
        self,
        method: str,
        base: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        header_params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """``method`` until it stops asking for input: its complete result (or, for ``tools/call``, the
        task it created). Each retry carries the answers and the ``requestState`` exactly as received."""
        params: dict[str, Any] = dict(base)
        for _ in range(MAX_ROUNDS):
            result = await self.request(method, params, idempotency_key=idempotency_key, header_params=header_params)
            kind = result.get("resultType", "complete")  # none: a server before 2026-07-28's rule
            if kind == "complete" or (kind == "task" and method == "tools/call" and self.inputs.tasks):
                return result
            if kind != "input_required":
                raise InvalidResponse(f"{method} answered with resultType {kind!r}")
            params = dict(base)
            if result.get("inputRequests"):
                params["inputResponses"] = await self.inputs.answer(result["inputRequests"])
            state = result.get("requestState")
            if state is not None:
                if not isinstance(state, str):
                    raise InvalidResponse("requestState is not a string")
                params["requestState"] = state
        raise InvalidResponse(f"{method} still asked for input after {MAX_ROUNDS} rounds")

    async def _listing(self, method: str, field: str) -> list[dict[str, Any]]:
        """Every item of a paginated list method, following ``nextCursor``."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(1000):
            page = await self.request(method, {} if cursor is None else {"cursor": cursor})
            found = page.get(field)
            if not isinstance(found, list):
                raise InvalidResponse(f"{method} without a list of {field}")
            items += [item for item in found if isinstance(item, dict)]
            cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
            if not cursor:
                break
        return items

    def task(self, task_id: str) -> TaskHandle:
        """A handle on a task started elsewhere (its state is read on first use)."""
        return TaskHandle(self, task_id, {"taskId": task_id, "status": "working"})

    async def _header_params(self, name: str) -> dict[str, str]:
        if self._tool_headers is None or name not in self._tool_headers:
            await self.list_tools()  # once, and again for a tool added since
        assert self._tool_headers is not None
        found = self._tool_headers.get(name, {})
        if isinstance(found, InvalidHeaderAnnotation):
            # Its headers would be wrong or ambiguous: refused here, before anything is sent.
            raise ClientError(f"tool {name!r} cannot be called: {found}")
        return found


def _headers_or_error(tool: Mapping[str, Any]) -> dict[str, str] | InvalidHeaderAnnotation:
    try:
        return header_params_of(tool)
    except InvalidHeaderAnnotation as exc:
        return exc
