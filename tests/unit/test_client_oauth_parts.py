"""The OAuth helper's parts on their own: the discovery URLs and checks, ``WWW-Authenticate`` parsing,
the RFC 9207 table, scope arithmetic, the token stores and the loopback listener."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Any

import httpx
import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

from ext_tasks.client.oauth import (
    AuthorizationError,
    FileStore,
    IssuerMismatch,
    KeyringStore,
    MemoryStore,
    ResourceMismatch,
    default_store,
)
from ext_tasks.client.oauth.browser import CallbackListener, open_in_browser
from ext_tasks.client.oauth.discovery import (
    AuthServer,
    authorization_server_metadata_urls,
    check_resource,
    resource_metadata_urls,
)
from ext_tasks.client.oauth.flow import check_iss, merge_scopes
from ext_tasks.client.oauth.store import keyring_usable
from ext_tasks.client.oauth.tokens import Tokens
from ext_tasks.client.oauth.wire import Challenge, parse_challenge

pytestmark = pytest.mark.anyio


def test_protected_resource_metadata_is_looked_for_in_the_specs_order() -> None:
    challenge = Challenge(resource_metadata="https://h/custom.json")
    assert resource_metadata_urls("https://h/public/mcp", challenge) == [
        "https://h/custom.json",
        "https://h/.well-known/oauth-protected-resource/public/mcp",
        "https://h/.well-known/oauth-protected-resource",
    ]
    assert resource_metadata_urls("https://h", Challenge()) == ["https://h/.well-known/oauth-protected-resource"]


def test_authorization_server_metadata_is_looked_for_in_the_specs_order() -> None:
    assert authorization_server_metadata_urls("https://as.example/tenant1") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration",
    ]
    assert authorization_server_metadata_urls("https://as.example") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    ("resource", "ok"),
    [
        ("https://mcp.example/mcp", True),
        ("HTTPS://MCP.example/mcp", True),
        ("https://mcp.example", True),  # metadata at the root well-known URI covers the whole origin
        ("https://mcp.example/mcpx", False),
        ("https://mcp.example/other", False),
        ("https://evil.example/mcp", False),
        ("http://mcp.example/mcp", False),
        ("https://mcp.example:8443/mcp", False),
    ],
)
def test_the_metadata_resource_must_be_the_server(resource: str, ok: bool) -> None:
    if ok:
        check_resource(resource, "https://mcp.example/mcp")
    else:
        with pytest.raises(ResourceMismatch):
            check_resource(resource, "https://mcp.example/mcp")


def test_the_bearer_challenge_is_found_among_others() -> None:
    response = httpx.Response(
        401,
        headers=[
            ("WWW-Authenticate", 'DPoP algs="ES256"'),
            ("WWW-Authenticate", 'Basic realm="x", Bearer scope="a b", resource_metadata="https://h/m", x=y'),
        ],
    )
    challenge = parse_challenge(response)
    assert (challenge.scope, challenge.resource_metadata, challenge.error) == ("a b", "https://h/m", None)
    quoted = httpx.Response(403, headers={"WWW-Authenticate": r'Bearer error="insufficient_scope", scope="a \"b\""'})
    assert parse_challenge(quoted).insufficient_scope and parse_challenge(quoted).scope == 'a "b"'
    assert parse_challenge(httpx.Response(401)) == Challenge()


@pytest.mark.parametrize(
    ("advertised", "iss", "accepted"),
    [
        (True, "https://as.example", True),
        (True, None, False),
        (False, "https://as.example", True),
        (False, None, True),
        (False, "https://evil.example", False),
        (True, "https://as.example/", False),  # no normalisation: a trailing slash is another issuer
        (True, "HTTPS://as.example", False),
    ],
)
def test_iss_follows_the_specs_table(advertised: bool, iss: str | None, accepted: bool) -> None:
    server = AuthServer("https://as.example", {"authorization_response_iss_parameter_supported": advertised})
    answer = {"code": "c"} | ({"iss": iss} if iss is not None else {})
    if accepted:
        check_iss(answer, server, "https://as.example")
    else:
        with pytest.raises(IssuerMismatch):
            check_iss(answer, server, "https://as.example")


def test_scopes_merge_as_a_set_in_first_seen_order() -> None:
    assert merge_scopes("a b", "b c", None) == "a b c"
    assert merge_scopes(None, "") is None


async def test_the_memory_store_keeps_copies() -> None:
    store = MemoryStore()
    value: dict[str, Any] = {"tokens": {"access_token": "x"}}
    await store.save("k", value)
    value["tokens"]["access_token"] = "changed"
    assert await store.load("k") == {"tokens": {"access_token": "x"}}
    await store.delete("k")
    assert await store.load("k") is None


async def test_the_file_store_writes_private_files_named_by_the_keys_hash(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "oauth")
    await store.save("https://mcp.example/mcp https://as.example", {"tokens": {"access_token": "secret"}})
    path = tmp_path / "oauth" / (hashlib.sha256(b"https://mcp.example/mcp https://as.example").hexdigest() + ".json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert await store.load("https://mcp.example/mcp https://as.example") == {"tokens": {"access_token": "secret"}}
    path.write_bytes(b"{" + b" " * 70_000 + b"}")  # grown past the bound: not trusted
    assert await store.load("https://mcp.example/mcp https://as.example") is None
    await store.delete("https://mcp.example/mcp https://as.example")
    assert not path.exists()
    assert "secret" not in repr(store)


async def test_the_file_store_lives_in_the_state_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(tmp_path / "state"))
    await FileStore().save("k", {"a": 1})
    [path] = (tmp_path / "state" / "oauth").iterdir()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


async def test_an_unusable_state_directory_holds_no_tokens_and_refuses_to_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("EXT_TASKS_STATE_DIR", str(tmp_path / "file"))
    assert await FileStore().load("k") is None  # a call to a server without OAuth goes on
    with pytest.raises(OSError, match="file"):
        await FileStore().save("k", {"a": 1})  # a login says why its tokens cannot be kept


@pytest.mark.parametrize(
    ("lifetime_s", "left_s", "due"),
    [
        (3600.0, 3000.0, False),  # a long token: refreshed 60 s before it ends
        (3600.0, 59.0, True),
        (30.0, 20.0, False),  # a 30 s token is not refreshed before every request...
        (30.0, 14.0, True),  # ...but in the second half of its life
    ],
)
def test_a_token_is_refreshed_near_its_end_by_its_own_lifetime(lifetime_s: float, left_s: float, due: bool) -> None:
    now = time.time()
    issued = now - (lifetime_s - left_s)
    tokens = Tokens("a", issued_at=issued, expires_at=issued + lifetime_s)
    assert tokens.expired(60.0) is due
    assert Tokens.from_json(tokens.to_json()) == tokens  # the lifetime survives the store


class _MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.entries.pop((service, username), None) is None:
            raise PasswordDeleteError(username)  # what keyring's own backends do


async def test_the_keyring_store_uses_the_service_and_the_key() -> None:
    previous = keyring.get_keyring()
    backend = _MemoryKeyring()
    keyring.set_keyring(backend)
    try:
        assert keyring_usable()
        store = KeyringStore()
        await store.save("https://mcp.example/mcp", {"issuer": "https://as.example"})
        assert ("ext-tasks", "https://mcp.example/mcp") in backend.entries
        assert await store.load("https://mcp.example/mcp") == {"issuer": "https://as.example"}
        await store.delete("https://mcp.example/mcp")
        await store.delete("https://mcp.example/mcp")  # already gone: fine
        assert backend.entries == {}
    finally:
        keyring.set_keyring(previous)


def test_the_default_store_is_the_file_without_a_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    from keyring.backends import fail

    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    try:
        monkeypatch.delenv("EXT_TASKS_TOKEN_STORE", raising=False)
        assert isinstance(default_store(), FileStore)
        monkeypatch.setenv("EXT_TASKS_TOKEN_STORE", "keyring")
        with pytest.raises(RuntimeError, match="keyring"):
            default_store()
        monkeypatch.setenv("EXT_TASKS_TOKEN_STORE", "file")
        assert isinstance(default_store(), FileStore)
    finally:
        keyring.set_keyring(previous)


async def _get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(url, headers=headers)


async def test_the_listener_answers_only_its_callback_with_its_state() -> None:
    async with CallbackListener(wait_timeout_s=5) as listener:
        listener.expect("s1")
        base = listener.redirect_uri
        assert base.startswith("http://127.0.0.1:") and base.endswith("/callback")
        assert (await _get(base.replace("/callback", "/favicon.ico"))).status_code == 404
        assert (await _get(f"{base}?code=c&state=other")).status_code == 400
        assert (await _get(base + "?code=c", headers={"X-Big": "x" * 20_000})).status_code == 400
        answer = await _get(f"{base}?code=c&state=s1&iss=https%3A%2F%2Fas.example")
        assert answer.status_code == 200 and "close this window" in answer.text
        assert await listener.wait() == {"code": "c", "state": "s1", "iss": "https://as.example"}


async def test_the_listener_gives_up_after_its_timeout() -> None:
    async with CallbackListener(wait_timeout_s=0.2) as listener:
        listener.expect("s")
        with pytest.raises(AuthorizationError, match="no authorization answer"):
            await listener.wait()


async def test_a_silent_connection_does_not_hold_the_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ext_tasks.client.oauth.browser.READ_TIMEOUT_S", 0.2)
    async with CallbackListener(wait_timeout_s=5) as listener:
        listener.expect("s")
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        status = await asyncio.wait_for(reader.readline(), 2)
        assert status.startswith(b"HTTP/1.1 400")
        writer.close()
        assert (await _get(f"{listener.redirect_uri}?code=c&state=s")).status_code == 200
        assert (await listener.wait())["code"] == "c"


def test_the_env_file_store_choice_needs_no_keyring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EXT_TASKS_TOKEN_STORE", "bogus")
    with pytest.raises(ValueError, match="EXT_TASKS_TOKEN_STORE"):
        default_store()
    assert os.environ["EXT_TASKS_TOKEN_STORE"] == "bogus"


def test_the_default_browser_prints_the_url_and_opens_nothing_without_a_display(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.get", lambda: type("B", (), {"open": lambda self, url: opened.append(url)})())
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    open_in_browser("https://as.example/authorize?x=1")
    assert "https://as.example/authorize?x=1" in capsys.readouterr().err
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("EXT_TASKS_OAUTH_BROWSER", "none")
    open_in_browser("https://as.example/authorize?x=2")
    monkeypatch.delenv("EXT_TASKS_OAUTH_BROWSER")
    open_in_browser("https://as.example/authorize?x=3")
    assert opened == ["https://as.example/authorize?x=3"]
