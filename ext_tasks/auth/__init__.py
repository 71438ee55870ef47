"""Who is calling, and whether they may: every request resolves to a :class:`Principal` before the
engine sees it.

The modules, bottom to top (``pyproject.toml`` holds them to this order):

* :mod:`.challenge`: the errors (401, 403, 503) and their ``WWW-Authenticate`` challenges;
* :mod:`.principals`: :class:`Principal`, :class:`Caller`, the :class:`Authenticator` protocol, the
  anonymous and static-token authenticators;
* :mod:`.metadata`: the canonical resource URI and the Protected Resource Metadata (RFC 9728);
* :mod:`.checks`: the checks of the OAuth settings;
* :mod:`.fetch`: bounded requests to authorization servers, and their metadata discovery;
* :mod:`.cache`: tokens already judged, by hash;
* :mod:`.keys`: one issuer's signing keys;
* :mod:`.verify` and :mod:`.introspection`: JWT access tokens, opaque ones;
* :mod:`.oauth`: :class:`~.oauth.OAuthAuthenticator`, all of it together.

This façade re-exports the core only (no HTTP client, no JWT library is imported by ``import
ext_tasks``); import the OAuth parts from their modules.
"""

from .challenge import AuthUnavailable, Challenge, InsufficientScope, Unauthenticated, check_scopes
from .principals import (
    ANONYMOUS,
    MAX_GRANT_BYTES,
    AnonymousAuthenticator,
    Authenticator,
    BearerTokenAuthenticator,
    Caller,
    Principal,
    bearer_token,
    grant_of,
    parse_token_map,
    principal_from_grant,
)

__all__ = [
    "ANONYMOUS",
    "MAX_GRANT_BYTES",
    "AnonymousAuthenticator",
    "AuthUnavailable",
    "Authenticator",
    "BearerTokenAuthenticator",
    "Caller",
    "Challenge",
    "InsufficientScope",
    "Principal",
    "Unauthenticated",
    "bearer_token",
    "check_scopes",
    "grant_of",
    "parse_token_map",
    "principal_from_grant",
]
