"""One JSON-RPC request over MCP's Streamable HTTP (2026-07-28), sent again when its answer was lost.

A *resend* is the same request once more, with a new JSON-RPC id, after the answer never came: a
timeout, a dropped connection, an event stream that ended early, HTTP 502/503/504, or 429 (a limit of
the caller: the server's ``Retry-After`` is honoured). Pauses grow exponentially up to a cap. Anything
else is final and raised as a typed :mod:`~ext_tasks.client.errors` exception: a JSON-RPC error the
server chose to answer is an answer, not a lost one.

Every answer is read with a bound (:mod:`~ext_tasks.answers`): a JSON body, or one event of a stream,
larger than ``max_response_bytes`` stops the read with :class:`ResponseTooLarge`, and JSON nested deeper
than 100 levels is not taken (:class:`InvalidResponse`); a server cannot make the client hold more.

Resending is what makes a lost answer harmless: reads (``tasks/get``) and acknowledgements
(``tasks/update``, ``tasks/cancel``) are idempotent, and a ``tools/call`` carries an idempotency key
that names the same task when it arrives twice (on servers that honour the key).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from .. import answers, sse
from ..protocol.errors import ParseError
from ..protocol.jsonrpc import encode
from .errors import HttpError, InvalidResponse, ResponseTooLarge, RpcError, TransportError, rpc_error

#: HTTP statuses that mean "not served this time" rather than "refused".
RESEND_STATUSES: Final = frozenset({429, 502, 503, 504})
_LOST: Final = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

Notify = Callable[[dict[str, Any]], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a request whose answer was lost is sent again."""

    #: Sends in all, the first one included (1: never resend).
    attempts: int = 6
    first_pause_s: float = 0.25
    max_pause_s: float = 8.0
    #: The longest ``Retry-After`` honoured; a server asking for more gets its answer raised instead.
    max_retry_after_s: float = 60.0

    def pause(self, resend: int, retry_after_s: float | None) -> float:
        """Seconds before the ``resend``-th resend (1-based)."""
        backoff = min(self.max_pause_s, self.first_pause_s * 2.0 ** (resend - 1))
        return backoff if retry_after_s is None else max(backoff, retry_after_s)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(slots=True)
class _Answer:
    """What one send got: a JSON-RPC response, or nothing usable and whether to send again."""

    status: int
    message: dict[str, Any] | None
    retry_after_s: float | None = None
    body: str = ""


class Transport:
    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        on_notification: Notify | None = None,
        max_response_bytes: int = answers.DEFAULT_LIMIT,
    ) -> None:
        self.url = url
        self.max_response_bytes = max_response_bytes
        self._http = http
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **(headers or {}),
        }
        self.retry = retry or RetryPolicy()
        self._on_notification = on_notification
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    async def request(self, method: str, params: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        """The ``result`` of ``method``, sent again (new id each time) while its answer is lost."""
        policy = self.retry
        resend = 0
        while True:
            lost: str
            retry_after: float | None = None
            try:
                answer = await self._send_once(method, params, headers)
            except _LOST as exc:
                lost = f"{method}: {type(exc).__name__}: {exc}".rstrip(": ")
            else:
                if answer.status not in RESEND_STATUSES or resend + 1 >= policy.attempts:
                    return _result_of(method, answer)
                retry_after = answer.retry_after_s
                if retry_after is not None and retry_after > policy.max_retry_after_s:
                    return _result_of(method, answer)
                lost = f"{method}: HTTP {answer.status}"
            resend += 1
            if resend >= policy.attempts:
                raise TransportError(f"{lost} (sent {resend} time(s))")
            await asyncio.sleep(policy.pause(resend, retry_after))

    async def _send_once(self, method: str, params: dict[str, Any], headers: Mapping[str, str]) -> _Answer:
        with _bounded(method, self.max_response_bytes):
            return await self._exchange(method, params, headers)

    async def _exchange(self, method: str, params: dict[str, Any], headers: Mapping[str, str]) -> _Answer:
        request_id = self.next_id()
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        async with self._http.stream(
            "POST", self.url, headers={**self._headers, **headers}, content=encode(message)
        ) as response:
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
            if sse.is_event_stream(response):
                async for received in answers.messages(response, self.max_response_bytes):
                    if _answers(received, request_id):
                        return _Answer(response.status_code, received, retry_after)
                    await self._notify(received)
                # The stream broke before its answer: the request was lost with it.
                raise httpx.RemoteProtocolError("the event stream ended without the response")
            raw = await answers.read_body(response, self.max_response_bytes)
        decoded = _json_object(raw)
        text = raw.decode("utf-8", errors="replace")
        if decoded is not None and ("result" in decoded or "error" in decoded):
            return _Answer(response.status_code, decoded, retry_after, text)
        return _Answer(response.status_code, None, retry_after, text)

    async def _notify(self, message: dict[str, Any]) -> None:
        if self._on_notification is not None and "method" in message and "id" not in message:
            outcome = self._on_notification(message)
            if outcome is not None:
                await outcome

    @contextlib.asynccontextmanager
    async def listen(
        self, params: dict[str, Any], headers: Mapping[str, str], *, quiet_s: float
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """An open ``subscriptions/listen`` stream: its notifications, until the server ends it (or it
        stays silent, keep-alives included, for ``quiet_s``: ``httpx.ReadTimeout``).

        Not resent: a listener that loses its stream decides itself how to catch up (a read, then
        listen again). A refusal raises like :meth:`request` does."""
        request_id = self.next_id()
        message = {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}
        async with self._http.stream(
            "POST",
            self.url,
            headers={**self._headers, **headers},
            content=encode(message),
            timeout=httpx.Timeout(self._http.timeout.connect, read=quiet_s),
        ) as response:
            if not sse.is_event_stream(response):
                with _bounded("subscriptions/listen", self.max_response_bytes):
                    raw = await answers.read_body(response, self.max_response_bytes)
                text = raw.decode(errors="replace")
                _result_of("subscriptions/listen", _Answer(response.status_code, _json_object(raw), None, text))
                raise InvalidResponse("subscriptions/listen answered without an event stream")

            async def notifications() -> AsyncGenerator[dict[str, Any], None]:
                with _bounded("subscriptions/listen", self.max_response_bytes):
                    async for received in answers.messages(response, self.max_response_bytes):
                        if _answers(received, request_id):
                            if "error" in received:
                                raise _error_of(received, response.status_code)
                            return  # the server closed the subscription
                        if "method" in received:
                            yield received

            async with contextlib.aclosing(notifications()) as stream:
                yield stream


@contextlib.contextmanager
def _bounded(method: str, limit: int) -> Iterator[None]:
    """The typed errors of a read with bounds: too large an answer, an event that is not JSON."""
    try:
        yield
    except answers.AnswerTooLarge:
        raise ResponseTooLarge(method, limit) from None
    except ParseError as exc:
        raise InvalidResponse(f"{method}: {exc.message}") from None


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """A JSON object, or ``None`` for a body that is empty, not an object, not JSON or nested too deep."""
    if not raw.strip():
        return None
    try:
        return answers.json_object(raw)
    except ParseError:
        return None


def _answers(message: dict[str, Any], request_id: int) -> bool:
    return message.get("id") == request_id and ("result" in message or "error" in message)


def _error_of(message: dict[str, Any], status: int) -> RpcError:
    error = message.get("error")
    return rpc_error(error if isinstance(error, dict) else {}, status)


def _result_of(method: str, answer: _Answer) -> dict[str, Any]:
    message = answer.message
    if message is None:
        if answer.status in RESEND_STATUSES:
            raise TransportError(f"{method}: HTTP {answer.status}", http_status=answer.status)
        if answer.status >= 400:
            raise HttpError(answer.status, answer.body)
        raise InvalidResponse(f"{method}: HTTP {answer.status} without a JSON-RPC response")
    if "error" in message:
        raise _error_of(message, answer.status)
    result = message.get("result")
    if not isinstance(result, dict):
        raise InvalidResponse(f"{method}: the result is not an object")
    return result
