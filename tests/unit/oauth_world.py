"""A small, honest OAuth world for the client's OAuth tests: an MCP server (a protected resource) and an
authorization server, both behind one ``httpx.MockTransport``, and a person's browser that answers the
authorization request by calling the client's real loopback listener.

The authorization server checks what a real one would (PKCE S256 against the challenge, the redirect
URI, the refresh token, the client's authentication) and records every request, so tests assert what
crossed the wire rather than how the client got there.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt

MCP_URL = "https://mcp.example/mcp"
PRM_URL = "https://mcp.example/.well-known/oauth-protected-resource/mcp"
ISSUER = "https://as.example"


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class World:
    #: The scope the 401 challenge names (None: no scope in the challenge).
    challenge_scope: str | None = "mcp:read"
    #: The scope ``tools/call`` needs (a 403 ``insufficient_scope`` names it).
    call_scope: str = "mcp:read"
    #: Every token-bearing request gets 403 (a server whose scope upgrade never succeeds).
    always_403: bool = False
    prm_scopes: list[str] | None = None
    as_scopes: list[str] | None = field(default_factory=lambda: ["mcp:read", "mcp:write", "offline_access"])
    iss_supported: bool = True
    #: What the browser's redirect carries as ``iss``: "correct", "omit", or a value.
    iss_in_redirect: str = "correct"
    auth_methods: list[str] = field(default_factory=lambda: ["none"])
    expires_in: int = 3600
    issue_refresh: bool = True
    revocation: bool = True
    prm_resource: str = MCP_URL
    metadata_issuer: str = ISSUER
    #: DPoP (RFC 9449): advertised with ES256, tokens bound when the token request carries a proof.
    dpop: bool = False
    #: The MCP server's challenge scheme (default: ``DPoP`` when ``dpop``, else ``Bearer``).
    rs_scheme: str | None = None
    #: The nonce the token endpoint (``as_nonce``) and the MCP server (``rs_nonce``) insist on.
    as_nonce: str | None = None
    rs_nonce: str | None = None
    #: Every verified DPoP proof's claims, with where it was presented ("token" or "mcp").
    proofs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    dpop_tokens: set[str] = field(default_factory=set)
    requests: list[httpx.Request] = field(default_factory=list)
    authorizations: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[tuple[dict[str, str], str | None]] = field(default_factory=list)
    registrations: list[dict[str, Any]] = field(default_factory=list)
    revoked: list[tuple[str, str]] = field(default_factory=list)
    tokens: dict[str, tuple[set[str], float]] = field(default_factory=dict)
    refresh_tokens: dict[str, set[str]] = field(default_factory=dict)
    codes: dict[str, tuple[str, str, set[str]]] = field(default_factory=dict)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # --- the person's browser ---------------------------------------------------------------------

    async def browser(self, url: str) -> None:
        """Approve the authorization request and follow the redirect to the client's listener."""
        query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
        self.authorizations.append(query)
        code = secrets.token_urlsafe(16)
        self.codes[code] = (query["code_challenge"], query["redirect_uri"], set(query.get("scope", "").split()))
        answer = {"code": code, "state": query["state"]}
        if self.iss_in_redirect == "correct":
            answer["iss"] = ISSUER
        elif self.iss_in_redirect != "omit":
            answer["iss"] = self.iss_in_redirect
        async with httpx.AsyncClient() as http:
            await http.get(f"{query['redirect_uri']}?{urlencode(answer)}")

    # --- the servers ------------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        url = str(request.url).split("?")[0]
        if url == MCP_URL:
            return self._mcp(request)
        if url == PRM_URL:
            prm: dict[str, Any] = {"resource": self.prm_resource, "authorization_servers": [ISSUER]}
            if self.prm_scopes is not None:
                prm["scopes_supported"] = self.prm_scopes
            return httpx.Response(200, json=prm)
        if url == f"{ISSUER}/.well-known/oauth-authorization-server":
            return httpx.Response(200, json=self._metadata())
        if url == f"{ISSUER}/register":
            body = json.loads(request.content)
            self.registrations.append(body)
            return httpx.Response(201, json={"client_id": f"dcr-{len(self.registrations)}", **body})
        if url == f"{ISSUER}/token":
            return self._token(request)
        if url == f"{ISSUER}/revoke":
            form = {name: values[0] for name, values in parse_qs(request.content.decode()).items()}
            self.revoked.append((form["token"], form.get("token_type_hint", "")))
            return httpx.Response(200)
        return httpx.Response(404)

    def _metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "issuer": self.metadata_issuer,
            "authorization_endpoint": f"{ISSUER}/authorize",
            "token_endpoint": f"{ISSUER}/token",
            "registration_endpoint": f"{ISSUER}/register",
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": self.auth_methods,
            "authorization_response_iss_parameter_supported": self.iss_supported,
        }
        if self.as_scopes is not None:
            metadata["scopes_supported"] = self.as_scopes
        if self.revocation:
            metadata["revocation_endpoint"] = f"{ISSUER}/revoke"
        if self.dpop:
            metadata["dpop_signing_alg_values_supported"] = ["ES256"]
        return metadata

    def _proof(self, request: httpx.Request, where: str) -> dict[str, Any] | None:
        """The request's DPoP proof claims, verified with the key it carries (None if absent or bad)."""
        proof = request.headers.get("dpop")
        if proof is None:
            return None
        header = jwt.get_unverified_header(proof)
        if header.get("typ") != "dpop+jwt":
            return None
        key = jwt.PyJWK(header["jwk"]).key
        claims: dict[str, Any] = jwt.decode(proof, key, algorithms=["ES256"])
        self.proofs.append((where, claims))
        return claims

    def _mcp(self, request: httpx.Request) -> httpx.Response:
        method = json.loads(request.content)["method"]
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        granted = self.tokens.get(token)
        if token in self.dpop_tokens:
            claims = self._proof(request, "mcp")
            ath = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
            if scheme != "DPoP" or claims is None or claims.get("ath") != ath or claims.get("htu") != MCP_URL:
                granted = None
            elif self.rs_nonce is not None and claims.get("nonce") != self.rs_nonce:
                nonce_challenge = f'DPoP error="use_dpop_nonce", resource_metadata="{PRM_URL}"'
                return httpx.Response(401, headers={"WWW-Authenticate": nonce_challenge, "DPoP-Nonce": self.rs_nonce})
        if granted is None or granted[1] < time.time():
            scope = f', scope="{self.challenge_scope}"' if self.challenge_scope else ""
            scheme = self.rs_scheme or ("DPoP" if self.dpop else "Bearer")
            challenge = f'{scheme} resource_metadata="{PRM_URL}"{scope}'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        if self.always_403 or (method == "tools/call" and self.call_scope not in granted[0]):
            challenge = f'Bearer error="insufficient_scope", scope="{self.call_scope}", resource_metadata="{PRM_URL}"'
            return httpx.Response(403, headers={"WWW-Authenticate": challenge})
        result: dict[str, Any] = {"tools": []} if method == "tools/list" else {"content": []}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": json.loads(request.content)["id"], "result": result})

    def _token(self, request: httpx.Request) -> httpx.Response:
        form = {name: values[0] for name, values in parse_qs(request.content.decode()).items()}
        self.token_requests.append((form, request.headers.get("authorization")))
        grant = form.get("grant_type")
        claims = self._proof(request, "token") if self.dpop else None
        if claims is not None and self.as_nonce is not None and claims.get("nonce") != self.as_nonce:
            return httpx.Response(400, headers={"DPoP-Nonce": self.as_nonce}, json={"error": "use_dpop_nonce"})
        if grant == "authorization_code":
            found = self.codes.pop(form.get("code", ""), None)
            if found is None or s256(form.get("code_verifier", "")) != found[0] or form.get("redirect_uri") != found[1]:
                return httpx.Response(400, json={"error": "invalid_grant"})
            scopes = found[2]
        elif grant == "refresh_token":
            known = self.refresh_tokens.get(form.get("refresh_token", ""))
            if known is None:
                return httpx.Response(400, json={"error": "invalid_grant"})
            scopes = known
        elif grant == "client_credentials":
            scopes = set(form.get("scope", "").split())
        else:
            return httpx.Response(400, json={"error": "unsupported_grant_type"})
        access = f"at-{secrets.token_urlsafe(12)}"
        self.tokens[access] = (scopes, time.time() + self.expires_in)
        kind = "Bearer"
        if claims is not None:
            self.dpop_tokens.add(access)
            kind = "DPoP"
        answer: dict[str, Any] = {"access_token": access, "token_type": kind, "expires_in": self.expires_in}
        if self.issue_refresh and grant != "client_credentials":
            refresh = f"rt-{secrets.token_urlsafe(12)}"
            self.refresh_tokens[refresh] = scopes
            answer["refresh_token"] = refresh
        return httpx.Response(200, json=answer)
