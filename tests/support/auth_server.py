"""A small authorization server on loopback for the OAuth tests: its metadata (RFC 8414 or OpenID
discovery, at the path each one uses), its JWKS, and an introspection endpoint (RFC 7662). It signs
tokens with its own RSA and EC keys and rotates them; any path can be made to hang, answer garbage, a
huge body or an error; it counts the hits of every path.

::

    async with AuthServer() as server:
        token = server.issue(aud=RESOURCE, scope="tools")
        ...
        assert server.hits["/jwks"] == 1

A plain asyncio server in the test's own event loop (one request per connection, answered with
``Connection: close``), so a test needs no thread and a hanging path is released when the block ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final
from urllib.parse import parse_qs

import anyio
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from ext_tasks.auth import Authenticator, Principal

CLIENT_ID: Final = "mcp-server"
CLIENT_SECRET: Final = "s3cret:with+chars"
JWKS_PATH: Final = "/jwks"
INTROSPECTION_PATH: Final = "/introspect"
HUGE_BYTES: Final = 4 * 1024 * 1024

_kids = itertools.count(1)
_servers = itertools.count()
#: RSA keys are made once per session (about 50 ms each) and lent round-robin: servers next to each other
#: and a rotation always get another key.
RSA_POOL: Final = 4


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str
    private: Any
    jwk: dict[str, Any]


@functools.cache
def _rsa_private(index: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def rsa_key(index: int = 0) -> SigningKey:
    """The ``index``-th RSA key of the test session's pool, with a new kid."""
    private = _rsa_private(index % RSA_POOL)
    kid = f"rsa-{next(_kids)}"
    jwk = {**json.loads(RSAAlgorithm.to_jwk(private.public_key())), "kid": kid, "use": "sig", "alg": "RS256"}
    return SigningKey(kid, "RS256", private, jwk)


def ec_key() -> SigningKey:
    private = ec.generate_private_key(ec.SECP256R1())
    kid = f"ec-{next(_kids)}"
    jwk = {**json.loads(ECAlgorithm.to_jwk(private.public_key())), "kid": kid, "use": "sig"}
    return SigningKey(kid, "ES256", private, jwk)


def basic(client_id: str = CLIENT_ID, secret: str = CLIENT_SECRET) -> str:
    from urllib.parse import quote_plus

    return "Basic " + base64.b64encode(f"{quote_plus(client_id)}:{quote_plus(secret)}".encode()).decode()


class AuthServer:
    """``path``: the issuer's path (``""`` or e.g. ``"/tenant1"``); ``discovery``: where the metadata is
    served: ``"oauth"`` (RFC 8414, path inserted), ``"openid"`` (OpenID, path appended: as Keycloak
    and oidc-provider do), or ``"openid-inserted"``."""

    def __init__(self, *, path: str = "", discovery: str = "oauth") -> None:
        self.path = path
        self.discovery = discovery
        self._rsa = next(_servers)
        self.keys: list[SigningKey] = [rsa_key(self._rsa), ec_key()]
        #: Per path: "hang", "garbage", "huge", "500", "not-an-object", "unsupported" (400
        #: ``unsupported_token_type``, oidc-provider's introspection answer for a JWT) or "invalid-request"
        #: (400 ``invalid_request``); the rest answer normally.
        self.modes: dict[str, str] = {}
        self.hits: Counter[str] = Counter()
        #: Introspection answers by token; an unknown token is inactive.
        self.introspection: dict[str, dict[str, Any]] = {}
        #: The issuer the metadata names (another one, to test the mismatch).
        self.metadata_issuer: str | None = None
        self.metadata_extra: dict[str, Any] = {}
        self._released = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    # --- lifetime -----------------------------------------------------------------------------------

    async def __aenter__(self) -> AuthServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._released.set()
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return self.base + self.path

    @property
    def metadata_path(self) -> str:
        return {
            "oauth": f"/.well-known/oauth-authorization-server{self.path}",
            "openid": f"{self.path}/.well-known/openid-configuration",
            "openid-inserted": f"/.well-known/openid-configuration{self.path}",
        }[self.discovery]

    # --- tokens ---------------------------------------------------------------------------------------

    def issue(
        self,
        *,
        key: SigningKey | None = None,
        headers: dict[str, Any] | None = None,
        lifetime_s: float = 300,
        **claims: Any,
    ) -> str:
        """A JWT signed with ``key`` (the first key by default): ``iss`` this issuer, ``sub`` alice,
        expiring in ``lifetime_s``; ``claims`` add to or replace these (``None`` removes one)."""
        key = key or self.keys[0]
        now = int(time.time())
        payload: dict[str, Any] = {"iss": self.issuer, "sub": "alice", "iat": now, "exp": now + int(lifetime_s)}
        payload.update(claims)
        payload = {name: value for name, value in payload.items() if value is not None}
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    def rotate(self, *, keep_old: bool = False) -> SigningKey:
        """A new RSA key, published first (the old ones go unless ``keep_old``)."""
        self._rsa += 1
        new = rsa_key(self._rsa)
        self.keys = [new, *self.keys] if keep_old else [new]
        return new

    # --- HTTP -----------------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, target, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            path = target.split("?")[0]
            self.hits[path] += 1
            await self._answer(writer, method, path, headers, body)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _answer(
        self, writer: asyncio.StreamWriter, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> None:
        mode = self.modes.get(path)
        if mode == "hang":
            await self._released.wait()
            return
        if mode == "huge":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n")
            writer.write(b'{"keys": [')
            chunk = b" " * 65536
            for _ in range(HUGE_BYTES // len(chunk)):
                writer.write(chunk)
                await writer.drain()
            return
        if mode == "garbage":
            self._send(writer, 200, b'\x00{"keys": [not json')
            return
        if mode == "not-an-object":
            self._send(writer, 200, b"[1, 2, 3]")
            return
        if mode == "500":
            self._send(writer, 500, b'{"error": "server_error"}')
            return
        if mode in ("unsupported", "invalid-request"):
            error = "unsupported_token_type" if mode == "unsupported" else "invalid_request"
            self._send(writer, 400, json.dumps({"error": error, "error_description": "refused"}).encode())
            return
        status, document = self._route(method, path, headers, body)
        self._send(writer, status, json.dumps(document).encode())

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if path == self.metadata_path:
            return 200, {
                "issuer": self.metadata_issuer or self.issuer,
                "jwks_uri": self.base + JWKS_PATH,
                "introspection_endpoint": self.base + INTROSPECTION_PATH,
                **self.metadata_extra,
            }
        if path == JWKS_PATH:
            return 200, {"keys": [key.jwk for key in self.keys]}
        if path == INTROSPECTION_PATH and method == "POST":
            if headers.get("authorization") != basic():
                return 401, {"error": "invalid_client"}
            form = parse_qs(body.decode())
            token = form.get("token", [""])[0]
            return 200, self.introspection.get(token, {"active": False})
        return 404, {"error": "not found"}

    @staticmethod
    def _send(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 500: "Internal Server Error"}[
            status
        ]
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)


# --- what the tests build on it ---------------------------------------------------------------------

RESOURCE: Final = "https://mcp.example.com/mcp"


class ManualClock:
    """A clock moved by hand (``now``), for cache lifetimes and fetch rate limits."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def bearer(token: str) -> dict[str, list[str]]:
    """Request headers as the HTTP edge hands them over, with ``token``."""
    return {"authorization": [f"Bearer {token}"]}


async def authenticate(authenticator: Authenticator, token: str) -> Principal:
    """The principal for a request bearing ``token``: returned at once, or awaited (bounded)."""
    found = authenticator.authenticate(bearer(token))
    if isinstance(found, Principal):
        return found
    with anyio.fail_after(5):
        return await found
