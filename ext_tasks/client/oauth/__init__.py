"""OAuth 2.1 for MCP clients (the 2026-07-28 authorization spec), as an ``httpx.Auth``::

    from ext_tasks.client import Client
    from ext_tasks.client.oauth import OAuth, default_store

    async with OAuth(url, store=default_store()) as oauth, Client(url, auth=oauth) as client:
        tools = await client.list_tools()     # a 401 starts discovery and a browser login

    await OAuth(url, store=default_store()).login()    # log in now (what `ext-tasks login URL` does)
    await OAuth(url, store=default_store()).logout()   # revoke and forget

Machines use the client credentials extension:
``OAuth(url, client_id=..., client_secret=..., client_credentials=True)`` (or ``private_key=PEM``).
"""

from .auth import OAuth
from .errors import AuthorizationError, IssuerMismatch, LoginRequired, ResourceMismatch, TooManyStepUps
from .store import FileStore, KeyringStore, MemoryStore, TokenStore, default_store

__all__ = [
    "AuthorizationError",
    "FileStore",
    "IssuerMismatch",
    "KeyringStore",
    "LoginRequired",
    "MemoryStore",
    "OAuth",
    "ResourceMismatch",
    "TokenStore",
    "TooManyStepUps",
    "default_store",
]
