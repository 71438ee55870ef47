"""What a refused request is told: the errors of authentication and authorization, and the
``WWW-Authenticate`` challenge each carries (RFC 6750 §3, RFC 9728 §5.1, MCP 2026-07-28 "Scope Challenge
Handling").

The tree (beside :mod:`ext_tasks.protocol.errors`, whose base classes these are)::

    Unauthenticated(-32600, 401)        no token, a malformed header, or a token refused (error="invalid_token")
    InsufficientScope(-32600, 403)      a valid token without the scopes a request needs
    AuthUnavailable(Busy: -32603, 503)  the authorization server cannot be asked (keys, introspection)

One header format, in this order, every parameter optional but the scheme::

    Bearer resource_metadata="<url>", error="<code>", scope="<s1 s2>", error_description="<text>"

Rules:

* Every value put between quotes is checked or cleaned here: scope tokens by RFC 6749 §3.3's grammar
  (:func:`check_scopes`, refused with ``ValueError``), descriptions by RFC 6750 §3's (anything else is
  dropped). No caller text and never a token reaches a header unchecked.
* An error raised where the resource is not known (the engine's :class:`InsufficientScope`) renders
  without ``resource_metadata``; the HTTP edge adds it (:meth:`Challenge.complete`), so a 403 from deep in
  the engine names the metadata like the 401s do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ..protocol.errors import INVALID_REQUEST, Busy, ProtocolError

#: RFC 6749 §3.3: ``scope-token = 1*( %x21 / %x23-5B / %x5D-7E )``.
_SCOPE_TOKEN: Final = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
#: RFC 6750 §3: what an ``error_description`` may hold (printable ASCII but ``"`` and ``\``).
_NOT_DESCRIPTION: Final = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
_MAX_DESCRIPTION: Final = 200


def is_scope_token(text: str) -> bool:
    return _SCOPE_TOKEN.fullmatch(text) is not None


def check_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """``scopes`` in order, without repeats; ``ValueError`` on one that is not a scope token (RFC 6749
    §3.3: no spaces, quotes or backslashes), so it can never break a challenge header."""
    checked = tuple(dict.fromkeys(scopes))
    for scope in checked:
        if not isinstance(scope, str) or not is_scope_token(scope):
            raise ValueError(f"not an OAuth scope token: {scope!r}")
    return checked


def _description(text: str) -> str:
    return _NOT_DESCRIPTION.sub("", text)[:_MAX_DESCRIPTION]


@dataclass(frozen=True, slots=True)
class Challenge:
    """The parts of every challenge this server sends: the URL of its Protected Resource Metadata (the
    path form, RFC 9728 §3.1) and the scopes every request needs. Built from the settings alone."""

    resource_metadata: str | None = None
    scopes: tuple[str, ...] = ()

    def render(
        self, *, error: str | None = None, scopes: Iterable[str] | None = None, description: str | None = None
    ) -> str:
        """The ``WWW-Authenticate`` value; ``scopes`` (checked) replaces the server-wide ones."""
        parts = []
        if self.resource_metadata:
            parts.append(f'resource_metadata="{self.resource_metadata}"')
        if error:
            parts.append(f'error="{error}"')
        scope = " ".join(self.scopes if scopes is None else check_scopes(scopes))
        if scope:
            parts.append(f'scope="{scope}"')
        if description and (cleaned := _description(description)):
            parts.append(f'error_description="{cleaned}"')
        return f"Bearer {', '.join(parts)}" if parts else "Bearer"

    def complete(self, value: str) -> str:
        """``value`` (a Bearer challenge rendered without this server's metadata URL) with it, first;
        any other value unchanged."""
        if not self.resource_metadata or "resource_metadata=" in value or value[:6].lower() != "bearer":
            return value
        rest = value[6:].strip()
        first = f'resource_metadata="{self.resource_metadata}"'
        return f"Bearer {first}, {rest}" if rest else f"Bearer {first}"


#: The challenge of a server that publishes no metadata (static bearer tokens only).
BARE: Final = Challenge()


class Unauthenticated(ProtocolError):
    """No credentials, malformed ones, or credentials refused, where credentials are required (HTTP 401).

    ``error`` is RFC 6750's code (``invalid_token`` for a token that was presented and refused; none when
    no token came). ``reason`` says why, for the log only.
    """

    code = INVALID_REQUEST
    http_status = 401

    def __init__(
        self,
        message: str = "Unauthorized: a bearer token is required",
        *,
        error: str | None = None,
        description: str | None = None,
        challenge: Challenge = BARE,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.error = error
        self.reason = reason or description or message
        self.challenge = challenge.render(error=error, description=description)

    def http_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.challenge}


INVALID_TOKEN_MESSAGE: Final = "Unauthorized: the bearer token is invalid or expired"  # noqa: S105 - no secret


def invalid_token(description: str, challenge: Challenge = BARE, *, reason: str | None = None) -> Unauthenticated:
    """A presented token refused: 401 with ``error="invalid_token"``. ``description`` is one of this
    package's fixed phrases (it goes into the header); ``reason`` may say more, for the log."""
    return Unauthenticated(
        INVALID_TOKEN_MESSAGE, error="invalid_token", description=description, challenge=challenge, reason=reason
    )


class InsufficientScope(ProtocolError):
    """A valid token lacking scopes a request needs (HTTP 403, ``error="insufficient_scope"``).

    ``scopes`` are all the scopes the operation needs (MCP asks for them in one challenge, not one at a
    time); they are checked as scope tokens. Raised by the authenticator for the server-wide scopes and
    by the engine for a tool's own; the HTTP edge adds ``resource_metadata`` when it is not there yet.
    """

    code = INVALID_REQUEST
    http_status = 403

    def __init__(
        self,
        scopes: Iterable[str],
        message: str | None = None,
        *,
        description: str | None = None,
        challenge: Challenge = BARE,
    ) -> None:
        self.scopes = check_scopes(scopes)
        needed = " ".join(self.scopes)
        super().__init__(
            message or f"Forbidden: the token lacks a scope this request needs ({needed})",
            data={"requiredScopes": list(self.scopes)},
        )
        self.challenge = challenge.render(error="insufficient_scope", scopes=self.scopes, description=description)

    def http_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.challenge}


class AuthUnavailable(Busy):
    """The authorization server cannot be asked now (its keys were never fetched, its introspection
    endpoint fails): the token may be fine, so this is 503 with ``Retry-After``, not 401."""

    def __init__(self, message: str, *, retry_after_s: float = 1) -> None:
        self.retry_after_s = max(1, int(retry_after_s + 0.999))
        super().__init__(message)
