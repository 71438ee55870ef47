"""What the OAuth flow reads outside the token endpoint: ``WWW-Authenticate`` challenges and metadata
documents (Protected Resource Metadata, authorization server metadata, registration answers).

Every document is fetched with a bound: a timeout (the client's), at most :data:`MAX_DOCUMENT_BYTES`
read, JSON objects only, and redirects followed only within the same origin and only a few times. A
metadata URL comes from a server's answer, so a server must not be able to make the client read a
large body or wander off to another host with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from .errors import AuthorizationError

MAX_DOCUMENT_BYTES: Final = 256 * 1024
MAX_REDIRECTS: Final = 3
#: One auth-param or auth-scheme of a ``WWW-Authenticate`` value (RFC 9110 §11.6.1): a token, then
#: ``=`` and a token or quoted string when it is a parameter.
_ITEM: Final = re.compile(r'[\s,]*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)(?:\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*))?')


@dataclass(frozen=True, slots=True)
class Challenge:
    """The ``Bearer`` (or ``DPoP``, RFC 9449 §7.1) challenge of a 401 or 403 (RFC 6750 §3): the
    parameters the flow uses."""

    resource_metadata: str | None = None
    scope: str | None = None
    error: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    #: The schemes challenged, lowercase (``bearer``, ``dpop``): a ``dpop`` one means the server takes
    #: DPoP-bound tokens.
    schemes: frozenset[str] = frozenset()

    @property
    def insufficient_scope(self) -> bool:
        return self.error == "insufficient_scope"


def parse_challenge(response: httpx.Response) -> Challenge:
    """The ``Bearer`` and ``DPoP`` challenges of the response's ``WWW-Authenticate`` headers, as one (a
    ``Bearer`` parameter wins over the same ``DPoP`` one); empty when there are none."""
    found: dict[str, dict[str, str]] = {}
    for value in response.headers.get_list("www-authenticate"):
        for scheme, params in _challenges(value):
            found.setdefault(scheme, params)
    params = {**found.get("dpop", {}), **found.get("bearer", {})}
    return Challenge(
        params.get("resource_metadata"), params.get("scope"), params.get("error"), params, frozenset(found)
    )


def _challenges(value: str) -> list[tuple[str, dict[str, str]]]:
    """The ``Bearer`` and ``DPoP`` challenges in one header value, with their parameters."""
    challenges: list[tuple[str, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for match in _ITEM.finditer(value):
        name, raw = match[1], match[2]
        if raw is None:  # a new scheme starts
            scheme = name.lower()
            current = {} if scheme in ("bearer", "dpop") else None
            if current is not None:
                challenges.append((scheme, current))
        elif current is not None:
            current[name.lower()] = _unquote(raw)
    return challenges


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


async def get_document(http: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``; ``None`` when it is not there (any status but 200, or not an object).
    Raises :class:`AuthorizationError` when the server cannot be reached or sends too much."""
    target = httpx.URL(url)
    for _ in range(MAX_REDIRECTS + 1):
        try:
            async with http.stream("GET", target, headers={"Accept": "application/json"}, auth=None) as response:
                if response.is_redirect and "location" in response.headers:
                    following = target.join(response.headers["location"])
                    if origin(following) != origin(target):
                        return None  # metadata lives with its server: another origin is not followed
                    target = following
                    continue
                if response.status_code != 200:
                    return None
                body = await read_bounded(response)
        except httpx.HTTPError as exc:
            raise AuthorizationError(f"{url}: {type(exc).__name__}: {exc}") from exc
        return _object(body)
    return None


async def post_document(http: httpx.AsyncClient, url: str, document: Mapping[str, Any]) -> tuple[int, Any]:
    """POST ``document`` as JSON: the status and the decoded answer (``None`` if not JSON)."""
    try:
        async with http.stream("POST", url, json=dict(document), auth=None) as response:
            body = await read_bounded(response)
            status = response.status_code
    except httpx.HTTPError as exc:
        raise AuthorizationError(f"{url}: {type(exc).__name__}: {exc}") from exc
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


async def read_bounded(response: httpx.Response, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise AuthorizationError(f"{response.request.url}: the answer is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
