"""A tiny local OAuth authorization server for the benchmark's OAuth stacks (and ``investigations.auth_cost``):
an issuer on 127.0.0.1 serving its RFC 8414 metadata and its JWKS, and nothing else (no token endpoint:
the benchmark mints its tokens itself with the issuer's private key, :meth:`SigningKey.mint`).

``python -m bench.issuer --port P --jwks FILE`` serves the public keys of ``FILE`` (a JWKS document) as
``http://127.0.0.1:P``; the runner starts it pinned with the loader, away from the server's CPU. The
server under test fetches the metadata and the keys once (at its first request) and then never again.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

#: The scope the OAuth stacks require of every request (``EXT_TASKS_AUTH_SCOPES``), and their tokens carry.
SCOPE = "mcp:bench"


@dataclass(frozen=True)
class SigningKey:
    """One private signing key of the issuer (generated per run), with its public JWK."""

    algorithm: str
    kid: str
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls, algorithm: str = "RS256") -> SigningKey:
        if algorithm == "RS256":
            return cls(algorithm, f"rsa-{uuid.uuid4().hex[:8]}", rsa.generate_private_key(65537, 2048))
        if algorithm == "ES256":
            return cls(algorithm, f"ec-{uuid.uuid4().hex[:8]}", ec.generate_private_key(ec.SECP256R1()))
        raise ValueError(f"unsupported algorithm {algorithm}")

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        raw = RSAAlgorithm.to_jwk(public, as_dict=True) if isinstance(public, rsa.RSAPublicKey) else (
            ECAlgorithm.to_jwk(public, as_dict=True))  # fmt: skip
        return {**raw, "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    def mint(self, issuer: str, audience: str, *, lifetime_s: float = 86_400.0, subject: str = "bench") -> str:
        """A signed access token (RFC 9068 claims) for ``audience``, unique (its ``jti``)."""
        now = int(time.time())
        claims = {
            "iss": issuer,
            "sub": subject,
            "aud": audience,
            "client_id": "bench-client",
            "scope": SCOPE,
            "iat": now,
            "exp": now + int(lifetime_s),
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self.private, algorithm=self.algorithm, headers={"kid": self.kid, "typ": "at+jwt"})


def jwks(keys: Sequence[SigningKey]) -> dict[str, Any]:
    return {"keys": [key.jwk() for key in keys]}


def _handler(documents: dict[str, bytes]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path.split("?", 1)[0])
            self.send_response(200 if body is not None else 404)
            body = body if body is not None else b'{"error":"not_found"}'
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def documents(issuer: str, key_set: dict[str, Any]) -> dict[str, bytes]:
    """The issuer's RFC 8414 metadata and JWKS, by path."""
    metadata = {
        "issuer": issuer,
        "jwks_uri": f"{issuer}/jwks",
        "token_endpoint": f"{issuer}/token",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": [SCOPE],
    }
    return {
        "/.well-known/oauth-authorization-server": json.dumps(metadata).encode(),
        "/jwks": json.dumps(key_set).encode(),
    }


class IssuerThread:
    """The issuer served from a thread of this process (``investigations.auth_cost``); ``close()`` stops it."""

    def __init__(self, key_set: dict[str, Any]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.httpd.RequestHandlerClass = _handler(documents(self.url, key_set))
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="bench-issuer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.issuer", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jwks", type=Path, required=True, help="the JWKS document to serve (public keys)")
    args = parser.parse_args(argv)
    issuer = f"http://127.0.0.1:{args.port}"
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", args.port), _handler(documents(issuer, json.loads(args.jwks.read_text())))
    )
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
