"""A client for 2026-07-28 MCP servers with the Tasks extension: ``Client``, ``TaskHandle`` and the
exceptions they raise. Nothing here imports the server."""

from .client import Client
from .errors import (
    ClientError,
    DeadlineExceeded,
    HeaderMismatch,
    HttpError,
    InternalError,
    InvalidParams,
    InvalidResponse,
    LimitExceeded,
    MethodNotFound,
    MissingCapability,
    ResponseTooLarge,
    RpcError,
    TaskCancelled,
    TaskFailed,
    TransportError,
    UnsupportedVersion,
)
from .tasks import TaskHandle
from .transport import RetryPolicy

__all__ = [
    "Client",
    "ClientError",
    "DeadlineExceeded",
    "HeaderMismatch",
    "HttpError",
    "InternalError",
    "InvalidParams",
    "InvalidResponse",
    "LimitExceeded",
    "MethodNotFound",
    "MissingCapability",
    "ResponseTooLarge",
    "RetryPolicy",
    "RpcError",
    "TaskCancelled",
    "TaskFailed",
    "TaskHandle",
    "TransportError",
    "UnsupportedVersion",
]
