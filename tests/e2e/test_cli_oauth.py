"""``ext-tasks login``, ``call`` and ``logout`` against a hosted server: the OAuth fleet (three instances
behind nginx, the resource server of a real OpenID provider, ``tests.support.oauth_fleet``).

The CLI is given the server's URL and nothing else: it finds the authorization server from the 401,
registers itself (Dynamic Client Registration: the provider is open to it), and prints the authorization
URL (``EXT_TASKS_OAUTH_BROWSER=none``: no browser here). The test plays the browser with plain HTTP
against the provider (its login and consent need no page, ``tests.support.oidc_provider``), and opens
where the provider sends it: the CLI's loopback listener, with the code.

- On a terminal (pexpect), the first ``ext-tasks call`` logs in by itself, then runs the task to its end;
  the transcript is printed (``pytest -s``) and holds no token.
- Without one: ``ext-tasks login``; calls with the kept tokens; a call after the access token expired
  (a 3 s lifetime, no leeway) refreshes it; ``ext-tasks logout`` revokes the refresh token at the
  provider and forgets both; a call then fails with exit 2 and says how to log in.
- Client credentials (``--client-credentials``, the secret from ``EXT_TASKS_CLIENT_SECRET``) need no
  terminal and no login.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pexpect
import pytest

from tests.support.cluster import wait_for
from tests.support.oauth_fleet import OAuthFleet, running_oauth_fleet
from tests.support.oidc_provider import MACHINE_CLIENT, OidcProvider
from tests.support.processes import REPO

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "ext_tasks"]
TIMEOUT_S = 60
#: Short enough that a test outlives a token, long enough for a call to finish with one.
ACCESS_TOKEN_TTL_S = 3


@pytest.fixture(scope="module")
def fleet(oidc_provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthFleet]:
    directory = tmp_path_factory.mktemp("cli-oauth")
    with running_oauth_fleet(
        directory, oidc_provider, access_token_ttl_s=ACCESS_TOKEN_TTL_S, env={"EXT_TASKS_AUTH_LEEWAY_S": "0"}
    ) as running:
        yield running


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("EXT_TASKS_")}
    return {
        **env,
        "EXT_TASKS_STATE_DIR": str(state),
        "EXT_TASKS_TOKEN_STORE": "file",
        "EXT_TASKS_OAUTH_BROWSER": "none",
        **extra,
    }


def _run(state: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=REPO,
        env=_env(state, **extra),
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _authorization_url(fleet: OAuthFleet, text: str) -> str | None:
    endpoint = re.escape(fleet.provider.metadata["authorization_endpoint"])
    found = re.search(rf"{endpoint}\?\S+", text)
    return found[0] if found else None


def _play_browser(fleet: OAuthFleet, authorization_url: str) -> None:
    """What a person's browser does: through the provider's login and consent, then to the CLI's
    loopback listener with the code."""
    landing = fleet.provider.play_browser(authorization_url)
    assert landing.startswith("http://127.0.0.1:"), landing
    assert "code=" in landing, landing
    answered = httpx.get(landing, timeout=10.0)
    assert answered.status_code == 200, answered.text


def _stored(state: Path) -> list[dict[str, Any]]:
    """Every stored credential of the file store: the JSON objects holding an ``access_token``."""
    found: list[dict[str, Any]] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            if "access_token" in value:
                found.append(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in sorted((state / "oauth").glob("*")) if (state / "oauth").is_dir() else []:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        walk(json.loads(path.read_text()))
    return found


def _login(fleet: OAuthFleet, state: Path) -> str:
    """``ext-tasks login URL`` without a terminal, the browser played; its stderr."""
    process = subprocess.Popen(
        [*CLI, "login", fleet.url],
        cwd=REPO,
        env=_env(state),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    said = ""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while (url := _authorization_url(fleet, said)) is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0 and process.poll() is None, f"no authorization URL:\n{said}"
            ready, _, _ = select.select([process.stderr], [], [], remaining)
            if ready:  # the raw descriptor: a buffered readline would hide what it read ahead from select
                said += os.read(process.stderr.fileno(), 65536).decode()
        _play_browser(fleet, url)
        out, rest = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    said += rest
    assert process.returncode == 0, said
    return said + out


def _whoami(result_text: str) -> dict[str, Any]:
    caller: dict[str, Any] = json.loads(json.loads(result_text)["content"][0]["text"])
    return caller


def test_a_first_call_on_a_terminal_logs_in_and_runs_the_task(fleet: OAuthFleet, tmp_path: Path) -> None:
    transcript = io.StringIO()
    child = pexpect.spawn(CLI[0], [*CLI[1:], "call", "whoami", "--url", fleet.url], cwd=str(REPO),
                          env=_env(tmp_path), encoding="utf-8", timeout=TIMEOUT_S, dimensions=(40, 400))  # fmt: skip
    child.logfile_read = transcript
    try:
        child.expect(re.escape(fleet.provider.metadata["authorization_endpoint"]) + r"\?\S+")
        _play_browser(fleet, child.after)
        child.expect('"subject": "alice"')
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    print(f"--- the terminal of `ext-tasks call whoami --url {fleet.url}`:\n{transcript.getvalue()}")
    assert child.exitstatus == 0, transcript.getvalue()
    [tokens] = _stored(tmp_path)
    for secret in (tokens["access_token"], tokens.get("refresh_token")):
        assert secret is None or secret not in transcript.getvalue()
    # Kept for the next command: a second call needs no browser, and no terminal either.
    again = _run(tmp_path, "call", "whoami", "--url", fleet.url, "--json")
    assert again.returncode == 0, again.stderr
    assert _whoami(again.stdout)["subject"] == "alice"


def test_login_refresh_and_logout_without_a_terminal(fleet: OAuthFleet, tmp_path: Path) -> None:
    said = _login(fleet, tmp_path)
    [tokens] = _stored(tmp_path)
    assert tokens["access_token"] not in said and tokens["refresh_token"] not in said
    called = _run(tmp_path, "call", "whoami", "--url", fleet.url, "--json")
    assert called.returncode == 0, called.stderr
    assert _whoami(called.stdout)["subject"] == "alice"

    # Once the access token has expired, the next call refreshes it (the server refuses the old one).
    expires_at = jwt.decode(tokens["access_token"], options={"verify_signature": False})["exp"]
    wait_for(lambda: time.time() > expires_at + 0.5 or None, ACCESS_TOKEN_TTL_S + 5, message="the token to expire")
    refreshed = _run(tmp_path, "call", "whoami", "--url", fleet.url, "--json")
    assert refreshed.returncode == 0, refreshed.stderr
    [renewed] = _stored(tmp_path)
    assert renewed["access_token"] != tokens["access_token"]
    assert jwt.decode(renewed["access_token"], options={"verify_signature": False})["exp"] > time.time()

    out = _run(tmp_path, "logout", fleet.url)
    assert out.returncode == 0, out.stderr
    assert _stored(tmp_path) == []
    # The refresh token was revoked at the provider, not only forgotten here.
    client_id = jwt.decode(renewed["access_token"], options={"verify_signature": False})["client_id"]
    refused = httpx.post(
        fleet.provider.metadata["token_endpoint"],
        data={"grant_type": "refresh_token", "refresh_token": renewed["refresh_token"], "client_id": client_id},
        timeout=10.0,
    )
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant", refused.text

    # Without a terminal nobody can log in: exit 2 and what to do instead.
    denied = _run(tmp_path, "call", "whoami", "--url", fleet.url)
    assert denied.returncode == 2, denied.stderr
    assert "ext-tasks login" in denied.stderr


def test_client_credentials_need_no_terminal_and_no_login(fleet: OAuthFleet, tmp_path: Path) -> None:
    assert MACHINE_CLIENT.client_secret is not None
    called = _run(
        tmp_path,
        "call",
        "whoami",
        "--url",
        fleet.url,
        "--json",
        "--client-credentials",
        "--client-id",
        MACHINE_CLIENT.client_id,
        EXT_TASKS_CLIENT_SECRET=MACHINE_CLIENT.client_secret,
    )
    assert called.returncode == 0, called.stderr
    caller = _whoami(called.stdout)
    assert caller["client_id"] == MACHINE_CLIENT.client_id
    assert MACHINE_CLIENT.client_secret not in called.stdout + called.stderr
