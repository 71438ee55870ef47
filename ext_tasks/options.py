"""The option classes the parts take, one per section of the settings (:mod:`.config` reads them from
``EXT_TASKS_*`` variables): :class:`EngineOptions` (the request surface), :class:`TaskOptions` (the task
policy and what a task keeps), :class:`WorkerOptions` (running tasks), :class:`LegacyOptions` (the
2025-11-25 shim), :class:`ProxyOptions` (``ext-tasks proxy`` reading its upstream), :class:`AuthOptions`
(OAuth 2.1 resource server, :mod:`ext_tasks.auth`), :class:`AdminOptions` (the operator's admin listener).

A field's name is its variable's (``EXT_TASKS_<NAME>``); its default is written once, here, and what a
value must be is its ``Field``'s constraints (checked when the settings are read). The parts
import their options from this module, not from :mod:`.config`, so they need nothing of how settings are
read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

#: Defaults of the Valkey settings (``EXT_TASKS_VALKEY_*``), written here once for the settings and for the
#: store's own constructors (which tests and embedders call without settings); kept apart from the store
#: so that reading settings loads no Valkey client.
VALKEY_PREFIX: Final = "ext-tasks"
#: Connections one client may hold at once (commands, blocking reads and the pub/sub connection).
VALKEY_MAX_CONNECTIONS: Final = 64
#: Replicas that must confirm a write (0: none, Valkey's own asynchronous replication), and how long to
#: wait for them.
VALKEY_MIN_REPLICA_ACKS: Final = 0
VALKEY_ACK_TIMEOUT_MS: Final = 1000


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    #: Fields set by code (tests, tuning), not read from the environment.
    internal: ClassVar[frozenset[str]] = frozenset()


class EngineOptions(Section):
    cache_ttl_ms: int = Field(60_000, ge=0)
    keepalive_s: float = Field(15.0, gt=0)
    #: Refuse a ``tasks/*`` request without ``Mcp-Name`` (by default it is served and counted).
    strict_headers: bool = False
    #: Open waits (listen, legacy GET streams, tasks/result) per principal and process (0: no cap).
    max_waits: int = Field(256, ge=0)
    #: Cost units a principal may spend a second on costly requests, per process (0: no budget);
    #: see ``ext_tasks.pacing``.
    pacing_rate: float = Field(1000.0, ge=0)
    #: Cost units a principal may save up (the largest burst of costly requests).
    pacing_burst: int = Field(5000, ge=1)


class TaskOptions(Section):
    """The server's task policy; published to clients in ``server/discover`` (:meth:`published`)."""

    #: The lifetime a task is granted: its ``ttlMs`` at creation; while unfinished, ``createdAt + ttlMs``
    #: stays this far ahead of each read; and the least a finished task is kept after its end.
    task_ttl_ms: int = Field(3_600_000, gt=0)
    #: The longest a task may stay unfinished (it then ends ``failed``); caps every lifetime and retention.
    task_max_ttl_ms: int = 86_400_000
    #: How long a finished task is kept after its end, by outcome (``None``: its lifetime grant). A value
    #: under a task's grant counts as the grant: a reader was promised that much.
    retain_completed_ms: int | None = Field(None, gt=0)
    retain_failed_ms: int | None = Field(86_400_000, gt=0)
    retain_cancelled_ms: int | None = Field(None, gt=0)
    poll_interval_ms: int = Field(250, gt=0)
    poll_interval_max_ms: int = 5_000
    sensitive_grace_ms: int = Field(30_000, ge=0)
    idempotency_window_s: int = Field(86_400, gt=0)
    #: Unfinished tasks one principal may have at once (0: no cap).
    max_active_tasks: int = Field(1_000, ge=0)
    #: Tasks one principal may have kept at once, in any status, until they expire (0: no cap).
    max_stored_tasks: int = Field(10_000, ge=0)
    #: The encoded JSON size of the arguments a task keeps (inline calls keep none; bulk input: a URI).
    max_task_argument_bytes: int = Field(256 * 1024, ge=1024)
    #: The encoded JSON size of all answers a task keeps: a ``requestState``'s bound (the same answers).
    max_answer_bytes: int = Field(256 * 1024, ge=1024)
    #: Bytes one principal's kept tasks may hold in all (0: no cap); ordinary tasks meet the stored-task
    #: cap first, this stops large ones (a thousand with the largest arguments).
    max_stored_bytes: int = Field(256 * 1024 * 1024, ge=0)
    #: Refuse (429) a ``tasks/get`` sooner than half the advertised ``pollIntervalMs`` after the last one.
    poll_rate_limit: bool = False
    #: Tasks of one principal running (or queued to run) at once, over the fleet (0: no cap). The rest
    #: wait in the principal's own line, outside the shared queue: another principal's runs never queue
    #: behind one principal's flood (``ext_tasks.flow``).
    max_running_per_principal: int = Field(0, ge=0)
    #: Tasks one principal may create a second, over the fleet (0: no cap): a token bucket in the store.
    create_rate_per_principal: float = Field(0.0, ge=0)
    #: Creations one principal may make at once past that rate (0: the rate, at least 1).
    create_burst_per_principal: int = Field(0, ge=0)

    @property
    def create_burst(self) -> int:
        return self.create_burst_per_principal or max(1, math.ceil(self.create_rate_per_principal))

    @property
    def idempotency_window_ms(self) -> int:
        return self.idempotency_window_s * 1000

    def published(self) -> dict[str, int]:
        return {
            "defaultTtlMs": self.task_ttl_ms,
            "maxTtlMs": self.task_max_ttl_ms,
            "pollIntervalMs": self.poll_interval_ms,
            "maxPollIntervalMs": self.poll_interval_max_ms,
            "sensitiveGraceMs": self.sensitive_grace_ms,
            # Retention by outcome, counted from the end (0: the task's own lifetime, ``defaultTtlMs``).
            "retainCompletedMs": self.retain_completed_ms or 0,
            "retainFailedMs": self.retain_failed_ms or 0,
            "retainCancelledMs": self.retain_cancelled_ms or 0,
            "idempotencyWindowMs": self.idempotency_window_ms,
            # What a client may make a task keep: told up front, so it need not learn it from a 413.
            "maxTaskArgumentBytes": self.max_task_argument_bytes,
            "maxAnswerBytes": self.max_answer_bytes,
        }


class WorkerOptions(Section):
    internal: ClassVar[frozenset[str]] = frozenset({"block_ms", "restart_pause_s"})

    #: Serve requests only; run tasks in ``ext-tasks worker`` processes.
    no_workers: bool = False
    run_concurrency: int = Field(16, ge=1)
    lease_s: float = Field(10.0, gt=0)
    max_attempts: int = Field(3, ge=1)
    shutdown_grace_s: float = Field(10.0, ge=0)
    #: The largest tool result a task may keep (encoded JSON); a larger one ends the task ``failed``.
    max_result_bytes: int = Field(1024 * 1024, ge=1024)
    #: How long one wait for new runs may block.
    block_ms: int = 1000
    #: Pause before a loop that died is started again.
    restart_pause_s: float = 1.0


class LegacyOptions(Section):
    #: Do not serve 2025-11-25 clients (no migration shim).
    no_legacy: bool = False
    #: Live sessions one principal may hold (0: no cap).
    max_sessions: int = Field(100, ge=0)


class ProxyOptions(Section):
    """How ``ext-tasks proxy`` reads its upstream's answers (a server it does not control)."""

    #: The largest answer taken (a JSON body, or one event of a stream); larger: 502. For larger results.
    proxy_max_answer_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    #: How long the upstream may send nothing (keep-alives count) before 504; for longer inline tools.
    proxy_read_timeout_s: float = Field(60.0, gt=0)


class AdminOptions(Section):
    """The admin listener (the operator's API and page, :mod:`ext_tasks.admin_http`): off while
    ``admin_port`` is unset; never on the MCP listener, with credentials of its own."""

    #: Its port (0: any free one); unset: no admin listener.
    admin_port: int | None = Field(None, ge=0, le=65535)
    #: The address it binds: loopback unless an operator says otherwise.
    admin_host: str = "127.0.0.1"
    #: Its bearer tokens (comma-separated), none of them a principal of /mcp; required with a port.
    admin_tokens: tuple[SecretStr, ...] = Field((), repr=False)
    #: How long a task may stay ``input_required`` before the operator's view calls it stuck.
    admin_stuck_input_s: float = Field(3600.0, gt=0)

    @field_validator("admin_tokens", mode="before")
    @classmethod
    def _token_list(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return tuple(item.strip() for item in value.replace("\n", ",").split(",") if item.strip())

    @property
    def enabled(self) -> bool:
        return self.admin_port is not None


#: The signature algorithms accepted by default: every asymmetric one of JWA (RFC 7518) and EdDSA
#: (RFC 8037). Symmetric ones (HS*) and ``none`` are never accepted (:mod:`ext_tasks.auth.checks`).
ASYMMETRIC_ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


class AuthOptions(Section):
    """The OAuth 2.1 resource server (MCP 2026-07-28 authorization); off while ``auth_issuers`` is empty.
    The checks of these values are :func:`ext_tasks.auth.checks.check_auth_options` (run at start)."""

    #: Issuer identifiers of the authorization servers whose access tokens are accepted (exact spelling).
    auth_issuers: tuple[str, ...] = ()
    #: The canonical URI of this MCP server (RFC 8707): the audience its tokens must name.
    auth_resource: str | None = None
    #: Other ``aud`` values naming this same server, accepted beside the resource (e.g. the application
    #: id Entra ID puts in its v2 tokens); compared exactly.
    auth_audiences: tuple[str, ...] = ()
    #: Scopes every request needs (a token without them: 403 insufficient_scope).
    auth_scopes: tuple[str, ...] = ()
    #: ``scopes_supported`` of the metadata; by default the required scopes and every tool's own.
    auth_scopes_supported: tuple[str, ...] | None = None
    #: The JWKS of every issuer, instead of its discovered ``jwks_uri``.
    auth_jwks_url: str | None = None
    #: RFC 7662 introspection endpoint, for tokens that are not JWTs.
    auth_introspection_url: str | None = None
    #: This server's client credentials at the introspection endpoint (client_secret_basic).
    auth_client_id: str | None = None
    auth_client_secret: SecretStr | None = None
    #: The JWS algorithms accepted (asymmetric only).
    auth_algorithms: tuple[str, ...] = ASYMMETRIC_ALGORITHMS
    #: Clock skew tolerated on ``exp``, ``nbf`` and ``iat`` (0 to 60).
    auth_leeway_s: int = 30
    #: Verified tokens remembered (by SHA-256) until they expire, so a token seen before is not verified again.
    auth_token_cache_size: int = 10_000
    #: The longest an introspection answer is trusted (a revoked token is refused at the latest then).
    auth_introspection_cache_s: float = 60.0
    #: Keys older than this are fetched again in the background (the old ones serve meanwhile).
    auth_keys_max_age_s: float = 3600.0
    #: The shortest time between two fetches of one issuer's keys for an unknown key id.
    auth_keys_refetch_s: float = 30.0
    #: How long one fetch from an authorization server (discovery and keys, or introspection) may take.
    auth_fetch_timeout_s: float = 5.0
    #: ``resource_name`` and ``resource_documentation`` of the metadata.
    auth_resource_name: str | None = None
    auth_resource_documentation: str | None = None

    @field_validator("auth_issuers", "auth_audiences", "auth_algorithms", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return tuple(item.strip() for item in value.replace("\n", ",").split(",") if item.strip())

    @field_validator("auth_scopes", "auth_scopes_supported", mode="before")
    @classmethod
    def _scope_list(cls, value: object) -> object:
        # Scopes are space-separated in OAuth; commas are accepted too, like the other lists.
        return tuple(value.replace(",", " ").split()) if isinstance(value, str) else value

    @property
    def enabled(self) -> bool:
        return bool(self.auth_issuers)


#: The sections of the settings, by field name.
SECTIONS: Final[Mapping[str, type[Section]]] = {
    "engine": EngineOptions,
    "tasks": TaskOptions,
    "worker": WorkerOptions,
    "legacy": LegacyOptions,
    "proxy": ProxyOptions,
    "auth": AuthOptions,
    "admin": AdminOptions,
}
