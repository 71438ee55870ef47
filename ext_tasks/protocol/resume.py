"""The ``requestState`` codec: claims bound to one request, signed (or sealed) with a key ring.

A multi round-trip request hands the client an opaque ``requestState`` and gets it back on the
retry, possibly at another instance. The client is hostile by assumption, so the state carries
*claims* that the server checks before believing a single byte of it:

=====  ======================================================================
``v``  format version
``iat`` / ``exp``  issue and expiry time (seconds; the lifetime is short and configurable)
``m``  method (``tools/call``, ``prompts/get``, ``resources/read``)
``t``  target: tool or prompt name, or resource URI
``a``  digest of the canonical JSON of the call's arguments
``aud``  audience: the identity of the server (fleet) that issued it
``p``  tag of the caller's principal (a keyed hash, so the identity itself is not readable)
``jti``  random id of this state (for single-use enforcement by a store)
``s``  the tool function's own state
``r``  answers collected in earlier rounds, so a re-run function sees them all
``q``  the keys the function asked so far: only answers under these keys are carried in ``r``
=====  ======================================================================

Two token formats, chosen by configuration:

* ``v1.<payload>.<signature>``: the claims as base64url JSON, signed with itsdangerous (HMAC-SHA256).
  Readable by the client, unforgeable.
* ``v1e.<b64url(kid ‖ nonce ‖ AES-256-GCM ciphertext)>``: the same claims, encrypted and authenticated,
  for tool state that must stay confidential. The prefix and key id are bound as associated data.

Key ring: ``keys[0]`` is the newest key and signs; every key verifies, so keys rotate without
downtime (deploy ``[new, old]``, then ``[new]`` once the old states' lifetime has passed).
Each master key yields per-purpose sub-keys through HKDF, so the signing key, the encryption key and
the principal-tag key are never the same bytes.

Every failure raises :class:`InvalidRequestState` with a fixed wire message; ``reason`` says why, for
the server log only. A state is never sealed longer than :data:`MAX_TOKEN_CHARS`, the most ``unseal``
accepts: :class:`RequestStateTooLarge` instead, so no instance hands out a state that none takes back.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from itsdangerous import Signer
from itsdangerous.signer import SigningAlgorithm

from .errors import InvalidRequestState, RequestStateTooLarge

FORMAT_VERSION: Final = 1
SIGNED_PREFIX: Final = "v1."
SEALED_PREFIX: Final = "v1e."
MIN_KEY_BYTES: Final = 32
#: States larger than this are refused before any decoding work is spent on them, and never sealed.
MAX_TOKEN_CHARS: Final = 256 * 1024
#: Tolerated clock difference between instances when checking ``iat``.
CLOCK_SKEW_S: Final = 60
#: How long a requestState stays valid, unless configured (``EXT_TASKS_STATE_TTL_S``).
STATE_TTL_S: Final = 600
_TAG_CACHE_SIZE: Final = 4096


class _Claims(msgspec.Struct, frozen=True):
    v: int
    iat: int
    exp: int
    m: str
    t: str
    a: str
    aud: str
    p: str
    jti: str
    s: Any = None
    r: dict[str, dict[str, Any]] = {}
    q: list[str] = []


_claims_encoder = msgspec.json.Encoder()
_claims_decoder = msgspec.json.Decoder(_Claims)
_canonical_encoder = msgspec.json.Encoder(order="sorted")


def _digest(canonical: bytes) -> str:
    return _b64encode(hashlib.sha256(canonical).digest()[:16])


class Binding(msgspec.Struct, frozen=True):
    """What a state is bound to: the request it belongs to and who made it."""

    method: str
    target: str
    arguments_digest: str
    principal: str


class ResumeClaims(msgspec.Struct, frozen=True):
    """The verified content of a state."""

    state: Any
    responses: Mapping[str, dict[str, Any]]
    state_id: str
    expires_at: int
    #: The keys asked in the rounds so far (``responses`` holds answers under these keys only).
    asked: frozenset[str] = frozenset()


def digest_arguments(arguments: Mapping[str, Any] | None) -> str:
    """A short digest of the canonical JSON of ``arguments`` (key order does not matter)."""
    if not arguments:
        return _EMPTY_ARGUMENTS_DIGEST
    return _digest(_canonical_encoder.encode(arguments))


class _HmacSha256(SigningAlgorithm):
    """itsdangerous' HMAC-SHA256 (RFC 2104) for one key, from SHA-256 states that have already taken
    the key's inner and outer pads: each signature copies them instead of hashing the key again, about
    twice as fast as the stdlib's one-shot ``hmac.digest`` (which already halves ``hmac.new``)."""

    def __init__(self, key: bytes) -> None:
        block_size = hashlib.sha256().block_size
        # RFC 2104: a key longer than a block is hashed first (ours are 32 bytes); then zero-padded.
        block = (hashlib.sha256(key).digest() if len(key) > block_size else key).ljust(block_size, b"\0")
        self._key = key
        self._inner = hashlib.sha256(block.translate(_INNER_PAD))
        self._outer = hashlib.sha256(block.translate(_OUTER_PAD))

    def get_signature(self, key: bytes, value: bytes) -> bytes:
        if key != self._key:  # itsdangerous always passes our key; anything else is signed as asked
            return hmac.digest(key, value, "sha256")
        inner = self._inner.copy()
        inner.update(value)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def signature_text(self, value: bytes) -> bytes:
        """The signature as it follows the last ``.`` of a signed value (base64url, no padding)."""
        return _b64encode_bytes(self.get_signature(self._key, value))


_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
_INNER_PAD: Final = bytes(byte ^ 0x36 for byte in range(256))
_OUTER_PAD: Final = bytes(byte ^ 0x5C for byte in range(256))


def _hkdf(master: bytes, purpose: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=f"ext-tasks/v1/{purpose}".encode()).derive(master)


class _KeyMaterial:
    __slots__ = ("_tags", "aead", "hmac", "kid", "signer", "tag_key")

    def __init__(self, master: bytes) -> None:
        if len(master) < MIN_KEY_BYTES:
            raise ValueError(f"requestState keys must be at least {MIN_KEY_BYTES} bytes")
        signing_key = _hkdf(master, "request-state/hmac-sha256")
        self.hmac = _HmacSha256(signing_key)
        self.signer = Signer(signing_key, key_derivation="none", algorithm=self.hmac)
        self.aead = AESGCM(_hkdf(master, "request-state/aes-256-gcm"))
        self.tag_key = _hkdf(master, "principal-tag")
        self.kid = _hkdf(master, "key-id")[:4]
        self._tags: dict[str, str] = {}

    def principal_tag(self, principal: str) -> str:
        # A server sees few distinct principals; remembering their tags saves an HMAC per seal and unseal.
        tag = self._tags.get(principal)
        if tag is None:
            tag = _b64encode(hmac.digest(self.tag_key, principal.encode("utf-8"), "sha256")[:16])
            if len(self._tags) >= _TAG_CACHE_SIZE:
                self._tags.clear()
            self._tags[principal] = tag
        return tag


class ResumeCodec:
    """Seal and unseal ``requestState`` for one server identity (``audience``)."""

    def __init__(
        self,
        keys: Sequence[bytes],
        *,
        audience: str,
        ttl_s: int = STATE_TTL_S,
        encrypt: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not keys:
            raise ValueError("at least one requestState key is required")
        if ttl_s <= 0:
            raise ValueError("the requestState lifetime must be positive")
        self._ring = [_KeyMaterial(key) for key in keys]
        self._by_kid = {material.kid: material for material in self._ring}
        self._audience = audience
        self._ttl_s = ttl_s
        self._encrypt = encrypt
        self._clock = clock

    @property
    def ttl_s(self) -> int:
        return self._ttl_s

    def seal(
        self,
        binding: Binding,
        *,
        state: Any = None,
        responses: Mapping[str, dict[str, Any]] | None = None,
        asked: Iterable[str] = (),
    ) -> str:
        """A new state for the next round of ``binding``'s request.

        ``asked`` are the keys the function asked so far (the caller keeps ``responses`` to those).

        Raises:
            RequestStateTooLarge: the state would be longer than :data:`MAX_TOKEN_CHARS`, so ``unseal``
                would refuse it on the next round.
        """
        now = int(self._clock())
        newest = self._ring[0]
        claims = _Claims(
            v=FORMAT_VERSION,
            iat=now,
            exp=now + self._ttl_s,
            m=binding.method,
            t=binding.target,
            a=binding.arguments_digest,
            aud=self._audience,
            p=newest.principal_tag(binding.principal),
            jti=_b64encode(os.urandom(9)),
            s=state,
            r=dict(responses or {}),
            q=sorted(asked),
        )
        payload = _claims_encoder.encode(claims)
        if self._encrypt:
            nonce = os.urandom(12)
            sealed = newest.aead.encrypt(nonce, payload, SEALED_PREFIX.encode() + newest.kid)
            token = SEALED_PREFIX + _b64encode(newest.kid + nonce + sealed)
        else:
            token = SIGNED_PREFIX + newest.signer.sign(_b64encode(payload)).decode("ascii")
        if len(token) > MAX_TOKEN_CHARS:
            raise RequestStateTooLarge(len(token), MAX_TOKEN_CHARS)
        return token

    def unseal(self, token: object, binding: Binding) -> ResumeClaims:
        """Verify ``token`` for ``binding`` and return its claims.

        Raises:
            InvalidRequestState: for any failure; ``reason`` names it for the log.
        """
        if not isinstance(token, str):
            raise InvalidRequestState("not a string")
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidRequestState("too large")
        payload, material = self._open(token)
        try:
            claims = _claims_decoder.decode(payload)
        except msgspec.DecodeError:
            raise InvalidRequestState("malformed claims") from None
        self._check(claims, binding, material)
        return ResumeClaims(
            state=claims.s, responses=claims.r, state_id=claims.jti, expires_at=claims.exp, asked=frozenset(claims.q)
        )

    def _open(self, token: str) -> tuple[bytes, _KeyMaterial]:
        if token.startswith(SEALED_PREFIX):
            if not self._encrypt:
                raise InvalidRequestState("sealed state where signed state is configured")
            return self._open_sealed(token[len(SEALED_PREFIX) :])
        if token.startswith(SIGNED_PREFIX):
            if self._encrypt:
                raise InvalidRequestState("signed state where sealed state is configured")
            return self._open_signed(token[len(SIGNED_PREFIX) :].encode("ascii", "replace"))
        raise InvalidRequestState("unknown format")

    def _open_signed(self, signed: bytes) -> tuple[bytes, _KeyMaterial]:
        payload, separator, signature = signed.rpartition(b".")
        if not separator:
            raise InvalidRequestState("malformed")
        # Verify by signing the payload again (HMAC is deterministic) and comparing the signature's text
        # in constant time: unlike decoding the signature, this accepts exactly one spelling of a state
        # (no padding, junk or unused low bits), so replay checks keyed on the token cannot be dodged.
        for material in self._ring:
            if hmac.compare_digest(material.hmac.signature_text(payload), signature):
                # The payload is our own (the signature says so): decoded without the checks of
                # base64.urlsafe_b64decode, which cost more than the decoding itself.
                return binascii.a2b_base64(payload.translate(_FROM_URLSAFE) + b"=" * (-len(payload) % 4)), material
        raise InvalidRequestState("bad signature or unknown key")

    def _open_sealed(self, body: str) -> tuple[bytes, _KeyMaterial]:
        raw = _b64decode(body)
        if _b64encode(raw) != body:
            raise InvalidRequestState("non-canonical encoding")
        if len(raw) < 4 + 12 + 16:
            raise InvalidRequestState("truncated")
        kid, nonce, sealed = raw[:4], raw[4:16], raw[16:]
        material = self._by_kid.get(kid)
        if material is None:
            raise InvalidRequestState("unknown key")
        try:
            return material.aead.decrypt(nonce, sealed, SEALED_PREFIX.encode() + kid), material
        except Exception:  # noqa: BLE001 - cryptography raises InvalidTag; anything else is just as bad
            raise InvalidRequestState("authentication failed") from None

    def _check(self, claims: _Claims, binding: Binding, material: _KeyMaterial) -> None:
        now = int(self._clock())
        if claims.v != FORMAT_VERSION:
            raise InvalidRequestState("format version")
        if claims.exp < now:
            raise InvalidRequestState("expired")
        if claims.iat > now + CLOCK_SKEW_S:
            raise InvalidRequestState("issued in the future")
        if not hmac.compare_digest(claims.aud, self._audience):
            raise InvalidRequestState("audience")
        if claims.m != binding.method:
            raise InvalidRequestState("method")
        if claims.t != binding.target:
            raise InvalidRequestState("target")
        if not hmac.compare_digest(claims.a, binding.arguments_digest):
            raise InvalidRequestState("arguments")
        if not hmac.compare_digest(claims.p, material.principal_tag(binding.principal)):
            raise InvalidRequestState("principal")


def _b64encode(raw: bytes) -> str:
    return _b64encode_bytes(raw).decode("ascii")


def _b64encode_bytes(raw: bytes) -> bytes:
    # base64.urlsafe_b64encode, without its type checks and second pass: it runs a few times a request.
    return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE).rstrip(b"=")


_EMPTY_ARGUMENTS_DIGEST: Final = _digest(b"{}")


def _b64decode(text: str) -> bytes:
    # Callers check the spelling is canonical (one state, one token text), so replay and dedup caches
    # keyed on the token cannot be dodged by re-spelling it.
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidRequestState("bad base64") from None


def generate_key() -> str:
    """A new 256-bit key, as printed by ``ext-tasks keygen`` (base64url, no padding)."""
    return _b64encode(secrets.token_bytes(32))


def parse_key(text: str) -> bytes:
    """Decode one configured key (the ``keygen`` format); raises ``ValueError`` if unusable."""
    text = text.strip()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("a requestState key must be base64url text (see `ext-tasks keygen`)") from None
    if len(raw) < MIN_KEY_BYTES:
        raise ValueError(f"a requestState key must decode to at least {MIN_KEY_BYTES} bytes")
    return raw
