"""Settings, read once at start from ``EXT_TASKS_*`` variables and CLI flags, and validated then
(pydantic-settings).

One name per setting, from the variable down to the code: ``EXT_TASKS_<NAME>`` is the field ``<name>``,
of the settings themselves or of one of their sections, which are the option classes the parts take
(:mod:`.options`). Each default is written once, on its field. An empty variable means the default.

Secrets (requestState keys, bearer tokens, a Valkey URL that may carry a password, the OAuth client
secret) are kept out of
``repr`` and out of every error message, so they never reach a log line.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .auth import parse_token_map
from .auth.checks import check_auth_options
from .options import SECTIONS, AuthOptions, EngineOptions, LegacyOptions, ProxyOptions, TaskOptions, WorkerOptions
from .protocol.resume import parse_key

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
PREFIX: Final = "EXT_TASKS_"


class ConfigError(ValueError):
    """A setting is invalid or a combination of settings is unsafe; the server refuses to start."""


#: Where a settings field lives (a section, or the settings themselves) and the variable it reads.
_ENVIRONMENT: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("environment", default=None)


class _FlatEnvironment(PydanticBaseSettingsSource):
    """``EXT_TASKS_<NAME>`` for every field, sections included (their fields have flat names too)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every field at once

    def __call__(self) -> dict[str, Any]:
        env = _ENVIRONMENT.get()
        if env is None:
            return {}  # ``Settings(...)`` in code: the defaults and what is passed, nothing else
        found: dict[str, Any] = {}
        for name in self.settings_cls.model_fields:
            section = SECTIONS.get(name)
            if section is None:
                if (value := env.get(PREFIX + name.upper())) not in (None, ""):
                    found[name] = value
                continue
            values = {
                field: value
                for field in section.model_fields
                if field not in section.internal and (value := env.get(PREFIX + field.upper())) not in (None, "")
            }
            if values:
                found[name] = values
        return found


def _split(text: object) -> object:
    if not isinstance(text, str):
        return text
    return tuple(item.strip() for item in text.replace("\n", ",").split(",") if item.strip())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=False)

    host: str = "127.0.0.1"
    port: int = 3001
    tools: str = "ext_tasks.examples.demo"
    workers: int = 1
    server: str = "hypercorn"
    log_level: str = "info"
    log_format: str = "json"
    state_keys: tuple[bytes, ...] = Field(default=(), repr=False)
    state_keys_file: Path | None = Field(default=None, repr=False)
    state_ttl_s: int = 600
    state_encrypt: bool = False
    state_single_use: bool = False
    audience: str | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_s: float = 30.0
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    tokens: Mapping[str, str] = Field(default_factory=dict, repr=False)
    tokens_file: Path | None = Field(default=None, repr=False)
    valkey_url: str | None = Field(default=None, repr=False)  # may carry a password
    valkey_prefix: str = "ext-tasks"
    valkey_max_connections: int = 64
    valkey_min_replica_acks: int = 0
    valkey_ack_timeout_ms: int = 1000
    #: Run on a Valkey whose maxmemory-policy may evict keys (by default such a store is refused at start
    #: and makes the process unready): it can silently lose tasks, idempotency keys and queued runs.
    valkey_allow_eviction: bool = False
    engine: EngineOptions = EngineOptions()
    tasks: TaskOptions = TaskOptions()
    worker: WorkerOptions = WorkerOptions()
    legacy: LegacyOptions = LegacyOptions()
    proxy: ProxyOptions = ProxyOptions()
    auth: AuthOptions = AuthOptions()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _FlatEnvironment(settings_cls))

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split(value)

    @field_validator("state_keys", mode="before")
    @classmethod
    def _keys(cls, value: object) -> object:
        texts = _split(value)
        if not isinstance(texts, tuple) or not all(isinstance(text, str) for text in texts):
            return texts
        return _parsed_keys(texts, "EXT_TASKS_STATE_KEYS")

    @field_validator("tokens", mode="before")
    @classmethod
    def _token_map(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return parse_token_map(value)
        except ValueError as exc:
            raise ConfigError(f"EXT_TASKS_TOKENS: {exc}") from None

    @model_validator(mode="after")
    def _files(self) -> Settings:
        """Keys and tokens may also come from files (kept out of the environment); they add to the
        variables' own, after them."""
        updates: dict[str, Any] = {}
        if self.state_keys_file is not None:
            lines = _read(self.state_keys_file, "EXT_TASKS_STATE_KEYS_FILE").splitlines()
            texts = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
            updates["state_keys"] = (*self.state_keys, *_parsed_keys(texts, "EXT_TASKS_STATE_KEYS_FILE"))
            updates["state_keys_file"] = None
        if self.tokens_file is not None:
            try:
                extra = parse_token_map(_read(self.tokens_file, "EXT_TASKS_TOKENS_FILE"))
            except ValueError as exc:
                raise ConfigError(f"EXT_TASKS_TOKENS: {exc}") from None
            updates["tokens"] = {**self.tokens, **extra}
            updates["tokens_file"] = None
        for name, value in updates.items():
            object.__setattr__(self, name, value)
        return self

    # --- what the settings imply ------------------------------------------------------------------

    @property
    def bound_to_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def several_processes_answer(self) -> bool:
        """True when a retry may reach a process other than the one that issued its state: several
        hypercorn workers, or a shared Valkey (which exists to let several instances serve one fleet)."""
        return self.workers > 1 or self.valkey_url is not None

    def with_overrides(self, **overrides: Any) -> Settings:
        """These settings with the CLI's flags applied (a ``None`` flag keeps the current value); a name
        may be a field of a section."""
        top: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        for name, value in overrides.items():
            if value is None:
                continue
            section = next((key for key, model in SECTIONS.items() if name in model.model_fields), None)
            if section is None:
                top[name] = value
            else:
                sections.setdefault(section, {})[name] = value
        for section, values in sections.items():
            top[section] = getattr(self, section).model_copy(update=values)
        return self.model_copy(update=top)

    # --- checks of combinations and ranges ------------------------------------------------------------

    def validate(self) -> Settings:  # type: ignore[override]
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
        for check in (self._choices, self._caps, self._limits, self._task_policy, self._auth):
            check()
        return self

    def _choices(self) -> None:
        if self.server not in ("hypercorn", "granian"):
            raise ConfigError("EXT_TASKS_SERVER must be hypercorn or granian")
        if self.log_format not in ("json", "text"):
            raise ConfigError("EXT_TASKS_LOG_FORMAT must be json or text")

    def _caps(self) -> None:
        caps = {
            "max_active_tasks": self.tasks.max_active_tasks,
            "max_stored_tasks": self.tasks.max_stored_tasks,
            "max_stored_bytes": self.tasks.max_stored_bytes,
            "max_sessions": self.legacy.max_sessions,
            "max_waits": self.engine.max_waits,
        }
        for name, value in caps.items():
            if value < 0:
                raise ConfigError(f"EXT_TASKS_{name.upper()} must not be negative (0: no cap)")
        if self.worker.max_result_bytes < 1024 or self.valkey_max_connections < 4:
            raise ConfigError(
                "EXT_TASKS_MAX_RESULT_BYTES must be at least 1024 and EXT_TASKS_VALKEY_MAX_CONNECTIONS at least 4"
            )
        tasks = self.tasks  # one task of the largest size must fit in the byte budget, or none would
        largest = max(1 << 20, tasks.max_task_argument_bytes + tasks.max_answer_bytes + self.worker.max_result_bytes)
        if min(tasks.max_task_argument_bytes, tasks.max_answer_bytes) < 1024 or 0 < tasks.max_stored_bytes < largest:
            raise ConfigError(
                "EXT_TASKS_MAX_TASK_ARGUMENT_BYTES and EXT_TASKS_MAX_ANSWER_BYTES must be at least 1024, and "
                f"EXT_TASKS_MAX_STORED_BYTES 0 (no cap) or at least {largest} (1 MiB, and a task of the largest size)"
            )

    def _limits(self) -> None:
        if self.state_ttl_s <= 0:
            raise ConfigError("EXT_TASKS_STATE_TTL_S must be positive")
        if self.max_body_bytes < 1024:
            raise ConfigError("EXT_TASKS_MAX_BODY_BYTES must be at least 1024")
        if self.body_timeout_s <= 0:
            raise ConfigError("EXT_TASKS_BODY_TIMEOUT_S must be positive")
        if self.proxy.proxy_max_answer_bytes < 1024 or self.proxy.proxy_read_timeout_s <= 0:
            raise ConfigError(
                "EXT_TASKS_PROXY_MAX_ANSWER_BYTES must be at least 1024 and EXT_TASKS_PROXY_READ_TIMEOUT_S positive"
            )
        if self.valkey_min_replica_acks < 0 or self.valkey_ack_timeout_ms < 1:
            raise ConfigError(
                "EXT_TASKS_VALKEY_MIN_REPLICA_ACKS must not be negative and EXT_TASKS_VALKEY_ACK_TIMEOUT_MS "
                "must be at least 1"
            )
        if self.valkey_min_replica_acks and self.valkey_url is None:
            raise ConfigError("EXT_TASKS_VALKEY_MIN_REPLICA_ACKS needs a Valkey store (EXT_TASKS_VALKEY_URL)")
        if self.engine.cache_ttl_ms < 0:
            raise ConfigError("EXT_TASKS_CACHE_TTL_MS must not be negative")
        if self.engine.keepalive_s <= 0:
            raise ConfigError("EXT_TASKS_KEEPALIVE_S must be positive")
        if self.engine.pacing_rate < 0 or self.engine.pacing_burst < 1:
            raise ConfigError(
                "EXT_TASKS_PACING_RATE must not be negative (0: no budget) and EXT_TASKS_PACING_BURST at least 1"
            )
        worker = self.worker
        if worker.run_concurrency < 1 or worker.max_attempts < 1:
            raise ConfigError("EXT_TASKS_RUN_CONCURRENCY and EXT_TASKS_MAX_ATTEMPTS must be at least 1")
        if worker.lease_s < 1 or worker.shutdown_grace_s < 0:
            raise ConfigError("EXT_TASKS_LEASE_S must be at least 1 and EXT_TASKS_SHUTDOWN_GRACE_S not negative")

    def _task_policy(self) -> None:
        tasks = self.tasks
        if not 0 < tasks.task_ttl_ms <= tasks.task_max_ttl_ms:
            raise ConfigError("EXT_TASKS_TASK_TTL_MS must be positive and at most EXT_TASKS_TASK_MAX_TTL_MS")
        if not 0 < tasks.poll_interval_ms <= tasks.poll_interval_max_ms:
            raise ConfigError("EXT_TASKS_POLL_INTERVAL_MS must be positive and at most EXT_TASKS_POLL_INTERVAL_MAX_MS")
        if tasks.sensitive_grace_ms < 0 or tasks.idempotency_window_s <= 0:
            raise ConfigError(
                "EXT_TASKS_SENSITIVE_GRACE_MS must not be negative and EXT_TASKS_IDEMPOTENCY_WINDOW_S must be positive"
            )

    def _auth(self) -> None:
        try:
            check_auth_options(self.auth)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _parsed_keys(texts: tuple[str, ...] | list[str], variable: str) -> tuple[bytes, ...]:
    keys = []
    for index, text in enumerate(texts):
        try:
            keys.append(parse_key(text))
        except ValueError as exc:
            # Say which key is wrong, never what it is.
            raise ConfigError(f"requestState key #{index + 1} of {variable}: {exc}") from None
    return tuple(keys)


def _read(path: Path, variable: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {variable}: {exc.strerror}") from None


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``env`` (the process environment by default); a variable that does not parse is
    a :class:`ConfigError` naming it (and never showing a secret's value)."""
    token = _ENVIRONMENT.set(os.environ if env is None else env)
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    finally:
        _ENVIRONMENT.reset(token)


def _describe(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = [str(part) for part in error["loc"] if isinstance(part, str)]
    name = location[1] if len(location) > 1 and location[0] in SECTIONS else location[0] if location else "?"
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):
        return str(cause)
    kind = str(error.get("type", ""))
    if kind.startswith(("int", "float")):
        return f"{PREFIX}{name.upper()} must be a number"
    if kind.startswith("bool"):
        return f"{PREFIX}{name.upper()} must be true or false"
    return f"{PREFIX}{name.upper()}: {error['msg']}"
