"""The composition root: the one place that builds and wires the parts, for ``ext-tasks serve``,
``worker`` and ``proxy``, the tests and the benchmark.

It loads a tools module, builds the store, the engine, the in-process worker and the legacy shim with
its era router, and the Litestar app around them, and starts and stops them in the right order. This
module (and the CLI above it) is the only one that imports both ``ext_tasks`` and ``migration``: the
engine side never imports the shim; the shim uses the engine's interfaces.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from migration.proxy import ForwardingHandler
from migration.remote import Reading
from migration.router import EraRouter
from migration.sessions import MemorySessionStore, SessionStore
from migration.shim import LegacyShim, ShimOptions
from migration.upstream import EngineUpstream, HttpUpstream, ModernUpstream

from . import tracing_setup
from .auth import AnonymousAuthenticator, Authenticator, BearerTokenAuthenticator
from .auth.oauth import OAuthAuthenticator
from .config import ConfigError, Settings
from .engine import Engine
from .flow import FlowControl
from .lifetimes import Lifetimes
from .metrics import STORE_ACCEPTS_WRITES
from .protocol.errors import Busy
from .protocol.resume import ResumeCodec
from .replies import RequestHandler
from .store.base import OwnerPlaces, TaskStore, TaskStoreUnavailable
from .store.memory import MemoryTaskStore
from .task_methods import TaskMethods
from .tools import ToolRegistry
from .waits import WaitLimit
from .worker import Worker

if TYPE_CHECKING:
    from .http import App

logger = logging.getLogger("ext_tasks.compose")
#: How long the check of the store's settings before serving may take.
_START_CHECK_S: Final = 5.0
#: The first and the longest pause between attempts to open a store that could not be opened.
_REOPEN_PAUSE_S: Final = (1.0, 5.0)


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


def start_tracing(service_name: str) -> bool:
    """Tracing on for this process if the ``OTEL_*`` variables ask for it (``ext_tasks.tracing``)."""
    try:
        return tracing_setup.configure(service_name)
    except tracing_setup.TracingUnavailable as exc:
        raise ConfigError(str(exc)) from None


async def stop_tracing() -> None:
    """Export the spans still batched (a process stopping; a SIGKILLed one loses them)."""
    await asyncio.to_thread(tracing_setup.shutdown)


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
    """OAuth access tokens (with the static tokens beside them) when issuers are configured; else the
    static tokens, else everyone is the anonymous principal."""
    if settings.auth.enabled:
        try:
            return OAuthAuthenticator.from_options(settings.auth, settings.tokens)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return BearerTokenAuthenticator(settings.tokens) if settings.tokens else AnonymousAuthenticator()


def closing(authenticator: Authenticator) -> list[Callable[[], Awaitable[None]]]:
    """What to call at shutdown for ``authenticator`` (an OAuth one has fetches to stop)."""
    return [authenticator.aclose] if isinstance(authenticator, OAuthAuthenticator) else []


class SharedValkey:
    """The process's one Valkey client (per topology) and one set of subscriber connections, shared by
    the task store and the legacy session store."""

    def __init__(self, settings: Settings) -> None:
        from .store.connection.acks import ReplicaAcks
        from .store.connection.channels import ShardedChannels
        from .store.connection.health import StoreHealth
        from .store.connection.pool import PoolSettings
        from .store.connection.topology import connect

        assert settings.valkey_url is not None
        self.prefix = settings.valkey_prefix
        acks = ReplicaAcks(settings.valkey_min_replica_acks, settings.valkey_ack_timeout_ms)
        try:
            self.topology = connect(
                settings.valkey_url, PoolSettings(max_connections=settings.valkey_max_connections), acks=acks
            )
        except ValueError as exc:  # the URL names nothing (the message never repeats a password)
            raise ConfigError(f"EXT_TASKS_VALKEY_URL / --valkey-url: {exc}") from None
        self.channels = ShardedChannels(self.topology)
        self.health = StoreHealth(self.topology, allow_eviction=settings.valkey_allow_eviction)

    def on(self) -> dict[str, Any]:
        """What every Valkey-backed store of the process is built with."""
        return {"prefix": self.prefix, "channels": self.channels}

    async def close(self) -> None:
        await self.health.close()
        await self.channels.close()
        await self.topology.close()


async def check_store_settings(settings: Settings) -> None:
    """Before serving: refuse (:class:`ConfigError`) a Valkey that may evict keys, unless
    ``EXT_TASKS_VALKEY_ALLOW_EVICTION`` says to run anyway. A store that cannot be read now is not a
    reason to stop: it is checked again once reachable (the process stays unready meanwhile)."""
    if settings.valkey_url is None or settings.valkey_allow_eviction:
        return  # allowed: the runtime's checks warn about it
    from .store.connection.health import read_primaries, refusal_to_start

    shared = SharedValkey(settings)
    try:
        async with asyncio.timeout(_START_CHECK_S):
            refusal = refusal_to_start(await read_primaries(shared.topology))
    except Exception as exc:  # noqa: BLE001 - unreachable, INFO refused, anything else: checked again later
        logger.warning("the task store's settings could not be checked at start (%s); checking them once "
                       "it answers", describe_failure(exc))  # fmt: skip
        refusal = None
    finally:
        await shared.close()
    if refusal is not None:
        raise ConfigError(refusal)


def describe_failure(exc: BaseException) -> str:
    """A store failure for the log: its kind and the first of its text (never a URL: valkey-py's texts
    name host and port only)."""
    detail = getattr(exc, "detail", None) or str(exc)
    return f"{type(exc).__name__}: {detail}"[:200]


def build_store(settings: Settings, shared: SharedValkey | None = None) -> TaskStore:
    if settings.valkey_url is None:
        return MemoryTaskStore()
    from .store.valkey import ValkeyTaskStore

    shared = shared or SharedValkey(settings)
    # No cap configured: owners' places are not kept, so a finished task has none to give back.
    tasks = settings.tasks
    capped = tasks.max_active_tasks > 0 or tasks.max_stored_tasks > 0 or tasks.max_stored_bytes > 0
    return ValkeyTaskStore(shared.topology, owner_places=capped, **shared.on())


def build_engine(
    registry: ToolRegistry, settings: Settings, store: TaskStore, waits: WaitLimit | None = None
) -> Engine:
    codec = build_codec(settings, settings.audience or registry.name)
    claim_once = store.claim if settings.state_single_use else None
    return Engine(
        registry,
        codec,
        settings.engine,
        tasks=TaskMethods(
            store,
            settings.tasks,
            lifetimes=Lifetimes(settings.tasks, registry.find_tool),
            flow=build_flow(registry, settings, store),
        ),
        waits=waits,
        claim_once=claim_once,
        # Results that depend on who asks must not be shared by caches between callers.
        cache_scope="private" if settings.tokens or settings.auth.enabled else "public",
    )


def build_worker(registry: ToolRegistry, settings: Settings, store: TaskStore) -> Worker:
    lifetimes = Lifetimes(settings.tasks, registry.find_tool)
    return Worker(store, registry, settings.worker, lifetimes=lifetimes, flow=build_flow(registry, settings, store))


def build_flow(registry: ToolRegistry, settings: Settings, store: TaskStore) -> FlowControl:
    """Flow control over the store's gates: a place is held as long as a worker's lease."""
    hold_ms = int(settings.worker.lease_s * 1000)
    return FlowControl(store.gates, store, settings.tasks, registry.find_tool, hold_ms=hold_ms)


def build_sessions(settings: Settings, shared: SharedValkey | None = None) -> SessionStore:
    if settings.valkey_url is None:
        return MemorySessionStore()
    from migration.valkey_sessions import ValkeySessionStore

    shared = shared or SharedValkey(settings)
    return ValkeySessionStore(shared.topology, **shared.on())


def build_shim(
    upstream: ModernUpstream,
    sessions: SessionStore,
    codec: ResumeCodec,
    settings: Settings,
    server_info: dict[str, str],
    *,
    instructions: str | None = None,
    waits: WaitLimit | None = None,
    places: OwnerPlaces | None = None,
) -> LegacyShim:
    """The 2025-11-25 front end over ``upstream`` (this server's engine, or a remote server); the tasks
    it keeps itself count in ``places`` (the task store's), else in the session store's own."""
    options = ShimOptions(
        server_info=server_info,
        instructions=instructions,
        legacy=settings.legacy,
        engine=settings.engine,
        tasks=settings.tasks,
        worker=settings.worker,
    )
    waits = waits or WaitLimit(settings.engine.max_waits)
    return LegacyShim(upstream, sessions, codec, options, waits=waits, places=places)


class Runtime:
    """Store, engine, legacy shim and (unless disabled) an in-process worker, started and stopped together."""

    def __init__(self, registry: ToolRegistry, settings: Settings, *, serve_requests: bool = True) -> None:
        self.settings = settings
        self._traced = start_tracing("ext-tasks")
        self._valkey = SharedValkey(settings) if settings.valkey_url is not None else None
        if self._valkey is None:
            STORE_ACCEPTS_WRITES.set(1)  # the in-memory store always does; a Valkey's is read (StoreHealth)
        self.store = build_store(settings, self._valkey)
        self.engine = build_engine(registry, settings, self.store) if serve_requests else None
        self.worker = build_worker(registry, settings, self.store) if not settings.worker.no_workers else None
        self.shim: LegacyShim | None = None
        self._sessions: SessionStore | None = None
        self._opening: asyncio.Task[None] | None = None
        self._opened = False
        if self.engine is not None and not settings.legacy.no_legacy:
            engine = self.engine
            self._sessions = build_sessions(settings, self._valkey)
            info = {"name": engine.registry.name, "version": engine.registry.version}
            self.shim = build_shim(
                EngineUpstream(engine),
                self._sessions,
                engine.core.codec,
                settings,
                info,
                instructions=engine.registry.instructions,
                waits=engine.waits,
                places=self.store.places,
            )

    @property
    def handler(self) -> RequestHandler:
        """What serves ``/mcp``: the engine, behind the era router when 2025-11-25 clients are served."""
        assert self.engine is not None
        return self.engine if self.shim is None else EraRouter(self.engine, self.shim)

    async def start(self) -> None:
        if self._valkey is not None:
            self._valkey.health.start()
        try:
            await self.store.open()
        except Exception as exc:  # noqa: BLE001 - whatever the store answers, the process keeps serving
            # Serve anyway (readiness says "unavailable", store-backed requests answer 503) and keep
            # trying, so an instance started while its Valkey is away, full or answering garbage
            # recovers by itself.
            logger.warning(
                "task store cannot be opened at start (%s); retrying in the background", describe_failure(exc)
            )
            self._opening = asyncio.create_task(self._open_when_possible())
            return
        await self._opened_now()

    async def _open_when_possible(self) -> None:
        pause = _REOPEN_PAUSE_S[0]
        while True:
            await asyncio.sleep(pause)
            pause = min(pause * 2, _REOPEN_PAUSE_S[1])
            try:
                await self.store.open()
            except Exception as exc:  # noqa: BLE001 - still not possible: try again later
                logger.info("task store still cannot be opened (%s)", describe_failure(exc))
                continue
            logger.info("task store available")
            await self._opened_now()
            return

    async def _opened_now(self) -> None:
        self._opened = True
        if self.worker is not None:
            await self.worker.start()

    async def ready(self) -> None:
        """Raise unless this process can do its work: the store is open, answers and accepts writes (and
        keeps them: no eviction), and the task workers it should run are running (a worker loop that
        died is started again; meanwhile the process is not ready)."""
        if not self._opened:
            raise TaskStoreUnavailable("task store not opened yet")
        if self._valkey is not None:
            await self._valkey.health.probe()
        else:
            await self.store.ping()
        if self.worker is not None and not self.worker.healthy:
            raise Busy("task workers are not running")

    async def stop(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
        if self.engine is not None:
            self.engine.close()
        if self.worker is not None:
            await self.worker.stop(self.settings.worker.shutdown_grace_s)
        if self._sessions is not None:
            await self._sessions.close()
        await self.store.close()
        if self._valkey is not None:
            await self._valkey.close()
        if self._traced:
            await stop_tracing()


def serve_app(settings: Settings) -> tuple[Runtime, App]:
    """The app of ``ext-tasks serve`` (and of each of its worker processes), with its runtime."""
    from .http import create_app

    registry = load_registry(settings.tools)
    runtime = Runtime(registry, settings)
    authenticator = build_authenticator(settings)
    app = create_app(
        runtime.handler,
        settings,
        authenticator,
        # The metadata's scopes_supported names the tools' scopes too, so a client can ask for them.
        tool_scopes=[scope for tool in registry.tools.values() for scope in tool.scopes],
        on_startup=[runtime.start],
        on_shutdown=[runtime.stop, *closing(authenticator)],
        ready=runtime.ready,
        pacing=runtime.engine.pacing if runtime.engine is not None else None,
    )
    return runtime, app


def proxy_app(settings: Settings, upstream_url: str, version: str) -> App:
    """The app of ``ext-tasks proxy``: legacy clients served by the shim over a remote 2026-07-28 server,
    modern requests passed through unchanged."""
    from .http import create_app

    traced = start_tracing("ext-tasks-proxy")
    upstream = HttpUpstream(upstream_url, reading=Reading(settings.proxy))
    shared = SharedValkey(settings) if settings.valkey_url is not None else None
    sessions = build_sessions(settings, shared)
    info = {"name": "ext-tasks-proxy", "version": version}
    shim = build_shim(upstream, sessions, build_codec(settings, "ext-tasks-proxy"), settings, info)

    async def close() -> None:
        await sessions.close()
        if shared is not None:
            await shared.close()
        await upstream.close()
        if traced:
            await stop_tracing()

    router = EraRouter(ForwardingHandler(upstream), shim)
    authenticator = build_authenticator(settings)
    return create_app(router, settings, authenticator, on_shutdown=[close, *closing(authenticator)])
