"""Settings, read once at start from ``EXT_TASKS_*`` variables and CLI flags, and validated then.

Secrets (requestState keys, bearer tokens) are kept out of ``repr`` so they never reach a log line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .auth import parse_token_map
from .protocol.resume import parse_key

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class ConfigError(ValueError):
    """A setting is invalid or a combination of settings is unsafe; the server refuses to start."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 3001
    tools: str = "ext_tasks.examples.demo"
    workers: int = 1
    state_keys: tuple[bytes, ...] = field(default=(), repr=False)
    state_ttl_s: int = 600
    state_encrypt: bool = False
    audience: str | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_s: float = 30.0
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    cache_ttl_ms: int = 60_000
    keepalive_s: float = 15.0
    tokens: Mapping[str, str] = field(default_factory=dict, repr=False)
    log_level: str = "info"
    log_format: str = "json"
    server: str = "hypercorn"
    valkey_url: str | None = field(default=None, repr=False)  # may carry a password
    valkey_prefix: str = "ext-tasks"
    run_workers: bool = True
    run_concurrency: int = 16
    lease_s: float = 10.0
    max_attempts: int = 3
    shutdown_grace_s: float = 10.0
    task_ttl_ms: int = 3_600_000
    task_max_ttl_ms: int = 86_400_000
    poll_interval_ms: int = 250
    poll_max_ms: int = 5_000
    sensitive_grace_ms: int = 30_000
    idempotency_window_s: int = 86_400
    legacy: bool = True
    max_active_tasks: int = 1_000
    state_single_use: bool = False
    poll_rate_limit: bool = False
    strict_headers: bool = False
    max_stored_tasks: int = 10_000
    max_sessions: int = 100
    max_waits: int = 256
    max_result_bytes: int = 1024 * 1024
    valkey_max_connections: int = 64

    @property
    def bound_to_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def several_processes_answer(self) -> bool:
        """True when a retry may reach a process other than the one that issued its state: several
        hypercorn workers, or a shared Valkey (which exists to let several instances serve one fleet)."""
        return self.workers > 1 or self.valkey_url is not None

    def validate(self) -> Settings:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be between 0 and 65535, not {self.port}")
        if self.workers < 1:
            raise ConfigError("workers must be at least 1")
        if self.several_processes_answer and not self.state_keys:
            raise ConfigError(
                "several processes can answer requests, so they must share requestState keys: "
                "set EXT_TASKS_STATE_KEYS (generate one with `ext-tasks keygen`)"
            )
        if self.workers > 1 and self.valkey_url is None:
            raise ConfigError(
                "--workers > 1 needs a shared task store: set --valkey-url / EXT_TASKS_VALKEY_URL "
                "(with the in-memory store each process would see only its own tasks)"
            )
        return self._validate_limits()

    def _validate_choices(self) -> Settings:
        if self.server not in ("hypercorn", "granian"):
            raise ConfigError("EXT_TASKS_SERVER must be hypercorn or granian")
        if self.log_format not in ("json", "text"):
            raise ConfigError("EXT_TASKS_LOG_FORMAT must be json or text")
        return self

    def _validate_caps(self) -> Settings:
        for name in ("max_active_tasks", "max_stored_tasks", "max_sessions", "max_waits"):
            if getattr(self, name) < 0:
                raise ConfigError(f"EXT_TASKS_{name.upper()} must not be negative (0: no cap)")
        if self.max_result_bytes < 1024 or self.valkey_max_connections < 4:
            raise ConfigError(
                "EXT_TASKS_MAX_RESULT_BYTES must be at least 1024 and EXT_TASKS_VALKEY_MAX_CONNECTIONS at least 4"
            )
        if self.body_timeout_s <= 0:
            raise ConfigError("EXT_TASKS_BODY_TIMEOUT_S must be positive")
        return self

    def _validate_limits(self) -> Settings:
        self._validate_choices()
        self._validate_caps()
        if self.state_ttl_s <= 0:
            raise ConfigError("EXT_TASKS_STATE_TTL_S must be positive")
        if self.max_body_bytes < 1024:
            raise ConfigError("EXT_TASKS_MAX_BODY_BYTES must be at least 1024")
        if self.cache_ttl_ms < 0:
            raise ConfigError("EXT_TASKS_CACHE_TTL_MS must not be negative")
        if self.keepalive_s <= 0:
            raise ConfigError("EXT_TASKS_KEEPALIVE_S must be positive")
        if self.run_concurrency < 1 or self.max_attempts < 1:
            raise ConfigError("EXT_TASKS_RUN_CONCURRENCY and EXT_TASKS_MAX_ATTEMPTS must be at least 1")
        if self.lease_s < 1 or self.shutdown_grace_s < 0:
            raise ConfigError("EXT_TASKS_LEASE_S must be at least 1 and EXT_TASKS_SHUTDOWN_GRACE_S not negative")
        if not 0 < self.task_ttl_ms <= self.task_max_ttl_ms:
            raise ConfigError("EXT_TASKS_TASK_TTL_MS must be positive and at most EXT_TASKS_TASK_MAX_TTL_MS")
        if not 0 < self.poll_interval_ms <= self.poll_max_ms:
            raise ConfigError("EXT_TASKS_POLL_INTERVAL_MS must be positive and at most EXT_TASKS_POLL_INTERVAL_MAX_MS")
        if self.sensitive_grace_ms < 0 or self.idempotency_window_s <= 0:
            raise ConfigError(
                "EXT_TASKS_SENSITIVE_GRACE_MS must not be negative and EXT_TASKS_IDEMPOTENCY_WINDOW_S must be positive"
            )
        return self

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **{name: value for name, value in overrides.items() if value is not None})


def _split(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.replace("\n", ",").split(",") if item.strip())


def _keys(env: Mapping[str, str]) -> tuple[bytes, ...]:
    texts: list[str] = list(_split(env.get("EXT_TASKS_STATE_KEYS", "")))
    key_file = env.get("EXT_TASKS_STATE_KEYS_FILE")
    if key_file:
        try:
            lines = Path(key_file).read_text().splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read EXT_TASKS_STATE_KEYS_FILE: {exc.strerror}") from None
        texts.extend(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    keys = []
    for index, text in enumerate(texts):
        try:
            keys.append(parse_key(text))
        except ValueError as exc:
            # Say which key is wrong, never what it is.
            raise ConfigError(f"requestState key #{index + 1}: {exc}") from None
    return tuple(keys)


def _tokens(env: Mapping[str, str]) -> dict[str, str]:
    text = env.get("EXT_TASKS_TOKENS", "")
    token_file = env.get("EXT_TASKS_TOKENS_FILE")
    if token_file:
        try:
            text += "\n" + Path(token_file).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read EXT_TASKS_TOKENS_FILE: {exc.strerror}") from None
    try:
        return parse_token_map(text)
    except ValueError as exc:
        raise ConfigError(f"EXT_TASKS_TOKENS: {exc}") from None


def _number(env: Mapping[str, str], name: str, default: float, kind: type[int] | type[float] = int) -> Any:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, not {raw!r}") from None


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    defaults = Settings()
    return Settings(
        host=env.get("EXT_TASKS_HOST", defaults.host),
        port=_number(env, "EXT_TASKS_PORT", defaults.port),
        tools=env.get("EXT_TASKS_TOOLS", defaults.tools),
        workers=_number(env, "EXT_TASKS_WORKERS", defaults.workers),
        state_keys=_keys(env),
        state_ttl_s=_number(env, "EXT_TASKS_STATE_TTL_S", defaults.state_ttl_s),
        state_encrypt=_flag(env, "EXT_TASKS_STATE_ENCRYPT"),
        audience=env.get("EXT_TASKS_AUDIENCE") or None,
        max_body_bytes=_number(env, "EXT_TASKS_MAX_BODY_BYTES", defaults.max_body_bytes),
        body_timeout_s=_number(env, "EXT_TASKS_BODY_TIMEOUT_S", defaults.body_timeout_s, float),
        allowed_hosts=_split(env.get("EXT_TASKS_ALLOWED_HOSTS", "")),
        allowed_origins=_split(env.get("EXT_TASKS_ALLOWED_ORIGINS", "")),
        cache_ttl_ms=_number(env, "EXT_TASKS_CACHE_TTL_MS", defaults.cache_ttl_ms),
        keepalive_s=_number(env, "EXT_TASKS_KEEPALIVE_S", defaults.keepalive_s, float),
        tokens=_tokens(env),
        log_level=env.get("EXT_TASKS_LOG_LEVEL", defaults.log_level),
        log_format=env.get("EXT_TASKS_LOG_FORMAT", defaults.log_format),
        server=env.get("EXT_TASKS_SERVER", defaults.server),
        valkey_url=env.get("EXT_TASKS_VALKEY_URL") or None,
        valkey_prefix=env.get("EXT_TASKS_VALKEY_PREFIX", defaults.valkey_prefix),
        run_workers=not _flag(env, "EXT_TASKS_NO_WORKERS"),
        run_concurrency=_number(env, "EXT_TASKS_RUN_CONCURRENCY", defaults.run_concurrency),
        lease_s=_number(env, "EXT_TASKS_LEASE_S", defaults.lease_s, float),
        max_attempts=_number(env, "EXT_TASKS_MAX_ATTEMPTS", defaults.max_attempts),
        shutdown_grace_s=_number(env, "EXT_TASKS_SHUTDOWN_GRACE_S", defaults.shutdown_grace_s, float),
        task_ttl_ms=_number(env, "EXT_TASKS_TASK_TTL_MS", defaults.task_ttl_ms),
        task_max_ttl_ms=_number(env, "EXT_TASKS_TASK_MAX_TTL_MS", defaults.task_max_ttl_ms),
        poll_interval_ms=_number(env, "EXT_TASKS_POLL_INTERVAL_MS", defaults.poll_interval_ms),
        poll_max_ms=_number(env, "EXT_TASKS_POLL_INTERVAL_MAX_MS", defaults.poll_max_ms),
        sensitive_grace_ms=_number(env, "EXT_TASKS_SENSITIVE_GRACE_MS", defaults.sensitive_grace_ms),
        idempotency_window_s=_number(env, "EXT_TASKS_IDEMPOTENCY_WINDOW_S", defaults.idempotency_window_s),
        legacy=not _flag(env, "EXT_TASKS_NO_LEGACY"),
        max_active_tasks=_number(env, "EXT_TASKS_MAX_ACTIVE_TASKS", defaults.max_active_tasks),
        state_single_use=_flag(env, "EXT_TASKS_STATE_SINGLE_USE"),
        poll_rate_limit=_flag(env, "EXT_TASKS_POLL_RATE_LIMIT"),
        strict_headers=_flag(env, "EXT_TASKS_STRICT_HEADERS"),
        max_stored_tasks=_number(env, "EXT_TASKS_MAX_STORED_TASKS", defaults.max_stored_tasks),
        max_sessions=_number(env, "EXT_TASKS_MAX_SESSIONS", defaults.max_sessions),
        max_waits=_number(env, "EXT_TASKS_MAX_WAITS", defaults.max_waits),
        max_result_bytes=_number(env, "EXT_TASKS_MAX_RESULT_BYTES", defaults.max_result_bytes),
        valkey_max_connections=_number(env, "EXT_TASKS_VALKEY_MAX_CONNECTIONS", defaults.valkey_max_connections),
    )
