"""The OAuth settings: read from ``EXT_TASKS_AUTH_*``, checked at start with a message naming the
variable, the client secret never shown; and the challenge header's own rules."""

from __future__ import annotations

import pytest

from ext_tasks.auth import BearerTokenAuthenticator, Challenge, InsufficientScope, Principal, Unauthenticated
from ext_tasks.auth.challenge import check_scopes
from ext_tasks.auth.oauth import OAuthAuthenticator
from ext_tasks.compose import build_authenticator, build_engine
from ext_tasks.config import ConfigError, Settings, settings_from_env
from ext_tasks.options import ASYMMETRIC_ALGORITHMS
from ext_tasks.protocol.errors import INVALID_REQUEST
from ext_tasks.store.memory import MemoryTaskStore
from tests.unit.engine_support import make_registry

ISSUER = "https://auth.example.com/realms/mcp"
BASE = {"EXT_TASKS_AUTH_ISSUERS": ISSUER, "EXT_TASKS_AUTH_RESOURCE": "https://mcp.example.com/mcp"}
SECRET = "very-secret-client-secret"


def test_every_auth_variable_is_read() -> None:
    env = {
        "EXT_TASKS_AUTH_ISSUERS": f"{ISSUER}, https://login.example.net/tenant/v2.0",
        "EXT_TASKS_AUTH_RESOURCE": "https://mcp.example.com/mcp",
        "EXT_TASKS_AUTH_AUDIENCES": "6e74172b-be56-4843-9ff4-e66a39bb12e3, api://mcp",
        "EXT_TASKS_AUTH_SCOPES": "mcp:tools mcp:tasks",
        "EXT_TASKS_AUTH_SCOPES_SUPPORTED": "mcp:tools,mcp:tasks,files:write",
        "EXT_TASKS_AUTH_JWKS_URL": "https://auth.example.com/keys",
        "EXT_TASKS_AUTH_INTROSPECTION_URL": "https://auth.example.com/introspect",
        "EXT_TASKS_AUTH_CLIENT_ID": "mcp-server",
        "EXT_TASKS_AUTH_CLIENT_SECRET": SECRET,
        "EXT_TASKS_AUTH_ALGORITHMS": "RS256,ES256",
        "EXT_TASKS_AUTH_LEEWAY_S": "10",
        "EXT_TASKS_AUTH_TOKEN_CACHE_SIZE": "500",
        "EXT_TASKS_AUTH_INTROSPECTION_CACHE_S": "15",
        "EXT_TASKS_AUTH_KEYS_MAX_AGE_S": "600",
        "EXT_TASKS_AUTH_KEYS_REFETCH_S": "10",
        "EXT_TASKS_AUTH_FETCH_TIMEOUT_S": "3",
        "EXT_TASKS_AUTH_RESOURCE_NAME": "Example tools",
        "EXT_TASKS_AUTH_RESOURCE_DOCUMENTATION": "https://docs.example.com/mcp",
    }

    auth = settings_from_env(env).validate().auth

    assert auth.auth_issuers == (ISSUER, "https://login.example.net/tenant/v2.0")
    assert auth.auth_audiences == ("6e74172b-be56-4843-9ff4-e66a39bb12e3", "api://mcp")
    assert (auth.auth_scopes, auth.auth_scopes_supported) == (
        ("mcp:tools", "mcp:tasks"),
        ("mcp:tools", "mcp:tasks", "files:write"),
    )
    assert auth.auth_client_secret is not None and auth.auth_client_secret.get_secret_value() == SECRET
    assert auth.auth_algorithms == ("RS256", "ES256")
    assert (auth.auth_leeway_s, auth.auth_token_cache_size, auth.auth_introspection_cache_s) == (10, 500, 15.0)
    assert (auth.auth_keys_max_age_s, auth.auth_keys_refetch_s, auth.auth_fetch_timeout_s) == (600.0, 10.0, 3.0)
    assert (auth.auth_resource_name, auth.auth_resource_documentation) == (
        "Example tools",
        "https://docs.example.com/mcp",
    )


def test_oauth_is_off_by_default_with_only_asymmetric_algorithms() -> None:
    auth = Settings().auth
    assert not auth.enabled
    assert auth.auth_algorithms == ASYMMETRIC_ALGORITHMS
    assert (auth.auth_leeway_s, auth.auth_token_cache_size, auth.auth_introspection_cache_s) == (30, 10_000, 60.0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EXT_TASKS_AUTH_ISSUERS": ISSUER}, "EXT_TASKS_AUTH_RESOURCE is required"),
        ({"EXT_TASKS_AUTH_RESOURCE": "https://mcp.example.com/mcp"}, "EXT_TASKS_AUTH_ISSUERS is not"),
        ({**BASE, "EXT_TASKS_AUTH_ALGORITHMS": "RS256,HS256"}, "HS256 is refused"),
        ({**BASE, "EXT_TASKS_AUTH_ALGORITHMS": "none"}, "none is refused"),
        ({**BASE, "EXT_TASKS_AUTH_ALGORITHMS": "RS1024"}, "unknown algorithm"),
        ({**BASE, "EXT_TASKS_AUTH_RESOURCE": "https://mcp.example.com/mcp/"}, "must not end with a slash"),
        ({**BASE, "EXT_TASKS_AUTH_RESOURCE": "https://mcp.example.com/mcp#x"}, "no fragment"),
        ({**BASE, "EXT_TASKS_AUTH_RESOURCE": "https://mcp.example.com/mcp?a=1"}, "no query"),
        ({**BASE, "EXT_TASKS_AUTH_RESOURCE": "mcp.example.com"}, "absolute https URL"),
        ({**BASE, "EXT_TASKS_AUTH_ISSUERS": "http://auth.example.com"}, "must use https"),
        ({**BASE, "EXT_TASKS_AUTH_INTROSPECTION_URL": "https://auth.example.com/i"}, "client credentials"),
        ({**BASE, "EXT_TASKS_AUTH_CLIENT_ID": "x"}, "EXT_TASKS_AUTH_INTROSPECTION_URL"),
        ({**BASE, "EXT_TASKS_AUTH_LEEWAY_S": "120"}, "EXT_TASKS_AUTH_LEEWAY_S must be between 0 and 60"),
        ({**BASE, "EXT_TASKS_AUTH_SCOPES": 'a"b'}, "EXT_TASKS_AUTH_SCOPES: not an OAuth scope token"),
        ({**BASE, "EXT_TASKS_AUTH_SCOPES": "offline_access"}, "offline_access"),
        ({"EXT_TASKS_AUTH_AUDIENCES": "api://mcp"}, "EXT_TASKS_AUTH_ISSUERS is not"),
        ({**BASE, "EXT_TASKS_AUTH_FETCH_TIMEOUT_S": "0"}, "EXT_TASKS_AUTH_FETCH_TIMEOUT_S"),
        ({**BASE, "EXT_TASKS_AUTH_KEYS_REFETCH_S": "7200"}, "EXT_TASKS_AUTH_KEYS_REFETCH_S"),
    ],
)
def test_wrong_or_unsafe_auth_settings_are_refused_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_env(env).validate()


def test_a_loopback_issuer_may_use_http() -> None:
    settings_from_env({**BASE, "EXT_TASKS_AUTH_ISSUERS": "http://127.0.0.1:9000/realms/x"}).validate()


def test_the_client_secret_never_shows() -> None:
    env = {
        **BASE,
        "EXT_TASKS_AUTH_INTROSPECTION_URL": "https://auth.example.com/introspect",
        "EXT_TASKS_AUTH_CLIENT_ID": "mcp-server",
        "EXT_TASKS_AUTH_CLIENT_SECRET": SECRET,
    }
    settings = settings_from_env(env).validate()
    authenticator = build_authenticator(settings)

    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert SECRET not in repr(vars(authenticator))
    with pytest.raises(ConfigError) as caught:
        settings_from_env({**env, "EXT_TASKS_AUTH_LEEWAY_S": "999"}).validate()
    assert SECRET not in str(caught.value)


def test_the_authenticator_is_oauth_when_issuers_are_set_and_answers_privately() -> None:
    settings = settings_from_env(BASE)

    assert isinstance(build_authenticator(settings), OAuthAuthenticator)
    assert isinstance(build_authenticator(Settings(tokens={"t": "alice"})), BearerTokenAuthenticator)
    engine = build_engine(make_registry(), settings.model_copy(update={"state_keys": (b"k" * 32,)}), MemoryTaskStore())
    assert engine.core.cache.scope == "private"  # results that depend on the caller are never shared
    engine.close()


# --- challenges and principals ------------------------------------------------------------------------


def test_a_challenge_renders_its_parameters_in_one_order_and_cleans_descriptions() -> None:
    challenge = Challenge("https://mcp.example.com/.well-known/oauth-protected-resource/mcp", ("a", "b"))

    assert challenge.render(error="invalid_token", description='bad "quoted"\r\n\\ text') == (
        'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", '
        'error="invalid_token", scope="a b", error_description="bad quoted text"'
    )
    assert Challenge().render() == "Bearer"
    assert challenge.complete('Bearer error="insufficient_scope", scope="x"') == (
        'Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", '
        'error="insufficient_scope", scope="x"'
    )
    assert challenge.complete("Basic realm=x") == "Basic realm=x"


@pytest.mark.parametrize("bad", ["two words", 'quote"', "back\\slash", "", "caf\u00e9"])
def test_a_scope_that_could_break_the_header_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not an OAuth scope token"):
        check_scopes([bad])
    with pytest.raises(ValueError):
        InsufficientScope([bad])


def test_insufficient_scope_is_403_with_the_scopes_in_header_and_data() -> None:
    error = InsufficientScope(["files:write", "files:write", "mcp:tools"])

    assert (error.code, error.http_status) == (INVALID_REQUEST, 403)
    assert error.http_headers() == {
        "WWW-Authenticate": 'Bearer error="insufficient_scope", scope="files:write mcp:tools"'
    }
    assert error.to_error()["data"] == {"requiredScopes": ["files:write", "mcp:tools"]}
    assert Unauthenticated().http_headers() == {"WWW-Authenticate": "Bearer"}


def test_principals_stay_hashable_and_compare_without_their_claims() -> None:
    one = Principal.from_claims("https://as.example", {"sub": "u1", "scope": "a b", "extra": {"nested": 1}})
    same = Principal.from_claims("https://as.example", {"sub": "u1", "scope": "b a", "extra": {"nested": 2}})

    assert one == same and hash(one) == hash(same)
    assert "nested" not in repr(one)
    assert Principal("alice").lacks(["x"]) == []  # static and anonymous principals are unrestricted
    with pytest.raises(ValueError, match="no subject"):
        Principal.from_claims("https://as.example", {"scope": "a"})
