"""The checks of the OAuth settings (:class:`~ext_tasks.options.AuthOptions`), run once at start by
``Settings.validate`` and again by :meth:`.oauth.OAuthAuthenticator.from_options`: a setting that is
wrong or unsafe stops the server with a message naming its variable, never showing the client secret.
"""

from __future__ import annotations

from typing import Final

from ..options import ASYMMETRIC_ALGORITHMS, AuthOptions
from .challenge import check_scopes
from .metadata import canonical_resource, check_url

MAX_LEEWAY_S: Final = 60
MAX_FETCH_TIMEOUT_S: Final = 30.0
#: Variables that mean nothing while no issuer is configured.
_NEED_ISSUERS: Final = (
    "auth_resource",
    "auth_audiences",
    "auth_scopes",
    "auth_scopes_supported",
    "auth_jwks_url",
    "auth_introspection_url",
    "auth_client_id",
    "auth_client_secret",
    "auth_resource_name",
    "auth_resource_documentation",
)


def _name(field: str) -> str:
    return f"EXT_TASKS_{field.upper()}"


def check_auth_options(options: AuthOptions) -> None:
    """``ValueError`` with a message for the operator when the settings are wrong or unsafe."""
    if not options.enabled:
        stray = [_name(field) for field in _NEED_ISSUERS if getattr(options, field)]
        if stray:
            raise ValueError(f"{stray[0]} is set but EXT_TASKS_AUTH_ISSUERS is not: OAuth needs at least one issuer")
        return
    for issuer in options.auth_issuers:
        check_url(issuer, "each of EXT_TASKS_AUTH_ISSUERS")
        if "?" in issuer:
            raise ValueError(f"an issuer identifier has no query (RFC 8414 §2): {issuer!r}")
    if not options.auth_resource:
        raise ValueError(
            "EXT_TASKS_AUTH_RESOURCE is required when EXT_TASKS_AUTH_ISSUERS is set: the canonical URI of this "
            "server, the audience its tokens must name (e.g. https://mcp.example.com/mcp)"
        )
    canonical_resource(options.auth_resource)
    for audience in options.auth_audiences:
        if not audience.isprintable() or " " in audience:
            raise ValueError(f"EXT_TASKS_AUTH_AUDIENCES: {audience!r} is not an audience value")
    _check_algorithms(options.auth_algorithms)
    _check_scopes(options)
    _check_endpoints(options)
    _check_numbers(options)


def _check_algorithms(algorithms: tuple[str, ...]) -> None:
    if not algorithms:
        raise ValueError("EXT_TASKS_AUTH_ALGORITHMS must name at least one algorithm")
    for algorithm in algorithms:
        if algorithm.lower() == "none" or algorithm.upper().startswith("HS"):
            raise ValueError(
                f"EXT_TASKS_AUTH_ALGORITHMS: {algorithm} is refused: only asymmetric algorithms are accepted "
                "(an unsigned or HMAC token could be made by anyone holding the public key or nothing at all)"
            )
        if algorithm not in ASYMMETRIC_ALGORITHMS:
            raise ValueError(
                f"EXT_TASKS_AUTH_ALGORITHMS: unknown algorithm {algorithm!r} "
                f"(one of {', '.join(ASYMMETRIC_ALGORITHMS)})"
            )


def _check_scopes(options: AuthOptions) -> None:
    for field in ("auth_scopes", "auth_scopes_supported"):
        scopes = getattr(options, field) or ()
        try:
            check_scopes(scopes)
        except ValueError as exc:
            raise ValueError(f"{_name(field)}: {exc}") from None
        if "offline_access" in scopes:
            # MCP: refresh tokens are not a resource requirement; a protected resource SHOULD NOT ask for them.
            raise ValueError(f"{_name(field)} must not name offline_access (refresh tokens are the client's business)")


def _check_endpoints(options: AuthOptions) -> None:
    for field in ("auth_jwks_url", "auth_introspection_url", "auth_resource_documentation"):
        if (url := getattr(options, field)) is not None:
            check_url(url, _name(field))
    credentials = options.auth_client_id is not None and options.auth_client_secret is not None
    if options.auth_introspection_url is not None and not credentials:
        raise ValueError(
            "EXT_TASKS_AUTH_INTROSPECTION_URL needs this server's client credentials: EXT_TASKS_AUTH_CLIENT_ID "
            "and EXT_TASKS_AUTH_CLIENT_SECRET"
        )
    if options.auth_introspection_url is None and (options.auth_client_id or options.auth_client_secret):
        raise ValueError(
            "EXT_TASKS_AUTH_CLIENT_ID / _SECRET are for introspection: set EXT_TASKS_AUTH_INTROSPECTION_URL"
        )
    name = options.auth_resource_name
    if name is not None and (len(name) > 200 or not name.isprintable()):
        raise ValueError("EXT_TASKS_AUTH_RESOURCE_NAME must be printable text of at most 200 characters")


def _check_numbers(options: AuthOptions) -> None:
    if not 0 <= options.auth_leeway_s <= MAX_LEEWAY_S:
        raise ValueError(f"EXT_TASKS_AUTH_LEEWAY_S must be between 0 and {MAX_LEEWAY_S} seconds")
    if options.auth_token_cache_size < 1 or options.auth_introspection_cache_s < 0:
        raise ValueError(
            "EXT_TASKS_AUTH_TOKEN_CACHE_SIZE must be at least 1 and EXT_TASKS_AUTH_INTROSPECTION_CACHE_S not negative"
        )
    if not 0 < options.auth_fetch_timeout_s <= MAX_FETCH_TIMEOUT_S:
        raise ValueError(f"EXT_TASKS_AUTH_FETCH_TIMEOUT_S must be positive and at most {MAX_FETCH_TIMEOUT_S:g}")
    if not 0 < options.auth_keys_refetch_s <= options.auth_keys_max_age_s:
        raise ValueError("EXT_TASKS_AUTH_KEYS_REFETCH_S must be positive and at most EXT_TASKS_AUTH_KEYS_MAX_AGE_S")
