"""The admin listener's app (``EXT_TASKS_ADMIN_PORT``): the operator's API over :class:`~.operator.Operator`
and its small read-only page. A separate app on a separate socket: nothing here is routed on ``/mcp``,
and nothing of ``/mcp`` here.

* ``GET /api/tasks?status=&tool=&principal=&older_than_s=&newer_than_s=&min_attempts=&stuck=&limit=``:
  the tasks the filter admits (newest first) and their totals by status, tool and principal;
* ``GET /api/tasks/{id}``: one task's detail; ``POST /api/tasks/{id}/cancel``: cancel it;
* ``POST /api/purge?<the same filter>``: forget the finished (or expired) tasks it admits;
* ``GET /`` and ``GET /app.js``: the page (static; it asks the API with the token it is given).

Every ``/api`` request needs ``Authorization: Bearer <one of EXT_TASKS_ADMIN_TOKENS>``, compared in
constant time with each; a token is never logged. The page itself holds no data and needs none.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs

from litestar import Litestar, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, NotAuthorizedException
from litestar.handlers import BaseRouteHandler

from .compose import SharedValkey, build_store
from .config import Settings
from .operator import Operator, StillChanging, StuckRule, TaskFilter
from .store.base import TaskStore, TaskStoreUnavailable

logger = logging.getLogger("ext_tasks.admin")

JSON: Final = "application/json"
_PAGE_FILES: Final = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
#: The page runs only its own script and talks only to this listener.
_PAGE_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class AdminTokens:
    """The admin listener's bearer tokens; a presented one is compared with each in constant time."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self._tokens = [token.encode() for token in tokens]

    def admits(self, authorization: str | None) -> bool:
        scheme, _, presented = (authorization or "").partition(" ")
        given = presented.strip().encode()
        matched = False
        for token in self._tokens:  # every token compared, so the time says nothing of which matched
            matched |= hmac.compare_digest(given, token)
        return scheme.lower() == "bearer" and bool(given) and matched


def _page(name: str) -> bytes:
    return (resources.files(__package__ or "ext_tasks") / "admin_page" / name).read_bytes()


def _guard(tokens: AdminTokens) -> Callable[[ASGIConnection[Any, Any, Any, Any], BaseRouteHandler], None]:
    def authorized(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not tokens.admits(connection.headers.get("authorization")):
            raise NotAuthorizedException("the admin API needs one of EXT_TASKS_ADMIN_TOKENS as a bearer token")

    return authorized


def wanted(request: Request[Any, Any, Any]) -> TaskFilter:
    """The filter a request's query gives (400 if it does not parse)."""
    try:
        return TaskFilter.from_query(parse_qs(request.scope.get("query_string", b"").decode("latin-1")))
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


def create_admin_app(
    operator: Operator,
    tokens: AdminTokens,
    *,
    on_startup: Sequence[Callable[[], Awaitable[None]]] = (),
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
) -> Litestar:
    pages = {name: _page(name) for name in _PAGE_FILES}
    authorized = _guard(tokens)

    @get("/", sync_to_thread=False)
    def index() -> Response[bytes]:
        return Response(pages["index.html"], media_type=_PAGE_FILES["index.html"], headers=_PAGE_HEADERS)

    @get("/app.js", sync_to_thread=False)
    def script() -> Response[bytes]:
        return Response(pages["app.js"], media_type=_PAGE_FILES["app.js"], headers=_PAGE_HEADERS)

    @get("/api/tasks", guards=[authorized])
    async def tasks(request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await operator.tasks(wanted(request))

    @get("/api/tasks/{task_id:str}", guards=[authorized])
    async def task(task_id: str) -> dict[str, Any]:
        return _found(await operator.detail(task_id))

    @post("/api/tasks/{task_id:str}/cancel", guards=[authorized], status_code=200)
    async def cancel(task_id: str) -> dict[str, Any]:
        return _found(await operator.cancel(task_id))

    @post("/api/purge", guards=[authorized], status_code=200)
    async def purge(request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await operator.purge(wanted(request))

    return Litestar(
        route_handlers=[index, script, tasks, task, cancel, purge],
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        openapi_config=None,
        logging_config=None,
        exception_handlers={TaskStoreUnavailable: _unavailable, StillChanging: _unavailable, HTTPException: _refused},
    )


def _found(answer: dict[str, Any] | None) -> dict[str, Any]:
    if answer is None:
        raise HTTPException(status_code=404, detail="no such task")
    return answer


def _refused(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    headers = {"WWW-Authenticate": 'Bearer realm="ext-tasks-admin"'} if exc.status_code == 401 else None
    return Response({"error": exc.detail}, status_code=exc.status_code, media_type=JSON, headers=headers)


def _unavailable(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """503 with ``Retry-After``: the store is away, or a cancel kept losing to the task's own commits."""
    busy = isinstance(exc, StillChanging)
    if not busy:
        logger.warning("admin request failed: the task store is unavailable (%s)", type(exc).__name__)
    text = str(exc) if busy else "the task store is unavailable"
    return Response({"error": text}, status_code=503, media_type=JSON, headers={"Retry-After": "1"})


def admin_app(settings: Settings, store: TaskStore, on_shutdown: Sequence[Callable[[], Awaitable[None]]] = ()) -> Any:
    """The admin listener's app (``EXT_TASKS_ADMIN_PORT``): the operator's view of ``store``."""
    admin = settings.admin
    rule = StuckRule(lease_ms=int(settings.worker.lease_s * 1000), input_limit_ms=int(admin.admin_stuck_input_s * 1e3))
    tokens = AdminTokens([token.get_secret_value() for token in admin.admin_tokens])
    return create_admin_app(Operator(rule=rule, store=store), tokens, on_shutdown=on_shutdown)


def standalone_admin_app(settings: Settings) -> Any:
    """The admin app on a store of its own: where several processes serve ``/mcp`` (``--workers``, granian),
    the parent serves it once, over the Valkey they share."""
    shared = SharedValkey(settings)
    store = build_store(settings, shared)

    async def close() -> None:
        await store.close()
        await shared.close()

    return admin_app(settings, store, on_shutdown=[close])
