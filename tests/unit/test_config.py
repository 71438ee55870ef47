"""Settings come from ``EXT_TASKS_*`` variables, are checked once at start, and never show their secrets."""

from __future__ import annotations

import base64
import logging
import re
from pathlib import Path

import pytest

from ext_tasks.auth import AnonymousAuthenticator, BearerTokenAuthenticator
from ext_tasks.compose import build_authenticator, build_codec, build_store
from ext_tasks.config import PREFIX, ConfigError, Settings, settings_from_env
from ext_tasks.options import SECTIONS
from ext_tasks.protocol.errors import InvalidRequestState
from ext_tasks.protocol.resume import Binding, generate_key, parse_key

KEY_A = generate_key()
KEY_B = generate_key()
BINDING = Binding(method="tools/call", target="deploy", arguments_digest="d", principal="alice")


def test_empty_environment_gives_the_defaults() -> None:
    assert settings_from_env({}) == Settings()


def test_defaults_are_a_single_loopback_process() -> None:
    settings = Settings()

    assert (settings.host, settings.port, settings.workers) == ("127.0.0.1", 3001, 1)
    assert settings.bound_to_loopback
    assert not settings.several_processes_answer
    assert settings.validate() is settings


def test_every_variable_is_read() -> None:
    env = {
        "EXT_TASKS_HOST": "0.0.0.0",
        "EXT_TASKS_PORT": "8080",
        "EXT_TASKS_TOOLS": "my.tools",
        "EXT_TASKS_WORKERS": "3",
        "EXT_TASKS_STATE_KEYS": f"{KEY_A}, {KEY_B}",
        "EXT_TASKS_STATE_TTL_S": "120",
        "EXT_TASKS_STATE_ENCRYPT": "true",
        "EXT_TASKS_AUDIENCE": "fleet-a",
        "EXT_TASKS_MAX_BODY_BYTES": "2048",
        "EXT_TASKS_ALLOWED_HOSTS": "a.example, b.example",
        "EXT_TASKS_ALLOWED_ORIGINS": "https://a.example",
        "EXT_TASKS_CACHE_TTL_MS": "5",
        "EXT_TASKS_KEEPALIVE_S": "2.5",
        "EXT_TASKS_TOKENS": "tokA=alice,tokB=bob",
        "EXT_TASKS_LOG_LEVEL": "debug",
    }

    settings = settings_from_env(env)

    assert (settings.host, settings.port, settings.tools, settings.workers) == ("0.0.0.0", 8080, "my.tools", 3)
    assert settings.state_keys == (parse_key(KEY_A), parse_key(KEY_B))
    assert (settings.state_ttl_s, settings.state_encrypt, settings.audience) == (120, True, "fleet-a")
    assert settings.max_body_bytes == 2048
    assert settings.allowed_hosts == ("a.example", "b.example")
    assert settings.allowed_origins == ("https://a.example",)
    assert (settings.engine.cache_ttl_ms, settings.engine.keepalive_s) == (5, 2.5)
    assert dict(settings.tokens) == {"tokA": "alice", "tokB": "bob"}
    assert settings.log_level == "debug"
    assert not settings.bound_to_loopback
    assert settings.several_processes_answer


def test_replica_acknowledgement_is_read_and_needs_a_valkey_store() -> None:
    env = {
        "EXT_TASKS_VALKEY_URL": "valkey+sentinel://10.0.0.1:26379,10.0.0.2:26379/tasks",
        "EXT_TASKS_STATE_KEYS": KEY_A,
        "EXT_TASKS_VALKEY_MIN_REPLICA_ACKS": "2",
        "EXT_TASKS_VALKEY_ACK_TIMEOUT_MS": "250",
    }
    settings = settings_from_env(env).validate()
    assert (settings.valkey_min_replica_acks, settings.valkey_ack_timeout_ms) == (2, 250)
    assert (Settings().valkey_min_replica_acks, Settings().valkey_ack_timeout_ms) == (0, 1000)


@pytest.mark.parametrize(
    "url", ["valkey+sentinel://s1:26379", "valkey+sentinel://s1/tasks", "valkey+cluster://:pass@nohostport"]
)
def test_a_store_url_that_names_nothing_is_a_config_error_without_the_password(url: str) -> None:
    settings = Settings(valkey_url=url, state_keys=(parse_key(KEY_A),))
    with pytest.raises(ConfigError, match="EXT_TASKS_VALKEY_URL") as refused:
        build_store(settings)
    assert "pass" not in str(refused.value)


def test_state_keys_may_be_separated_by_newlines() -> None:
    settings = settings_from_env({"EXT_TASKS_STATE_KEYS": f"{KEY_A}\n{KEY_B}\n"})

    assert settings.state_keys == (parse_key(KEY_A), parse_key(KEY_B))


def test_state_keys_file_is_read_skipping_comments_and_blank_lines(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(f"# newest first\n{KEY_B}\n\n  # retired next week\n{KEY_A}\n")

    settings = settings_from_env({"EXT_TASKS_STATE_KEYS": KEY_A, "EXT_TASKS_STATE_KEYS_FILE": str(key_file)})

    assert settings.state_keys == (parse_key(KEY_A), parse_key(KEY_B), parse_key(KEY_A))


def test_unreadable_state_keys_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="EXT_TASKS_STATE_KEYS_FILE"):
        settings_from_env({"EXT_TASKS_STATE_KEYS_FILE": str(tmp_path / "missing")})


def test_tokens_file_is_read(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("# callers\ntokC=carol\n")

    settings = settings_from_env({"EXT_TASKS_TOKENS": "tokA=alice", "EXT_TASKS_TOKENS_FILE": str(token_file)})

    assert dict(settings.tokens) == {"tokA": "alice", "tokC": "carol"}


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)])
def test_flags_accept_the_usual_spellings(raw: str, expected: bool) -> None:
    assert settings_from_env({"EXT_TASKS_STATE_ENCRYPT": raw}).state_encrypt is expected


def test_flag_with_another_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="EXT_TASKS_STATE_ENCRYPT"):
        settings_from_env({"EXT_TASKS_STATE_ENCRYPT": "maybe"})


@pytest.mark.parametrize(
    "name", ["EXT_TASKS_PORT", "EXT_TASKS_WORKERS", "EXT_TASKS_STATE_TTL_S", "EXT_TASKS_KEEPALIVE_S"]
)
def test_number_that_does_not_parse_is_a_config_error_naming_the_variable(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        settings_from_env({name: "lots"})


def test_empty_number_means_the_default() -> None:
    assert settings_from_env({"EXT_TASKS_PORT": ""}).port == 3001


def test_several_workers_without_shared_keys_is_a_config_error() -> None:
    settings = settings_from_env({"EXT_TASKS_WORKERS": "2"})

    with pytest.raises(ConfigError, match="EXT_TASKS_STATE_KEYS"):
        settings.validate()


@pytest.mark.parametrize(
    "overrides",
    [
        {"port": 70000},
        {"port": -1},
        {"workers": 0},
        {"state_ttl_s": 0},
        {"max_body_bytes": 100},
        {"cache_ttl_ms": -1},
        {"keepalive_s": 0.0},
        {"valkey_min_replica_acks": -1},
        {"valkey_ack_timeout_ms": 0},
        {"valkey_min_replica_acks": 1},  # without a Valkey store there is no replica to ask
    ],
    ids=lambda overrides: next(iter(overrides)),
)
def test_unsafe_or_impossible_settings_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Settings().with_overrides(**overrides).validate()


def test_the_byte_bounds_are_read_and_checked() -> None:
    read = settings_from_env(
        {
            "EXT_TASKS_MAX_TASK_ARGUMENT_BYTES": "4096",
            "EXT_TASKS_MAX_ANSWER_BYTES": "8192",
            "EXT_TASKS_MAX_STORED_BYTES": "0",
        }
    ).validate()
    assert (read.tasks.max_task_argument_bytes, read.tasks.max_answer_bytes, read.tasks.max_stored_bytes) == (
        4096,
        8192,
        0,
    )
    defaults = Settings().tasks
    assert (defaults.max_task_argument_bytes, defaults.max_answer_bytes) == (256 * 1024, 256 * 1024)
    assert defaults.max_stored_bytes == 256 * 1024 * 1024
    for overrides in (
        {"max_task_argument_bytes": 1023},
        {"max_answer_bytes": 0},
        {"max_stored_bytes": -1},
        {"max_stored_bytes": 1024 * 1024 - 1},  # below 1 MiB
        {"max_stored_bytes": 2 * 1024 * 1024, "max_task_argument_bytes": 2 * 1024 * 1024},  # one task would not fit
    ):
        with pytest.raises(ConfigError, match="EXT_TASKS_MAX_"):
            Settings().with_overrides(**overrides).validate()


def test_overrides_of_none_keep_the_current_value() -> None:
    settings = Settings(port=9000).with_overrides(port=None, host="localhost")

    assert (settings.host, settings.port) == ("localhost", 9000)


SHORT_KEY = base64.urlsafe_b64encode(b"sixteen-byte-key").decode().rstrip("=")
BAD_KEYS = [SHORT_KEY, "not-a-key-at-all-but-secret", "=====", "Zq"]


@pytest.mark.parametrize("bad", BAD_KEYS)
def test_bad_key_is_a_config_error_that_does_not_show_the_key(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_env({"EXT_TASKS_STATE_KEYS": f"{KEY_A},{bad}"})

    message = str(caught.value)
    assert "#2" in message
    assert bad not in message
    assert KEY_A not in message


def test_bad_key_in_the_key_file_is_a_config_error_that_does_not_show_the_key(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(f"{SHORT_KEY}\n")

    with pytest.raises(ConfigError) as caught:
        settings_from_env({"EXT_TASKS_STATE_KEYS_FILE": str(key_file)})

    assert SHORT_KEY not in str(caught.value)


@pytest.mark.parametrize("text", ["tok-secret-1", "=alice", "tok-secret-1="])
def test_malformed_token_map_is_a_config_error_that_does_not_show_the_token(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_env({"EXT_TASKS_TOKENS": text})

    assert "tok-secret-1" not in str(caught.value)


def test_repr_of_settings_never_shows_keys_or_tokens() -> None:
    key = parse_key(KEY_A)
    settings = settings_from_env(
        {
            "EXT_TASKS_STATE_KEYS": KEY_A,
            "EXT_TASKS_TOKENS": "tok-SECRET-9=alice",
            "EXT_TASKS_VALKEY_URL": "redis://user:valkey-PASSWORD@db:6379/0",
        }
    )
    assert settings.state_keys == (key,)

    for shown in (repr(settings), str(settings), f"{settings!r}"):
        assert KEY_A not in shown
        assert repr(key) not in shown
        assert key.hex() not in shown
        assert "tok-SECRET-9" not in shown
        assert "valkey-PASSWORD" not in shown
        assert "state_keys" not in shown
        assert "tokens" not in shown


def test_build_codec_without_keys_warns_and_still_works(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ext_tasks.compose"):
        codec = build_codec(Settings(), "aud")

    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings, "no warning logged"
    assert "EXT_TASKS_STATE_KEYS" in warnings[0].getMessage()
    token = codec.seal(BINDING, state={"n": 1})
    assert codec.unseal(token, BINDING).state == {"n": 1}


def test_codecs_built_without_keys_do_not_accept_each_others_states() -> None:
    first = build_codec(Settings(), "aud")
    second = build_codec(Settings(), "aud")

    with pytest.raises(InvalidRequestState):
        second.unseal(first.seal(BINDING), BINDING)


def test_build_codec_without_keys_for_several_workers_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_codec(Settings(workers=2), "aud")


def test_codecs_built_from_the_same_keys_share_states(caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_from_env({"EXT_TASKS_STATE_KEYS": KEY_A, "EXT_TASKS_STATE_ENCRYPT": "1"})

    with caplog.at_level(logging.WARNING, logger="ext_tasks.compose"):
        one, two = build_codec(settings, "fleet"), build_codec(settings, "fleet")

    token = one.seal(BINDING, state="s")
    assert token.startswith("v1e.")
    assert two.unseal(token, BINDING).state == "s"
    assert not caplog.records


def test_authenticator_is_anonymous_without_tokens_and_bearer_with_them() -> None:
    assert isinstance(build_authenticator(Settings()), AnonymousAuthenticator)
    assert isinstance(build_authenticator(Settings(tokens={"t": "alice"})), BearerTokenAuthenticator)


def test_a_request_body_has_30_seconds_to_arrive_unless_configured() -> None:
    assert Settings().body_timeout_s == 30.0
    assert settings_from_env({}).body_timeout_s == 30.0
    assert settings_from_env({"EXT_TASKS_BODY_TIMEOUT_S": "1.5"}).body_timeout_s == 1.5
    with pytest.raises(ConfigError, match="EXT_TASKS_BODY_TIMEOUT_S"):
        settings_from_env({"EXT_TASKS_BODY_TIMEOUT_S": "0"}).validate()


def test_every_variable_of_the_readme_is_a_setting_of_the_same_name() -> None:
    """One name per setting: each ``EXT_TASKS_X`` of the README's configuration table is the field ``x``
    of the settings or of one of their sections, and setting it changes that field."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("| variable |") : readme.index("\n\n", readme.index("| variable |"))]
    names = sorted(set(re.findall(r"`(EXT_TASKS_[A-Z0-9_]+)`", table)))
    assert len(names) > 30
    sections = [
        Settings(),
        *(getattr(Settings(), section) for section in SECTIONS),
    ]
    for name in names:
        field = name.removeprefix(PREFIX).lower()
        owners = [owner for owner in sections if field in type(owner).model_fields]
        assert owners, f"{name} is not a setting"
    # ... and each is read under its name (a few representative kinds: number, flag, section field).
    read = settings_from_env(
        {"EXT_TASKS_TASK_TTL_MS": "1234", "EXT_TASKS_NO_WORKERS": "true", "EXT_TASKS_MAX_WAITS": "7"}
    )
    assert (read.tasks.task_ttl_ms, read.worker.no_workers, read.engine.max_waits) == (1234, True, 7)


def test_the_admin_listener_is_off_by_default_and_needs_its_own_tokens() -> None:
    assert not Settings().admin.enabled and Settings().admin.admin_host == "127.0.0.1"
    settings = settings_from_env(
        {
            "EXT_TASKS_ADMIN_PORT": "3002",
            "EXT_TASKS_ADMIN_TOKENS": "tok-one, tok-two",
            "EXT_TASKS_ADMIN_STUCK_INPUT_S": "90",
        }
    ).validate()
    admin = settings.admin
    assert (admin.admin_port, admin.admin_stuck_input_s) == (3002, 90.0)
    assert [token.get_secret_value() for token in admin.admin_tokens] == ["tok-one", "tok-two"]
    assert "tok-one" not in repr(settings) and "tok-one" not in str(admin)
    with pytest.raises(ConfigError, match="EXT_TASKS_ADMIN_TOKENS"):
        settings_from_env({"EXT_TASKS_ADMIN_PORT": "3002"}).validate()
    with pytest.raises(ConfigError, match="EXT_TASKS_ADMIN_PORT must be at most 65535"):
        settings_from_env({"EXT_TASKS_ADMIN_PORT": "70000"})
    with pytest.raises(ConfigError, match="shared store"):
        settings_from_env(
            {"EXT_TASKS_ADMIN_PORT": "3002", "EXT_TASKS_ADMIN_TOKENS": "t", "EXT_TASKS_SERVER": "granian"}
        ).validate()
