"""What can go wrong while authorizing, as exceptions a caller can tell apart.

::

    ClientError
      AuthorizationError        any failure of the OAuth flow (discovery, registration, tokens)
        ResourceMismatch        the server's metadata names another resource than the URL we were given
        IssuerMismatch          an authorization server's metadata or callback names another issuer
        TooManyStepUps          the server kept asking for more scope after every re-authorization
        LoginRequired           a person would have to log in, and ``interactive=False`` was given

None of them carries a token or a secret: their messages name URLs, issuers and OAuth error codes only.
"""

from __future__ import annotations

from ..errors import ClientError


class AuthorizationError(ClientError):
    """The OAuth flow could not give the request a usable access token."""


class ResourceMismatch(AuthorizationError):
    """The Protected Resource Metadata's ``resource`` is not the server the client was pointed at (a
    server may not send us to get tokens for another one)."""

    def __init__(self, resource: str, expected: str) -> None:
        super().__init__(
            f"the server's protected resource metadata names the resource {resource!r}, "
            f"not the server URL {expected!r}: refusing to authorize"
        )
        self.resource = resource
        self.expected = expected


class IssuerMismatch(AuthorizationError):
    """An ``issuer`` (in metadata, or the RFC 9207 ``iss`` of a callback) is not the one expected,
    compared character for character."""

    def __init__(self, where: str, got: str | None, expected: str) -> None:
        shown = "no issuer" if got is None else f"the issuer {got!r}"
        super().__init__(f"{where} carries {shown}, expected {expected!r}: refusing it")
        self.got = got
        self.expected = expected


class TooManyStepUps(AuthorizationError):
    """The server answered ``insufficient_scope`` again after each of the allowed re-authorizations."""

    def __init__(self, attempts: int, scope: str) -> None:
        super().__init__(
            f"the server still refuses the request for lack of scope after {attempts} re-authorization(s) "
            f"(asked for: {scope or 'no scope named'})"
        )
        self.attempts = attempts
        self.scope = scope


class LoginRequired(AuthorizationError):
    """Authorizing needs a person at a browser, and the OAuth helper was made with ``interactive=False``
    (run ``ext-tasks login URL`` first, or make it interactive)."""

    def __init__(self, resource: str) -> None:
        super().__init__(f"{resource}: a login is needed (run `ext-tasks login {resource}`)")
        self.resource = resource
