"""Which addresses a URL-mode elicitation may offer a person, and how the CLI shows where one leads.

A URL elicitation asks the person to open a page (a sign-in, a payment): the server chooses the page,
so the CLI offers it only when it can be shown exactly and its destination is plain to see:

* ``https:``, or ``http:`` to this machine (a loopback address or ``localhost``, as local sign-in
  callbacks use); never ``javascript:``, ``data:``, ``file:`` or plain ``http:`` across a network;
* nothing hidden in it: no control, bidi or other character :mod:`.safe_text` would escape, and no
  space (what is shown is what the person copies);
* no ``user@`` before the host, the classic disguise (``https://bank.example@evil.example/``);
* a host that has an ASCII (IDNA) form, which is what is shown as the destination, so a look-alike
  letter from another script shows as ``xn--...``.

The CLI never opens it: the person does, after typing ``y``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from .safe_text import is_safe

#: Longer than any sign-in address needs; a longer one would flood the terminal.
MAX_URL_CHARS: Final = 8192


class Refused(ValueError):
    """The address is not offered to the person (the reason is the message)."""


@dataclass(frozen=True, slots=True)
class Offer:
    """An address fit to show: the URL as written, its scheme, and its host in ASCII."""

    url: str
    scheme: str
    host: str
    #: The host as written in the URL, when it differs from :attr:`host` (an internationalised name).
    written_host: str | None = None


def offer(raw: object) -> Offer:
    """The address to show for a URL elicitation's ``url``, or :class:`Refused` saying why not."""
    if not isinstance(raw, str) or not raw:
        raise Refused("no address given")
    if len(raw) > MAX_URL_CHARS:
        raise Refused(f"the address is longer than {MAX_URL_CHARS} characters")
    if not is_safe(raw) or any(char.isspace() for char in raw):
        raise Refused("the address holds spaces, control or invisible characters")
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise Refused(f"the address cannot be read ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise Refused(f"{scheme}: addresses are not offered (only https:)" if scheme else "the address has no scheme")
    host = parts.hostname or ""
    if not host:
        raise Refused("the address names no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("the address has a user name before its host, which disguises where it leads")
    if scheme == "http" and not _loopback(host):
        raise Refused("only https: addresses are offered (http: only to this machine)")
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise Refused("the host name is not a valid internationalised name") from None
    return Offer(raw, scheme, ascii_host, host if ascii_host != host else None)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
