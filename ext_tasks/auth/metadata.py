"""This server as an OAuth protected resource: its canonical URI, and its Protected Resource Metadata
(RFC 9728), built once from the settings alone, so every instance of a fleet serves the same bytes.

The canonical URI (``EXT_TASKS_AUTH_RESOURCE``, RFC 8707 §2, MCP "Canonical Server URI"): an absolute
``https`` URI (``http`` on loopback only), lowercase scheme and host, no user part, query or fragment,
and no trailing slash, the one spelling the spec recommends: ``https://mcp.example.com/mcp``, not
``https://mcp.example.com/mcp/``. It is published as is and a token's ``aud`` must name it exactly; only
an uppercase scheme or host in ``aud`` is tolerated, as the spec asks.

The document is served at the path form of the well-known URI (RFC 9728 §3.1: for
``https://host/mcp``, ``/.well-known/oauth-protected-resource/mcp``), the URL every challenge names, and
at the bare ``/.well-known/oauth-protected-resource`` for older clients. Members (RFC 9728 §2):
``resource``, ``authorization_servers``, ``scopes_supported`` (when there are any),
``bearer_methods_supported: ["header"]`` (MCP forbids tokens in the query; RFC 6750's form-body method
is not offered either), ``resource_name`` and ``resource_documentation`` when configured. Not published:
``jwks_uri`` and ``resource_signing_alg_values_supported`` (this server signs no responses), the
certificate- and DPoP-bound token members (only bearer tokens are accepted), ``signed_metadata``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec

from ..options import AuthOptions
from .challenge import Challenge, check_scopes

WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"
LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})


def check_url(text: str, what: str) -> str:
    """``text`` if it is an absolute ``https`` URL (``http`` to a loopback host, for development and
    tests) without user part or fragment; ``ValueError`` naming ``what`` otherwise."""
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        raise ValueError(f"{what} must be an absolute URL, not {text!r}") from None
    scheme = parts.scheme.lower()
    if not host or scheme not in ("https", "http") or any(char in text for char in ' "\\<>'):
        raise ValueError(f"{what} must be an absolute https URL, not {text!r}")
    if scheme == "http" and host not in LOOPBACK:
        raise ValueError(f"{what} must use https (http only on a loopback host), not {text!r}")
    if "@" in parts.netloc or parts.fragment or text.endswith("#"):
        raise ValueError(f"{what} must have no user part and no fragment: {text!r}")
    return text


def canonical_resource(text: str) -> str:
    """The canonical spelling of a resource URI (lowercase scheme and host), or ``ValueError``."""
    check_url(text, "EXT_TASKS_AUTH_RESOURCE")
    parts = urlsplit(text)
    if parts.query or text.endswith("?"):
        raise ValueError(f"EXT_TASKS_AUTH_RESOURCE must have no query: {text!r}")
    if parts.path.endswith("/"):
        raise ValueError(
            f"EXT_TASKS_AUTH_RESOURCE must not end with a slash (use {text.rstrip('/')!r}: MCP's canonical "
            "form, compared exactly with the tokens' audience)"
        )
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}"


def metadata_url(resource: str) -> str:
    """The path form of the metadata's well-known URL (RFC 9728 §3.1)."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{parts.path}"


def metadata_paths(resource: str) -> tuple[str, ...]:
    """The paths the metadata is served at: the path form, then the bare one (one path when equal)."""
    return tuple(dict.fromkeys((WELL_KNOWN + urlsplit(resource).path, WELL_KNOWN)))


def audience_matches(audience: object, resource: str, also: frozenset[str] = frozenset()) -> bool:
    """Whether a token's ``aud`` (a string or a list of them) names ``resource`` (exactly, or with only
    the scheme and host in another case) or one of ``also`` (exactly: ``EXT_TASKS_AUTH_AUDIENCES``)."""
    values = audience if isinstance(audience, list) else [audience]
    return any(isinstance(value, str) and (value in also or _same_resource(value, resource)) for value in values)


def _same_resource(value: str, resource: str) -> bool:
    if value == resource:
        return True
    if len(value) != len(resource) or value.lower() != resource.lower():
        return False
    parts = urlsplit(value)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}" == resource and not parts.query


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """The resource, the challenge every 401 carries, and the metadata document with its paths."""

    resource: str
    challenge: Challenge
    document: bytes
    paths: tuple[str, ...]

    @classmethod
    def from_options(cls, options: AuthOptions, tool_scopes: Iterable[str] = ()) -> ProtectedResource | None:
        """``None`` while OAuth is off. ``tool_scopes`` (the tools' own scopes) join the required ones
        in ``scopes_supported`` unless ``EXT_TASKS_AUTH_SCOPES_SUPPORTED`` lists them itself."""
        if not options.enabled:
            return None
        if options.auth_resource is None:
            raise ValueError("EXT_TASKS_AUTH_RESOURCE is required when EXT_TASKS_AUTH_ISSUERS is set")
        resource = canonical_resource(options.auth_resource)
        required = check_scopes(options.auth_scopes)
        supported = options.auth_scopes_supported
        document: dict[str, Any] = {
            "resource": resource,
            "authorization_servers": list(options.auth_issuers),
        }
        scopes = check_scopes(supported if supported is not None else (*required, *tool_scopes))
        if scopes:
            document["scopes_supported"] = list(scopes)
        document["bearer_methods_supported"] = ["header"]
        if options.auth_resource_name:
            document["resource_name"] = options.auth_resource_name
        if options.auth_resource_documentation:
            document["resource_documentation"] = options.auth_resource_documentation
        return cls(
            resource=resource,
            challenge=Challenge(metadata_url(resource), required),
            document=msgspec.json.encode(document),
            paths=metadata_paths(resource),
        )
