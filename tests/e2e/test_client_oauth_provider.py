"""``ext_tasks.client`` with :class:`~ext_tasks.client.oauth.OAuth` against a real authorization server
(oidc-provider, ``tests.support.oidc_provider``) protecting an OAuth fleet (``tests.support.oauth_fleet``):
given only the server's URL, the client finds the provider (401, Protected Resource Metadata, OpenID
discovery), registers itself (Dynamic Client Registration), logs in through the played browser (PKCE,
``resource``, RFC 9207 ``iss``), steps up for ``deploy``, and a later process uses the stored tokens
without a login; logout revokes them at the provider and forgets them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ext_tasks.client import Client
from ext_tasks.client.oauth import FileStore, LoginRequired, OAuth
from tests.support.oauth_fleet import BASE_SCOPE, DEPLOY_SCOPE, OAuthFleet, running_oauth_fleet
from tests.support.oidc_provider import OidcProvider

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fleet(oidc_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthFleet]:
    with running_oauth_fleet(tmp_path_factory.mktemp("client-oauth"), oidc_provider) as running:
        yield running


def test_the_client_logs_in_steps_up_reuses_and_logs_out(fleet: OAuthFleet, tmp_path: Path) -> None:
    provider = fleet.provider
    opened: list[str] = []

    async def play_browser(url: str) -> None:
        opened.append(url)
        landing = await asyncio.to_thread(provider.play_browser, url)  # the provider's login and consent
        async with httpx.AsyncClient() as browser:
            await browser.get(landing)  # the redirect back, to the client's loopback listener

    store = FileStore(tmp_path / "oauth")

    async def run() -> tuple[str, dict[str, object], dict[str, object], bool]:
        oauth = OAuth(fleet.url, store=store, open_url=play_browser)
        async with oauth, Client(fleet.url, auth=oauth) as client:
            whoami = await client.call_tool("whoami", {})
            deployed = await client.call_tool("deploy", {"service": "billing"})
        later = OAuth(fleet.url, store=store, interactive=False)
        async with later, Client(fleet.url, auth=later) as client:
            names = sorted(tool["name"] for tool in await client.list_tools())
        async with OAuth(fleet.url, store=store) as leaving:
            revoked = await leaving.logout()
        return " ".join(names), whoami, deployed, revoked

    names, whoami, deployed, revoked = asyncio.run(run())
    seen = json.loads(whoami["content"][0]["text"])  # type: ignore[index]
    assert seen["issuer"] == provider.issuer and seen["scopes"] == [BASE_SCOPE]
    assert deployed["content"][0]["text"].startswith("billing deployed to production")  # type: ignore[index]
    assert "deploy" in names.split()  # the stored, stepped-up token, without a login
    assert len(opened) == 2  # the login and the step-up
    assert DEPLOY_SCOPE in opened[1] or DEPLOY_SCOPE.replace(":", "%3A") in opened[1]
    assert revoked is True
    assert list((tmp_path / "oauth").iterdir()) == []

    async def after_logout() -> None:
        oauth = OAuth(fleet.url, store=store, interactive=False)
        async with oauth, Client(fleet.url, auth=oauth) as client:
            await client.list_tools()

    with pytest.raises(LoginRequired):
        asyncio.run(after_logout())
