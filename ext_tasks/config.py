"""Settings, read once at start from ``EXT_TASKS_*`` variables and CLI flags, and validated then
(pydantic-settings).

One name per setting, from the variable down to the code: ``EXT_TASKS_<NAME>`` is the field ``<name>``,
of the settings themselves or of one of their sections, which are the option classes the parts take
(:mod:`.options`). Each default is written once, on its field (or taken from the part that owns it), and
what a value must be is its ``Field``'s constraints; :meth:`Settings.validate` checks only what is unsafe in
combination. The variables are read by pydantic-settings' environment source; an empty one means the
default.

Secrets (requestState keys, bearer tokens, a Valkey URL that may carry a password, the OAuth client
secret) are kept out of
``repr`` and out of every error message, so they never reach a log line.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from .auth import parse_token_map
from .auth.checks import check_auth_options
from .options import (
    SECTIONS,
    VALKEY_ACK_TIMEOUT_MS,
    VALKEY_MAX_CONNECTIONS,
    VALKEY_MIN_REPLICA_ACKS,
    VALKEY_PREFIX,
    AdminOptions,
    AuthOptions,
    EngineOptions,
    LegacyOptions,
    ProxyOptions,
    TaskOptions,
    WorkerOptions,
)
from .protocol.resume import STATE_TTL_S, parse_key

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
PREFIX: Final = "EXT_TASKS_"


class ConfigError(ValueError):
    """A setting is invalid or a combination of settings is unsafe; the server refuses to start."""


#: The variables :func:`settings_from_env` reads; ``None`` (``Settings(...)`` in code): none at all.
_ENVIRONMENT: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("environment", default=None)


class _Variables(EnvSettingsSource):
    """pydantic-settings' environment source (``EXT_TASKS_`` prefix, an empty variable means the default,
    values left as text for the fields' own parsing) over the variables :func:`settings_from_env` was
    given, for the settings' own fields or, under ``section``, for one section's: their variables have
    flat names too (``EXT_TASKS_LEASE_S``, not ``EXT_TASKS_WORKER__LEASE_S``)."""

    def __init__(self, model: type[Any], environment: Mapping[str, str], section: str | None = None) -> None:
        self._environment = environment
        self._section = section
        super().__init__(model, env_prefix=PREFIX, env_ignore_empty=True)
        self.config = {**self.config, "enable_decoding": False}  # lists are comma-separated, not JSON

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The variables are named in capitals only, as they always were (the source matches in lower case).
        return {name.lower(): value for name, value in self._environment.items() if name.isupper() and value != ""}

    def __call__(self) -> dict[str, Any]:
        values = super().__call__()
        if self._section is None:
            return {name: value for name, value in values.items() if name not in SECTIONS}
        internal = SECTIONS[self._section].internal  # set by code only
        found = {name: value for name, value in values.items() if name not in internal}
        return {self._section: found} if found else {}


def _split(text: object) -> object:
    if not isinstance(text, str):
        return text
    return tuple(item.strip() for item in text.replace("\n", ",").split(",") if item.strip())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=False)

    host: str = "127.0.0.1"
    port: int = Field(3001, ge=0, le=65535)
    tools: str = "ext_tasks.examples.demo"
    workers: int = Field(1, ge=1)
    server: Literal["hypercorn", "granian"] = "hypercorn"
    log_level: str = "info"
    log_format: Literal["json", "text"] = "json"
    state_keys: Annotated[tuple[bytes, ...], NoDecode] = Field(default=(), repr=False)
    state_keys_file: Path | None = Field(default=None, repr=False)
    state_ttl_s: int = Field(STATE_TTL_S, gt=0)
    state_encrypt: bool = False
    state_single_use: bool = False
    audience: str | None = None
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    body_timeout_s: float = Field(30.0, gt=0)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    tokens: Mapping[str, str] = Field(default_factory=dict, repr=False)
    tokens_file: Path | None = Field(default=None, repr=False)
    valkey_url: str | None = Field(default=None, repr=False)  # may carry a password
    valkey_prefix: str = VALKEY_PREFIX
    valkey_max_connections: int = Field(VALKEY_MAX_CONNECTIONS, ge=4)
    valkey_min_replica_acks: int = Field(VALKEY_MIN_REPLICA_ACKS, ge=0)
    valkey_ack_timeout_ms: int = Field(VALKEY_ACK_TIMEOUT_MS, ge=1)
    #: Run on a Valkey whose maxmemory-policy may evict keys (by default such a store is refused at start
    #: and makes the process unready): it can silently lose tasks, idempotency keys and queued runs.
    valkey_allow_eviction: bool = False
    engine: EngineOptions = EngineOptions()
    tasks: TaskOptions = TaskOptions()
    worker: WorkerOptions = WorkerOptions()
    legacy: LegacyOptions = LegacyOptions()
    proxy: ProxyOptions = ProxyOptions()
    auth: AuthOptions = AuthOptions()
    admin: AdminOptions = AdminOptions()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environment = _ENVIRONMENT.get()
        if environment is None:
            return (init_settings,)  # ``Settings(...)`` in code: the defaults and what is passed, nothing else
        sections = (_Variables(model, environment, name) for name, model in SECTIONS.items())
        return (init_settings, _Variables(settings_cls, environment), *sections)

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split(value)

    @field_validator("state_keys", mode="before")
    @classmethod
    def _keys(cls, value: object) -> object:
        return _keys_of(value)

    @field_validator("tokens", mode="before")
    @classmethod
    def _token_map(cls, value: object) -> object:
        return _tokens_of(value)

    @model_validator(mode="before")
    @classmethod
    def _files(cls, values: Any) -> Any:
        """Keys and tokens may also come from files (kept out of the environment); they add to the
        variables' own, after them."""
        if not isinstance(values, dict):
            return values
        values = dict(values)
        if (keys_file := values.pop("state_keys_file", None)) is not None:
            lines = _read(Path(keys_file), "EXT_TASKS_STATE_KEYS_FILE").splitlines()
            texts = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
            given = _keys_of(values.get("state_keys", ()))
            values["state_keys"] = (*given, *_parsed_keys(texts, "EXT_TASKS_STATE_KEYS_FILE"))
        if (tokens_file := values.pop("tokens_file", None)) is not None:
            try:
                extra = parse_token_map(_read(Path(tokens_file), "EXT_TASKS_TOKENS_FILE"))
            except ValueError as exc:
                raise ConfigError(f"EXT_TASKS_TOKENS: {exc}") from None
            values["tokens"] = {**_tokens_of(values.get("tokens", {})), **extra}
        return values

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
        """These settings with the CLI's flags applied (a ``None`` flag keeps the current value; a name
        may be a field of a section), validated as the variables are: a bad value is a
        :class:`ConfigError` naming its variable."""
        top: dict[str, Any] = dict(self)
        for name, value in overrides.items():
            if value is None:
                continue
            section = next((key for key, model in SECTIONS.items() if name in model.model_fields), None)
            if section is None:
                top[name] = value
            else:
                top[section] = {**dict(top[section]), name: value}
        try:
            return type(self).model_validate(top)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None

    # --- checks of combinations ---------------------------------------------------------------------

    def validate(self) -> Settings:  # type: ignore[override]
        """Refuse (:class:`ConfigError`) settings whose values each pass (their fields' constraints
        checked them when read) but that are unsafe or impossible together; run once at start, after
        the CLI's flags."""
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
        if self.valkey_min_replica_acks and self.valkey_url is None:
            raise ConfigError("EXT_TASKS_VALKEY_MIN_REPLICA_ACKS needs a Valkey store (EXT_TASKS_VALKEY_URL)")
        # Tests run sub-second leases through WorkerOptions; an operator's lease is at least a second.
        if self.worker.lease_s < 1:
            raise ConfigError("EXT_TASKS_LEASE_S must be at least 1")
        if self.admin.enabled and not self.admin.admin_tokens:
            raise ConfigError("EXT_TASKS_ADMIN_PORT needs EXT_TASKS_ADMIN_TOKENS (the admin listener's credentials)")
        if self.admin.enabled and self.server == "granian" and self.valkey_url is None:
            # granian's processes each hold their own in-memory store; the admin listener sees none of them.
            raise ConfigError("EXT_TASKS_ADMIN_PORT with --server granian needs a shared store (EXT_TASKS_VALKEY_URL)")
        self._task_policy()
        try:
            check_auth_options(self.auth)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return self

    def _task_policy(self) -> None:
        tasks = self.tasks
        if tasks.task_ttl_ms > tasks.task_max_ttl_ms:
            raise ConfigError("EXT_TASKS_TASK_TTL_MS must be positive and at most EXT_TASKS_TASK_MAX_TTL_MS")
        if tasks.poll_interval_ms > tasks.poll_interval_max_ms:
            raise ConfigError("EXT_TASKS_POLL_INTERVAL_MS must be positive and at most EXT_TASKS_POLL_INTERVAL_MAX_MS")
        # One task of the largest size must fit in the byte budget, or none would.
        largest = max(1 << 20, tasks.max_task_argument_bytes + tasks.max_answer_bytes + self.worker.max_result_bytes)
        if 0 < tasks.max_stored_bytes < largest:
            raise ConfigError(
                f"EXT_TASKS_MAX_STORED_BYTES must be 0 (no cap) or at least {largest} "
                "(1 MiB, and a task of the largest size)"
            )


def _keys_of(value: Any) -> Any:
    """Keys given as text (``EXT_TASKS_STATE_KEYS``: separated by commas or newlines) parsed; others as given."""
    texts = _split(value)
    if not isinstance(texts, tuple) or not all(isinstance(text, str) for text in texts):
        return texts
    return _parsed_keys(texts, "EXT_TASKS_STATE_KEYS")


def _tokens_of(value: Any) -> Any:
    """A token map given as text (``EXT_TASKS_TOKENS``) parsed; others as given."""
    if not isinstance(value, str):
        return value
    try:
        return parse_token_map(value)
    except ValueError as exc:
        raise ConfigError(f"EXT_TASKS_TOKENS: {exc}") from None


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
    """The first error, for the operator: the variable it is about and what it must be."""
    error = exc.errors()[0]
    location = [str(part) for part in error["loc"] if isinstance(part, str)]
    name = location[1] if len(location) > 1 and location[0] in SECTIONS else location[0] if location else "?"
    variable = f"{PREFIX}{name.upper()}"
    context = error.get("ctx", {})
    cause = context.get("error")
    if isinstance(cause, ConfigError):
        return str(cause)
    kind = str(error.get("type", ""))
    bounds = {
        "greater_than_equal": ("ge", "must not be negative", "must be at least {}"),
        "greater_than": ("gt", "must be positive", "must be greater than {}"),
        "less_than_equal": ("le", "must be at most {}", "must be at most {}"),
    }
    if kind in bounds:
        key, at_zero, otherwise = bounds[kind]
        bound = context.get(key)
        return f"{variable} " + (at_zero if bound == 0 else otherwise).format(bound)
    if kind == "literal_error":
        return f"{variable} must be {str(context.get('expected', '')).replace(chr(39), '')}"
    if kind.startswith(("int", "float")):
        return f"{variable} must be a number"
    if kind.startswith("bool"):
        return f"{variable} must be true or false"
    return f"{variable}: {error['msg']}"
