"""``ext-tasks login URL`` and ``ext-tasks logout URL``, and the OAuth options every client command takes.

A command with ``--token`` sends that bearer token and nothing else. Otherwise it carries an
:class:`~.oauth.OAuth`: tokens kept from an earlier login are sent; a server that answers 401 is
logged in to (on a terminal: the browser is opened, or its address printed; without one the command
stops with exit 2 and says to run ``ext-tasks login``), and an expired token is refreshed on the way.
``--client-credentials`` logs a machine in with its own credentials and needs no person at all.

The client secret is best given as ``EXT_TASKS_CLIENT_SECRET``: a flag is visible to every user of
the machine in the process list. Tokens are never printed; where they are kept is said once, at login.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Final, TextIO

from .errors import ClientError
from .oauth import FileStore, KeyringStore, OAuth, TokenStore, default_store
from .safe_text import safe_text

ENV_CLIENT_ID: Final = "EXT_TASKS_CLIENT_ID"
ENV_CLIENT_SECRET: Final = "EXT_TASKS_CLIENT_SECRET"  # noqa: S105 - the variable's name, not a secret
ENV_CLIENT_METADATA_URL: Final = "EXT_TASKS_CLIENT_METADATA_URL"
SIGNING_ALGS: Final = ("RS256", "ES256")


class LoginUsageError(ClientError):
    """The OAuth options do not go together (reported as a usage error, exit 2)."""


def add_auth_flags(parser: argparse.ArgumentParser) -> None:
    """The OAuth options of every client command (``--token`` is the connection flags')."""
    group = parser.add_argument_group("OAuth (servers that need a login)")
    group.add_argument("--client-id", help=f"a client id registered with the authorization server ({ENV_CLIENT_ID})")
    group.add_argument(
        "--client-secret",
        help=f"its secret; better given as {ENV_CLIENT_SECRET}, which the process list does not show",
    )
    group.add_argument(
        "--client-metadata-url",
        metavar="URL",
        help=f"an https URL of this client's metadata document, used as its client id ({ENV_CLIENT_METADATA_URL})",
    )
    group.add_argument(
        "--client-credentials",
        action="store_true",
        help="log in as a machine with the client's own credentials (secret or --private-key), no browser",
    )
    group.add_argument("--private-key", type=Path, metavar="PEM", help="sign a JWT client assertion with this key")
    group.add_argument("--signing-alg", choices=SIGNING_ALGS, default="RS256", help="the assertion's algorithm")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    login = commands.add_parser("login", help="log in to a server that needs OAuth, and keep its tokens")
    login.add_argument("url", help="the server's MCP endpoint")
    add_auth_flags(login)
    logout = commands.add_parser("logout", help="revoke and forget the tokens kept for a server")
    logout.add_argument("url", help="the server's MCP endpoint")


def oauth_for(args: argparse.Namespace, url: str, *, interactive: bool) -> OAuth | None:
    """The OAuth of a command, or None when it sends a fixed ``--token``. ``interactive``: a person is
    there to log in (else a login that would need one raises :class:`~.oauth.LoginRequired`)."""
    if getattr(args, "token", None):
        return None
    client_id = args.client_id or os.environ.get(ENV_CLIENT_ID) or None
    client_secret = args.client_secret or os.environ.get(ENV_CLIENT_SECRET) or None
    private_key = _read_key(args.private_key) if args.private_key is not None else None
    if args.client_credentials and client_id is None:
        raise LoginUsageError(f"--client-credentials needs --client-id (or {ENV_CLIENT_ID})")
    if args.client_credentials and client_secret is None and private_key is None:
        raise LoginUsageError(f"--client-credentials needs {ENV_CLIENT_SECRET} (or --client-secret) or --private-key")
    if private_key is not None and client_id is None:
        raise LoginUsageError(f"--private-key needs --client-id (or {ENV_CLIENT_ID})")
    return OAuth(
        url,
        store=_store(),
        client_id=client_id,
        client_secret=client_secret,
        private_key=private_key,
        signing_alg=args.signing_alg,
        client_metadata_url=args.client_metadata_url or os.environ.get(ENV_CLIENT_METADATA_URL) or None,
        client_credentials=args.client_credentials,
        interactive=interactive,
    )


def _read_key(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise LoginUsageError(f"cannot read the private key {path}: {exc.strerror}") from None


def _store() -> TokenStore:
    try:
        return default_store()
    except ValueError as exc:  # EXT_TASKS_TOKEN_STORE set to something else
        raise LoginUsageError(str(exc)) from None


def _kept_in(store: TokenStore) -> str:
    if isinstance(store, KeyringStore):
        return "the system keyring"
    if isinstance(store, FileStore):
        return f"{store.path('').parent} (readable by you only)"
    return "memory"


async def login(args: argparse.Namespace, err: TextIO) -> int:
    oauth = oauth_for(args, args.url, interactive=True)
    assert oauth is not None
    async with oauth:
        await oauth.login()
    print(f"logged in to {safe_text(args.url)}; tokens kept in {_kept_in(oauth.store)}", file=err)
    return 0


async def logout(args: argparse.Namespace, err: TextIO) -> int:
    async with OAuth(args.url, store=_store(), interactive=False) as oauth:
        revoked = await oauth.logout()
    said = "tokens revoked and forgotten" if revoked else "tokens forgotten (none kept, or nothing to revoke)"
    print(f"logged out of {safe_text(args.url)}: {said}", file=err)
    return 0
