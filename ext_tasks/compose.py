"""Composition shared by the CLI, tests and embedders: load a tools module, build the store, the engine
and the in-process worker, and start/stop them in the right order."""

from __future__ import annotations

import asyncio
import importlib
import logging
import secrets

from migration.sessions import MemorySessionStore, SessionStore
from migration.shim import LegacyShim, ShimOptions
from migration.upstream import EngineUpstream

from .auth import AnonymousAuthenticator, Authenticator, BearerTokenAuthenticator
from .config import ConfigError, Settings
from .engine import Engine, EngineOptions
from .protocol.errors import Busy
from .protocol.resume import ResumeCodec
from .store.base import TaskStore, TaskStoreUnavailable
from .store.memory import MemoryTaskStore
from .task_methods import TaskMethods, TaskOptions
from .tools import ToolRegistry
from .waits import WaitLimit
from .worker import Worker, WorkerOptions

logger = logging.getLogger("ext_tasks.server")


def load_registry(module_name: str) -> ToolRegistry:
    """The :class:`ToolRegistry` of a module: its ``registry`` attribute, or its only registry."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import tools module {module_name!r}: {exc}") from None
    found = getattr(module, "registry", None)
    if isinstance(found, ToolRegistry):
        return found
    registries = [value for value in vars(module).values() if isinstance(value, ToolRegistry)]
    if len(registries) != 1:
        raise ConfigError(f"module {module_name!r} must define `registry = ToolRegistry(...)`")
    return registries[0]


def build_codec(settings: Settings, audience: str) -> ResumeCodec:
    keys = settings.state_keys
    if not keys:
        if settings.several_processes_answer:
            raise ConfigError("several processes can answer, so EXT_TASKS_STATE_KEYS is required")
        logger.warning(
            "no EXT_TASKS_STATE_KEYS configured: using an ephemeral requestState key. Retries that reach "
            "another process, or this one after a restart, will be rejected. Configure shared keys "
            "(`ext-tasks keygen`) before running more than one process."
        )
        keys = (secrets.token_bytes(32),)
    return ResumeCodec(keys, audience=audience, ttl_s=settings.state_ttl_s, encrypt=settings.state_encrypt)


def build_authenticator(settings: Settings) -> Authenticator:
    return BearerTokenAuthenticator(settings.tokens) if settings.tokens else AnonymousAuthenticator()


def build_store(settings: Settings) -> TaskStore:
    if settings.valkey_url is None:
        return MemoryTaskStore()
    from .store.valkey import ValkeyTaskStore

    return ValkeyTaskStore(
        settings.valkey_url, prefix=settings.valkey_prefix, max_connections=settings.valkey_max_connections
    )


def build_engine(
    registry: ToolRegistry, settings: Settings, store: TaskStore, waits: WaitLimit | None = None
) -> Engine:
    codec = build_codec(settings, settings.audience or registry.name)
    options = EngineOptions(
        cache_ttl_ms=settings.cache_ttl_ms,
        # Results that depend on who asks must not be shared by caches between callers.
        cache_scope="private" if settings.tokens else "public",
        keepalive_s=settings.keepalive_s,
        strict_headers=settings.strict_headers,
    )
    task_options = TaskOptions(
        default_ttl_ms=settings.task_ttl_ms,
        max_ttl_ms=settings.task_max_ttl_ms,
        poll_interval_ms=settings.poll_interval_ms,
        poll_max_ms=settings.poll_max_ms,
        sensitive_grace_ms=settings.sensitive_grace_ms,
        idempotency_window_ms=settings.idempotency_window_s * 1000,
        max_active_per_principal=settings.max_active_tasks,
        max_stored_per_principal=settings.max_stored_tasks,
        poll_rate_limit=settings.poll_rate_limit,
    )
    waits = waits or WaitLimit(settings.max_waits)
    engine = Engine(registry, codec, options, tasks=TaskMethods(store, task_options), waits=waits)
    if settings.state_single_use:
        engine.core.claim_once = store.claim
    return engine


def build_worker(registry: ToolRegistry, settings: Settings, store: TaskStore) -> Worker:
    options = WorkerOptions(
        concurrency=settings.run_concurrency,
        lease_s=settings.lease_s,
        max_attempts=settings.max_attempts,
        max_result_bytes=settings.max_result_bytes,
    )
    return Worker(store, registry, options)


def build_shim(engine: Engine, settings: Settings) -> tuple[LegacyShim, SessionStore]:
    """The 2025-11-25 front end over this server's own engine, with sessions in the shared store."""
    sessions: SessionStore
    if settings.valkey_url is None:
        sessions = MemorySessionStore()
    else:
        from migration.valkey_sessions import ValkeySessionStore

        sessions = ValkeySessionStore(
            settings.valkey_url, prefix=settings.valkey_prefix, max_connections=settings.valkey_max_connections
        )
    options = ShimOptions(
        server_info={"name": engine.registry.name, "version": engine.registry.version},
        instructions=engine.registry.instructions,
        keepalive_s=settings.keepalive_s,
        max_sessions=settings.max_sessions,
    )
    shim = LegacyShim(EngineUpstream(engine), sessions, engine.core.codec, options, waits=engine.waits)
    return shim, sessions


class Runtime:
    """Store, engine, legacy shim and (unless disabled) an in-process worker, started and stopped together."""

    def __init__(self, registry: ToolRegistry, settings: Settings, *, serve_requests: bool = True) -> None:
        self.settings = settings
        self.store = build_store(settings)
        self.engine = build_engine(registry, settings, self.store) if serve_requests else None
        self.worker = build_worker(registry, settings, self.store) if settings.run_workers else None
        self.shim: LegacyShim | None = None
        self._sessions: SessionStore | None = None
        self._opening: asyncio.Task[None] | None = None
        if self.engine is not None and settings.legacy:
            self.shim, self._sessions = build_shim(self.engine, settings)

    async def start(self) -> None:
        try:
            await self.store.open()
        except TaskStoreUnavailable:
            # Serve anyway (readiness says "unavailable", store-backed requests answer 503) and keep
            # trying, so an instance started before its Valkey recovers by itself.
            logger.warning("task store unavailable at start; retrying in the background")
            self._opening = asyncio.create_task(self._open_when_possible())
            return
        if self.worker is not None:
            await self.worker.start()

    async def _open_when_possible(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.store.open()
            except TaskStoreUnavailable:
                continue
            logger.info("task store available")
            if self.worker is not None:
                await self.worker.start()
            return

    async def ready(self) -> None:
        """Raise unless this process can do its work: the store answers, and the task workers it should
        run are running (a worker loop that died is started again; meanwhile the process is not ready)."""
        await self.store.ping()
        if self.worker is not None and not self.worker.healthy:
            raise Busy("task workers are not running")

    async def stop(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
        if self.engine is not None:
            self.engine.close()
        if self.worker is not None:
            await self.worker.stop(self.settings.shutdown_grace_s)
        if self._sessions is not None:
            await self._sessions.close()
        await self.store.close()
