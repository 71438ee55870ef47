"""From a 401 to an authorization server we may trust: Protected Resource Metadata (RFC 9728), then
the authorization server's metadata (RFC 8414 and OpenID Connect Discovery), in the spec's order.

Two checks make the chain safe. The metadata's ``resource`` must be the server we were asked to talk
to (else a server could have us fetch tokens for another one), and an authorization server's
``issuer`` must be exactly the issuer its document was looked up for (RFC 8414 §3.3): a document
that names another issuer is not used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from .errors import AuthorizationError, IssuerMismatch, ResourceMismatch
from .wire import Challenge, get_document

log = logging.getLogger(__name__)

_PRM_SUFFIX = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """What the MCP server says about itself: the resource identifier tokens are asked for (RFC 8707,
    sent as found), the issuers it trusts and the scopes it offers."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    #: RFC 9728 ``dpop_signing_alg_values_supported`` / ``dpop_bound_access_tokens_required``.
    dpop_algs: tuple[str, ...] | None = None
    dpop_required: bool = False


@dataclass(frozen=True, slots=True)
class AuthServer:
    """An authorization server's validated metadata, and the issuer it was found for."""

    issuer: str
    metadata: Mapping[str, Any]

    def endpoint(self, name: str) -> str | None:
        value = self.metadata.get(name)
        return value if isinstance(value, str) and value else None

    def listed(self, name: str) -> tuple[str, ...] | None:
        """A list-valued metadata field (``None`` when absent: absent and empty differ in OAuth)."""
        value = self.metadata.get(name)
        return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else None

    @property
    def iss_parameter_supported(self) -> bool:
        return self.metadata.get("authorization_response_iss_parameter_supported") is True

    @property
    def cimd_supported(self) -> bool:
        return self.metadata.get("client_id_metadata_document_supported") is True


def canonical(url: str) -> str:
    """``url`` as RFC 8707 wants a resource: lowercase scheme and host, no fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, parts.query, ""))


def resource_metadata_urls(server_url: str, challenge: Challenge) -> list[str]:
    """Where to look for the server's metadata: the challenge's ``resource_metadata``, then the
    well-known URIs, the one with the server's path first (RFC 9728 §3.1)."""
    parts = urlsplit(server_url)
    root = urlunsplit((parts.scheme, parts.netloc, _PRM_SUFFIX, "", ""))
    urls = [challenge.resource_metadata] if challenge.resource_metadata else []
    path = parts.path.rstrip("/")
    if path:
        urls.append(urlunsplit((parts.scheme, parts.netloc, _PRM_SUFFIX + path, "", "")))
    urls.append(root)
    return list(dict.fromkeys(urls))


def check_resource(resource: str, server_url: str) -> None:
    """The metadata's ``resource`` must name the server: the same URL, or (metadata at the root
    well-known URI) a same-origin prefix of its path. Anything else is another resource."""
    published, ours = urlsplit(canonical(resource)), urlsplit(canonical(server_url))
    same_origin = (published.scheme, published.netloc) == (ours.scheme, ours.netloc)
    prefix = published.path.rstrip("/")
    covers = ours.path.rstrip("/") == prefix or ours.path.startswith(prefix + "/")
    if not (same_origin and covers and not published.query):
        raise ResourceMismatch(resource, server_url)


async def find_resource(http: httpx.AsyncClient, server_url: str, challenge: Challenge) -> ProtectedResource:
    for url in resource_metadata_urls(server_url, challenge):
        document = await get_document(http, url)
        if document is None:
            continue
        resource = document.get("resource")
        servers = document.get("authorization_servers")
        if not isinstance(resource, str) or not isinstance(servers, list) or not servers:
            log.debug("protected resource metadata at %s lacks resource or authorization_servers", url)
            continue
        check_resource(resource, server_url)
        scopes, algs = document.get("scopes_supported"), document.get("dpop_signing_alg_values_supported")
        return ProtectedResource(
            resource,
            tuple(server for server in servers if isinstance(server, str)),
            tuple(scope for scope in scopes if isinstance(scope, str)) if isinstance(scopes, list) else None,
            tuple(alg for alg in algs if isinstance(alg, str)) if isinstance(algs, list) else None,
            document.get("dpop_bound_access_tokens_required") is True,
        )
    raise AuthorizationError(f"{server_url}: no protected resource metadata found (RFC 9728)")


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """The spec's order: RFC 8414 path insertion, OpenID path insertion, OpenID path appending (an
    issuer with a path); RFC 8414 then OpenID (an issuer without one)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(well_known_path: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, well_known_path, "", ""))

    if not path:
        return [at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")]
    return [
        at("/.well-known/oauth-authorization-server" + path),
        at("/.well-known/openid-configuration" + path),
        at(path + "/.well-known/openid-configuration"),
    ]


async def find_auth_server(http: httpx.AsyncClient, issuer: str) -> AuthServer:
    """The first metadata document for ``issuer`` whose ``issuer`` is exactly ``issuer``."""
    refused: IssuerMismatch | None = None
    for url in authorization_server_metadata_urls(issuer):
        document = await get_document(http, url)
        if document is None:
            continue
        if document.get("issuer") != issuer:
            found = document.get("issuer")
            refused = IssuerMismatch(f"the metadata at {url}", found if isinstance(found, str) else None, issuer)
            log.warning("%s", refused)
            continue
        server = AuthServer(issuer, document)
        if not server.endpoint("token_endpoint"):
            raise AuthorizationError(f"{issuer}: the authorization server metadata has no token_endpoint")
        return server
    if refused is not None:
        raise refused
    raise AuthorizationError(f"{issuer}: no authorization server metadata found (RFC 8414, OpenID Discovery)")
