"""The one mapping from an exception to a reply, and the guards every surface answers its failures through.

:meth:`Guard.reply` is that mapping. A :class:`~.protocol.errors.ProtocolError` keeps its code, message,
data, HTTP status, extra headers (``Retry-After``, ``WWW-Authenticate``, ``Connection: close``) and hold;
anything else becomes -32603 "Internal error", its traceback logged once by the guard that caught it and
never told to the client (its text may hold anything, a path or a secret).

Which HTTP status a failure is sent with is the surface's policy, a :class:`StatusRule` value, not a code
path of its own: each error's own status (2026-07-28, the HTTP edge, a session's failure), or the
2025-11-25 rule for a method's failure (HTTP 200 and the JSON-RPC error, except what means "retry later"
and a proxy's failed upstream, which keep theirs).

The places that turn an exception into a reply are these four (``tests/unit/test_failures.py``):

- :meth:`Guard.catching`, a ``with`` block whose failure becomes a JSON reply: the engine's requests (the
  final answer of a streamed one too), the era router's and the shim's, the proxy's, the HTTP edge's
  checks before any surface;
- :meth:`Guard.stream`, a stream that breaks off ends with the error as its last message: the shim's, the
  proxy's;
- the worker's run of a tool (``ext_tasks.worker``), where a tool's ``ProtocolError`` becomes the task's
  ``failed`` outcome with its own JSON-RPC error (anything else fails the worker's run, which is
  reclaimed: nothing to classify there);
- the HTTP edge's answer to the framework's own refusals on its other routes (``ext_tasks.http``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from .protocol.errors import Busy, InternalError, ProtocolError
from .protocol.jsonrpc import Message as Decoded
from .protocol.jsonrpc import RequestId, decode_message
from .replies import JsonReply, StreamItem

INTERNAL_MESSAGE: Final = "Internal error"


@dataclass(frozen=True, slots=True)
class StatusRule:
    """The HTTP status a failure is sent with: its own (``fixed`` is ``None``), or ``fixed`` unless the
    error is one of ``kept``."""

    fixed: int | None = None
    kept: tuple[type[ProtocolError], ...] = ()

    def status(self, error: ProtocolError) -> int:
        if self.fixed is None or isinstance(error, self.kept):
            return error.http_status
        return self.fixed


#: Every failure with its own status (2026-07-28, the HTTP edge).
OWN_STATUS: Final = StatusRule()


class Guard:
    """One surface's failures as replies: where an unexpected one is logged, and with which status rule.

    ``unexpected`` is the log line for a failure that is not a ``ProtocolError`` (``%s``: what failed,
    e.g. the method); ``busy``, if given, a warning line for a "retry later" answered as a JSON reply
    (``%s``: its message)."""

    def __init__(
        self, logger: logging.Logger, unexpected: str, rule: StatusRule = OWN_STATUS, *, busy: str | None = None
    ) -> None:
        self.logger = logger
        self.unexpected = unexpected
        self.rule = rule
        self.busy = busy

    def error(self, exc: Exception, what: str = "", *, message: str = INTERNAL_MESSAGE) -> ProtocolError:
        """The failure the client is told: a ``ProtocolError`` as it is; anything else -32603 with
        ``message``, logged here with its traceback (the only time it is logged)."""
        if isinstance(exc, ProtocolError):
            return exc
        self.logger.error(self.unexpected, what, exc_info=exc)
        return InternalError(message)

    def reply(
        self, request_id: RequestId | None, exc: Exception, what: str = "", rule: StatusRule | None = None
    ) -> JsonReply:
        """The reply for ``exc``: its JSON-RPC error, the status ``rule`` (the guard's by default) gives
        it, its extra headers and its hold."""
        error = self.error(exc, what)
        return JsonReply.error(request_id, error, (rule or self.rule).status(error))

    def decode(self, body: bytes) -> Decoded | JsonReply:
        """The body's JSON-RPC message, or the reply for a body that is not one."""
        with (failure := self.catching(None, "a request body")):
            return decode_message(body)
        return failure.reply

    def catching(self, request_id: RequestId | None, what: str = "", rule: StatusRule | None = None) -> Caught:
        """A ``with`` block whose failure (any ``Exception``; cancellation passes) becomes
        :attr:`Caught.reply` instead of being raised on."""
        return Caught(self, request_id, what, rule)

    async def stream(
        self, request_id: RequestId | None, what: str, messages: AsyncIterator[StreamItem]
    ) -> AsyncIterator[StreamItem]:
        """``messages``; if they break off with a failure, its error message ends the stream (the
        response to the request: the stream was already answered 200)."""
        try:
            async for message in messages:
                yield message
        except Exception as exc:  # noqa: BLE001 - the stream's one mapping of any failure to its error
            final = self.reply(request_id, exc, what).message
            assert final is not None
            yield final


class Caught:
    """The ``with`` block of :meth:`Guard.catching`: after it, :attr:`failed` says whether it failed, and
    :attr:`reply` is the reply for that failure."""

    __slots__ = ("_failure", "_guard", "_request_id", "_rule", "_what")

    def __init__(self, guard: Guard, request_id: RequestId | None, what: str, rule: StatusRule | None) -> None:
        self._guard = guard
        self._request_id = request_id
        self._what = what
        self._rule = rule
        self._failure: JsonReply | None = None

    def __enter__(self) -> Caught:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if not isinstance(exc, Exception):
            return False  # no failure, or cancellation and the like: not ours to answer
        guard = self._guard
        self._failure = guard.reply(self._request_id, exc, self._what, self._rule)
        if guard.busy is not None and isinstance(exc, Busy):
            guard.logger.warning(guard.busy, exc.message)
        return True

    @property
    def failed(self) -> bool:
        return self._failure is not None

    @property
    def reply(self) -> JsonReply:
        """The reply for the block's failure (only after one)."""
        assert self._failure is not None, "the guarded block did not fail"
        return self._failure
