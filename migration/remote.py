"""Reading a remote upstream's answers with bounds, for ``ext-tasks proxy`` (both eras go through here).

The upstream is a server the proxy does not control: every answer is read with a limit on its size
(:attr:`~ext_tasks.options.ProxyOptions.proxy_max_answer_bytes`, per JSON body or per event of a stream)
and a limit on silence (``proxy_read_timeout_s``, per read, so an upstream that sends keep-alives keeps a
healthy stream open). Listens wait longer: a subscription is quiet whenever nothing changes.

What cannot be relayed becomes one of the :class:`UpstreamFailed` errors, a JSON-RPC error the proxy
answers in the caller's era with a 5xx status: 502 for an answer too large, unparsable (not JSON, or
nested deeper than 100 levels) or empty where a message was due (a redirect, an empty 502), 504 when the
upstream went silent, 502 when it could not be reached at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator
from typing import Any, Final

import httpx

from ext_tasks import answers
from ext_tasks.options import ProxyOptions
from ext_tasks.protocol.errors import PARSE_ERROR, InternalError, ParseError

#: The least a listen waits for its next bytes: a subscription is silent while nothing changes (this
#: server sends a keep-alive every ``EXT_TASKS_KEEPALIVE_S``, 15 s by default; others may send none).
LISTEN_TIMEOUT_S: Final = 300.0
_CONNECT_TIMEOUT_S: Final = 10.0
_LISTENS: Final = frozenset({"subscriptions/listen"})


class UpstreamFailed(InternalError):
    """The upstream's answer could not be relayed (or there was none): HTTP 502."""

    http_status = 502


class UpstreamTimedOut(UpstreamFailed):
    http_status = 504

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Upstream server sent nothing for {seconds:g} s")


class UpstreamTooLarge(UpstreamFailed):
    def __init__(self, limit: int) -> None:
        super().__init__(f"Upstream answer too large (over {limit} bytes)", data={"maxAnswerBytes": limit})


class UpstreamUnparsable(UpstreamFailed):
    """The proxy could not parse what the upstream sent: -32700, as for a body a client sends."""

    code = PARSE_ERROR


class Reading:
    """The limits one proxy reads its upstream with, and the httpx client it reads through."""

    def __init__(self, options: ProxyOptions | None = None) -> None:
        self.options = options or ProxyOptions()
        self.max_bytes = self.options.proxy_max_answer_bytes
        self.client = httpx.AsyncClient(
            timeout=self.timeout_for(""),
            # Bodies as sent: a compressed answer would be inflated a whole network read at a time,
            # before any limit could see it (and proxy and upstream usually share a network).
            headers={"Accept-Encoding": "identity"},
        )

    def read_timeout_s(self, method: str) -> float:
        read = self.options.proxy_read_timeout_s
        return max(read, LISTEN_TIMEOUT_S) if method in _LISTENS else read

    def timeout_for(self, method: str) -> httpx.Timeout:
        return httpx.Timeout(_CONNECT_TIMEOUT_S, read=self.read_timeout_s(method))

    async def open(self, method: str, url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
        """POST a request of JSON-RPC ``method`` and read the answer's status and headers (its body is
        left to :meth:`message` or :meth:`messages`)."""
        request = self.client.build_request(
            "POST", url, headers=headers, content=body, timeout=self.timeout_for(method)
        )
        try:
            return await self.client.send(request, stream=True)
        except httpx.ReadTimeout:
            raise UpstreamTimedOut(self.read_timeout_s(method)) from None
        except httpx.HTTPError as exc:  # no connection (refused, timed out), none free, the body not taken
            raise UpstreamFailed(f"Upstream server unavailable: {type(exc).__name__}") from None

    async def message(self, method: str, response: httpx.Response) -> dict[str, Any] | None:
        """The JSON-RPC message of a JSON answer; ``None`` for 202 Accepted (a notification's answer)."""
        try:
            with self._failures(method, "the upstream's answer"):
                raw = await answers.read_body(response, self.max_bytes)
        finally:
            await response.aclose()
        status = response.status_code
        if status == 202 and not raw.strip():
            return None
        if not raw.strip():
            raise UpstreamFailed(f"Upstream answered HTTP {status} without a body")
        with self._failures(method, f"the upstream's answer, HTTP {status}"):
            message = answers.json_object(raw)
        if message is None:
            raise UpstreamFailed(f"Upstream answered HTTP {status} without JSON-RPC")
        return message

    async def messages(self, method: str, response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
        """The JSON-RPC messages of an event stream, each event bounded; closes the response."""
        try:
            with self._failures(method, "an event of the upstream's stream"):
                async for message in answers.messages(response, self.max_bytes):
                    yield message
        finally:
            await response.aclose()

    @contextlib.contextmanager
    def _failures(self, method: str, what: str) -> Iterator[None]:
        """What can go wrong reading ``what`` of the upstream, as the proxy's errors."""
        try:
            yield
        except answers.AnswerTooLarge:
            raise UpstreamTooLarge(self.max_bytes) from None
        except ParseError as exc:
            raise UpstreamUnparsable(f"{exc.message} ({what})") from None
        except httpx.ReadTimeout:
            raise UpstreamTimedOut(self.read_timeout_s(method)) from None
        except httpx.HTTPError as exc:
            raise UpstreamFailed(f"Upstream answer broken off ({what}): {type(exc).__name__}") from None

    async def close(self) -> None:
        await self.client.aclose()
