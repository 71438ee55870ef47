"""Which client identity to present to an authorization server, in the spec's order: pre-registered
credentials, else a Client ID Metadata Document URL (when the server supports them), else Dynamic
Client Registration (RFC 7591, kept by the spec for older servers), else a clear error.

A registration belongs to the issuer that made it (the spec's authorization server binding): it is
stored with that issuer and never presented to another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .discovery import AuthServer
from .errors import AuthorizationError
from .wire import post_document

#: RFC 8414 §2: a server that lists no methods supports ``client_secret_basic``.
_DEFAULT_METHODS = ("client_secret_basic",)


@dataclass(frozen=True, slots=True)
class Registration:
    """A client identity at one issuer. ``redirect_uri`` is the one registered (Dynamic Client
    Registration only): the listener tries its port again, since servers compare redirect URIs exactly."""

    issuer: str
    client_id: str
    auth_method: str
    client_secret: str | None = field(default=None, repr=False)
    redirect_uri: str | None = None
    dynamic: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "auth_method": self.auth_method,
            "redirect_uri": self.redirect_uri,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any], issuer: str) -> Registration | None:
        """A stored registration, if it is one and was made by ``issuer``."""
        client_id, method = value.get("client_id"), value.get("auth_method")
        if value.get("issuer") != issuer or not isinstance(client_id, str) or not isinstance(method, str):
            return None
        secret, redirect = value.get("client_secret"), value.get("redirect_uri")
        return cls(
            issuer,
            client_id,
            method,
            secret if isinstance(secret, str) else None,
            redirect if isinstance(redirect, str) else None,
            dynamic=True,
        )


def pick_auth_method(server: AuthServer, *, secret: bool, private_key: bool) -> str:
    """The token endpoint authentication for what we hold: a private key signs an assertion
    (``private_key_jwt``); a secret goes in Basic if the server takes it, else in the body; no secret
    means a public client (``none``)."""
    supported = server.listed("token_endpoint_auth_methods_supported") or _DEFAULT_METHODS
    if private_key:
        return "private_key_jwt"
    if not secret:
        return "none"
    if "client_secret_basic" not in supported and "client_secret_post" in supported:
        return "client_secret_post"
    return "client_secret_basic"


def _method_to_register(server: AuthServer) -> str:
    # A native client cannot keep a secret (RFC 8252 §8.5): ask to be public when the server allows it.
    supported = server.listed("token_endpoint_auth_methods_supported") or _DEFAULT_METHODS
    return next((m for m in ("none", "client_secret_basic", "client_secret_post") if m in supported), "none")


async def register_dynamically(
    http: httpx.AsyncClient, server: AuthServer, redirect_uri: str, client_name: str
) -> Registration:
    endpoint = server.endpoint("registration_endpoint")
    if endpoint is None:
        raise AuthorizationError(
            f"{server.issuer} offers neither Client ID Metadata Documents (for client_metadata_url) nor "
            "Dynamic Client Registration: register a client there and pass client_id (and client_secret)"
        )
    requested = _method_to_register(server)
    status, answer = await post_document(
        http,
        endpoint,
        {
            "client_name": client_name,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": requested,
            # The spec asks for an application_type; a loopback redirect makes this a native client.
            "application_type": "native",
        },
    )
    if status not in (200, 201) or not isinstance(answer, dict) or not isinstance(answer.get("client_id"), str):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise AuthorizationError(
            f"{endpoint}: dynamic client registration refused (HTTP {status}{', ' + str(error) if error else ''})"
        )
    secret = answer.get("client_secret")
    method = answer.get("token_endpoint_auth_method")
    if not isinstance(method, str):
        method = requested if requested != "none" or not isinstance(secret, str) else "client_secret_basic"
    return Registration(
        server.issuer,
        answer["client_id"],
        method,
        secret if isinstance(secret, str) else None,
        redirect_uri,
        dynamic=True,
    )
