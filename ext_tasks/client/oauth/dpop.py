"""DPoP (RFC 9449, the MCP extension ``io.modelcontextprotocol/auth/dpop``): access tokens bound to a key
the client holds, so a stolen token is useless without it.

The client makes one P-256 key per stored grant (kept with the tokens: a bound token is worth nothing
without its key) and signs a fresh proof for every request: the token endpoint's (``htm`` POST, ``htu``
the endpoint) and each request to the MCP server (with ``ath``, the hash of the token it carries). A
server that wants a nonce says so with ``use_dpop_nonce`` and a ``DPoP-Nonce`` header; the request is
then signed again with it, once.

Hand-written on PyJWT rather than through authlib: authlib's OAuth 2 client has no DPoP support.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

DPOP_ALG: Final = "ES256"
NONCE_ERROR: Final = "use_dpop_nonce"


class DpopKey:
    """A proof-of-possession key (never shown in a repr)."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey | None = None) -> None:
        self._key = private_key or ec.generate_private_key(ec.SECP256R1())
        self._public_jwk: dict[str, Any] = json.loads(ECAlgorithm.to_jwk(self._key.public_key()))

    def __repr__(self) -> str:
        return "DpopKey(ES256)"

    @classmethod
    def from_pem(cls, pem: str) -> DpopKey | None:
        try:
            key = serialization.load_pem_private_key(pem.encode(), password=None)
        except (ValueError, TypeError):
            return None
        return cls(key) if isinstance(key, ec.EllipticCurvePrivateKey) else None

    def to_pem(self) -> str:
        encoded = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return encoded.decode()

    def proof(self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None) -> str:
        """A fresh proof for one request (RFC 9449 §4.2): ``htu`` without query or fragment."""
        parts = urlsplit(url)
        claims: dict[str, Any] = {
            "jti": secrets.token_urlsafe(24),
            "htm": method.upper(),
            "htu": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
            "iat": int(time.time()),
        }
        if access_token is not None:
            digest = hashlib.sha256(access_token.encode("ascii")).digest()
            claims["ath"] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        if nonce is not None:
            claims["nonce"] = nonce
        headers = {"typ": "dpop+jwt", "jwk": self._public_jwk}
        return jwt.encode(claims, self._key, algorithm=DPOP_ALG, headers=headers)


def supported_by(algorithms: tuple[str, ...] | None) -> bool:
    """Whether an authorization server's ``dpop_signing_alg_values_supported`` takes our proofs."""
    return algorithms is not None and DPOP_ALG in algorithms
