"""What can go wrong when calling a server, as exceptions a caller can tell apart.

::

    ClientError
      RpcError                 the server answered a JSON-RPC error (``code``, ``message``, ``data``)
        RpcInvalidParams       -32602: unknown tool or task, bad arguments, expired state ...
        RpcMethodNotFound      -32601
        RpcInternalError       -32603
        RpcHeaderMismatch      -32020
        RpcMissingCapability   -32021: ``required`` names what the request needs
        RpcUnsupportedVersion  -32022: ``supported`` lists what the server speaks
        RpcLimitExceeded       a caller's limit (HTTP 429) still reached after the resends
        TaskFailed             the task ended ``failed``: its error, and the ``task_id``
      TaskCancelled            the task ended ``cancelled``
      TransportError           no answer: the connection, a timeout or HTTP 5xx, after the resends
      HttpError                an HTTP error without a JSON-RPC body (401, 403, 404 of a wrong path ...)
      InvalidResponse          the server answered something the protocol does not allow
      ResponseTooLarge         an answer (a body, or one event of a stream) over ``max_response_bytes``
      DeadlineExceeded         the call's ``deadline_s`` passed first (also a ``TimeoutError``)

Each ``Rpc*`` class is chosen by the code the server sent (the constants of
``ext_tasks.protocol.errors``, the server's own); the names differ from the server's exception classes
on purpose. The names without ``Rpc`` (``InvalidParams``, ``MethodNotFound``, ``InternalError``,
``HeaderMismatch``, ``MissingCapability``, ``UnsupportedVersion``, ``LimitExceeded``) are the same classes,
kept for the client API the README names.

A ``completed`` task whose result has ``isError: true`` is not an exception: the tool ran and said so,
and ``call_tool`` returns that result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol import errors as codes


class ClientError(Exception):
    """Any failure of a call made through :class:`~ext_tasks.client.Client`."""


class RpcError(ClientError):
    """The server answered with a JSON-RPC error."""

    code: int

    def __init__(self, code: int, message: str, data: Any = None, *, http_status: int | None = None) -> None:
        super().__init__(f"{message} (JSON-RPC {code})")
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status


class RpcInvalidParams(RpcError):
    pass


class RpcMethodNotFound(RpcError):
    pass


class RpcInternalError(RpcError):
    pass


class RpcHeaderMismatch(RpcError):
    pass


class RpcMissingCapability(RpcError):
    @property
    def required(self) -> dict[str, Any]:
        """The capabilities the request needs (``data.requiredCapabilities``), ``{}`` if not said."""
        data = self.data if isinstance(self.data, Mapping) else {}
        required = data.get("requiredCapabilities")
        return dict(required) if isinstance(required, Mapping) else {}


class RpcUnsupportedVersion(RpcError):
    @property
    def supported(self) -> list[str]:
        data = self.data if isinstance(self.data, Mapping) else {}
        versions = data.get("supported")
        return [v for v in versions if isinstance(v, str)] if isinstance(versions, list) else []


class RpcLimitExceeded(RpcError):
    pass


class TaskFailed(RpcError):
    """The task ended ``failed``: the JSON-RPC error its request produced. Never retried by the client:
    the server already ran it as often as it would."""

    def __init__(self, task_id: str, error: Mapping[str, Any]) -> None:
        code = error.get("code")
        message = error.get("message")
        super().__init__(
            code if isinstance(code, int) and not isinstance(code, bool) else codes.INTERNAL_ERROR,
            message if isinstance(message, str) else "The task failed",
            error.get("data"),
        )
        self.task_id = task_id


class TaskCancelled(ClientError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"Task {task_id} was cancelled")
        self.task_id = task_id


class TransportError(ClientError):
    """No usable answer after every resend the policy allows."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


class HttpError(ClientError):
    """An HTTP error status whose body is not a JSON-RPC error (not resent)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}" if body else f"HTTP {status}")
        self.status = status
        self.body = body


class InvalidResponse(ClientError):
    """The server's answer breaks the protocol (an unknown ``resultType``, a result that is not an object,
    an input request this client did not declare a capability for)."""


class ResponseTooLarge(ClientError):
    """The server's answer, a JSON body or one event of a stream, is larger than the client's
    ``max_response_bytes``: reading stopped there. Not resent: the same request would get it again."""

    def __init__(self, method: str, limit: int) -> None:
        super().__init__(f"{method}: the server's answer is larger than {limit} bytes (max_response_bytes)")
        self.limit = limit


class DeadlineExceeded(ClientError, TimeoutError):
    """The call's ``deadline_s`` passed before its result. ``task_id`` names the task it started, still
    running on the server (follow it later with ``client.task(task_id)``); ``None`` if none was created."""

    def __init__(self, seconds: float, task_id: str | None) -> None:
        where = f"task {task_id} is still running" if task_id else "no task was created"
        super().__init__(f"no result within {seconds:g} s ({where})")
        self.seconds = seconds
        self.task_id = task_id


_CLASSES: dict[int, type[RpcError]] = {
    codes.INVALID_PARAMS: RpcInvalidParams,
    codes.METHOD_NOT_FOUND: RpcMethodNotFound,
    codes.INTERNAL_ERROR: RpcInternalError,
    codes.HEADER_MISMATCH: RpcHeaderMismatch,
    codes.MISSING_REQUIRED_CLIENT_CAPABILITY: RpcMissingCapability,
    codes.UNSUPPORTED_PROTOCOL_VERSION: RpcUnsupportedVersion,
    codes.LIMIT_EXCEEDED: RpcLimitExceeded,
}


def rpc_error(error: Mapping[str, Any], http_status: int | None = None) -> RpcError:
    """The exception for a JSON-RPC ``error`` member (any code: unknown ones give :class:`RpcError`)."""
    code = error.get("code")
    number = code if isinstance(code, int) and not isinstance(code, bool) else codes.INTERNAL_ERROR
    message = error.get("message")
    cls = _CLASSES.get(number, RpcError)
    return cls(number, message if isinstance(message, str) else "", error.get("data"), http_status=http_status)


# The client API's first names (README), the same classes.
InvalidParams = RpcInvalidParams
MethodNotFound = RpcMethodNotFound
InternalError = RpcInternalError
HeaderMismatch = RpcHeaderMismatch
MissingCapability = RpcMissingCapability
UnsupportedVersion = RpcUnsupportedVersion
LimitExceeded = RpcLimitExceeded
