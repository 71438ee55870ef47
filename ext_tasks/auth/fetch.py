"""Asking an authorization server, bounded: its metadata (RFC 8414, OpenID discovery), its keys, its
introspection endpoint. An endpoint that is down, slow or hostile costs a request at most
``timeout_s`` and ``max_bytes`` of memory, and is told as :class:`FetchFailed`, never as a crash.

Rules:

* One deadline bounds connecting, sending and reading all the body; the body is streamed and cut off
  past ``max_bytes`` (a declared ``Content-Length`` over it is refused before reading). Compressed
  answers are refused (``Accept-Encoding: identity`` is asked): a small compressed body may inflate to
  anything. Redirects are not followed.
* Only a JSON object in a 200 answer is a success. Of a 400 answer, only its OAuth ``error`` code is
  read (RFC 6749 §5.2; a few KiB at most), for the caller to tell a refusal from a failure.
* The reason of a failure names the URL and what went wrong, never a request's body (a token, a client
  secret) or an answer's content.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import msgspec

MAX_BYTES: Final = 256 * 1024
_CHUNK: Final = 16 * 1024
#: The most read of a 400 answer for its ``error`` code.
_ERROR_BYTES: Final = 4096
#: RFC 6749 §5.2: ``error = 1*( %x20-21 / %x23-5B / %x5D-7E )``.
_ERROR_CODE: Final = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]{1,64}")


class FetchFailed(Exception):
    """The answer could not be had or used; ``str()`` says why, for the log. ``error``: the OAuth error
    code (RFC 6749 §5.2) of a 400 answer that named one."""

    def __init__(self, reason: str, *, error: str | None = None) -> None:
        super().__init__(reason)
        self.error = error


class Fetcher:
    """One pooled HTTP client for every request to the authorization servers."""

    def __init__(
        self, *, timeout_s: float, max_bytes: int = MAX_BYTES, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:  # made in the event loop that uses it
            self._http = httpx.AsyncClient(
                transport=self._transport,
                timeout=httpx.Timeout(self.timeout_s),
                follow_redirects=False,
                headers={"Accept": "application/json", "Accept-Encoding": "identity"},
            )
        return self._http

    async def get_json(self, url: str) -> dict[str, Any]:
        return await self._json(self._client().build_request("GET", url), url)

    async def post_form(self, url: str, form: Mapping[str, str], *, authorization: str) -> dict[str, Any]:
        request = self._client().build_request("POST", url, data=dict(form), headers={"Authorization": authorization})
        return await self._json(request, url)

    async def _json(self, request: httpx.Request, url: str) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await self._body(request, url)
        except TimeoutError:
            raise FetchFailed(f"{url}: no complete answer within {self.timeout_s:g} s") from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            raise FetchFailed(f"{url}: {type(exc).__name__}") from None
        try:
            document = msgspec.json.decode(body)
        except msgspec.DecodeError:
            raise FetchFailed(f"{url}: the answer is not JSON") from None
        if not isinstance(document, dict):
            raise FetchFailed(f"{url}: the answer is not a JSON object")
        return document

    async def _body(self, request: httpx.Request, url: str) -> bytes:
        response = await self._client().send(request, stream=True)
        try:
            if response.status_code != 200:
                error = await _oauth_error(response) if response.status_code == 400 else None
                named = f" ({error})" if error else ""
                raise FetchFailed(f"{url}: HTTP {response.status_code}{named}", error=error)
            if response.headers.get("content-encoding", "identity").lower() != "identity":
                raise FetchFailed(f"{url}: a compressed answer (identity was asked)")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise FetchFailed(f"{url}: the answer is larger than {self.max_bytes} bytes")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_raw(_CHUNK):
                size += len(chunk)
                if size > self.max_bytes:
                    raise FetchFailed(f"{url}: the answer is larger than {self.max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


async def _oauth_error(response: httpx.Response) -> str | None:
    """The ``error`` code of an OAuth error answer (a JSON object), if it fits in a few KiB."""
    body = b""
    async for chunk in response.aiter_raw(_CHUNK):
        body += chunk
        if len(body) > _ERROR_BYTES:
            return None
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    error = document.get("error") if isinstance(document, dict) else None
    return error if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else None


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order MCP's authorization-server discovery gives:
    RFC 8414 (path inserted after the host), then OpenID discovery with the path inserted, then with
    it appended (the OpenID Connect Discovery 1.0 form); for an issuer without a path, the first two."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration"]
    return [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]


async def discover(fetcher: Fetcher, issuer: str) -> dict[str, Any]:
    """The first metadata document found for ``issuer`` whose ``issuer`` is exactly it (RFC 8414 §3.3,
    OpenID Discovery §4.3: a document naming another issuer MUST NOT be used)."""
    reasons = []
    for url in metadata_urls(issuer):
        try:
            document = await fetcher.get_json(url)
        except FetchFailed as exc:
            reasons.append(str(exc))
            continue
        if document.get("issuer") != issuer:
            reasons.append(f"{url}: names another issuer")
            continue
        return document
    raise FetchFailed("no usable metadata: " + "; ".join(reasons))
