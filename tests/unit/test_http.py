"""The Litestar app, driven in-process over ASGI: what an HTTP client sees at ``POST /mcp``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
import pytest

from ext_tasks import Context, ToolRegistry
from ext_tasks.auth import AnonymousAuthenticator, Authenticator, BearerTokenAuthenticator
from ext_tasks.config import Settings
from ext_tasks.engine import Engine
from ext_tasks.http import App, OriginPolicy, create_app
from ext_tasks.protocol.errors import HEADER_MISMATCH, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from ext_tasks.protocol.resume import ResumeCodec

pytestmark = pytest.mark.anyio

VERSION = "2026-07-28"
BASE_URL = "http://127.0.0.1:3001"
LIMIT = 2048


async def count(ctx: Context, n: int) -> str:
    """Reports progress n times."""
    for step in range(1, n + 1):
        await ctx.report_progress(step, n)
    return f"counted to {n}"


async def echo(text: str) -> str:
    """Returns its argument."""
    return text


def make_app(settings: Settings | None = None, authenticator: Authenticator | None = None) -> App:
    registry = ToolRegistry("http-test", version="1.0.0")
    registry.tool()(count)
    registry.tool()(echo)
    engine = Engine(registry, ResumeCodec([b"h" * 32], audience="http-test"))
    return create_app(engine, settings or Settings(max_body_bytes=LIMIT), authenticator or AnonymousAuthenticator())


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with connect(make_app()) as http:
        yield http


def connect(app: App) -> httpx.AsyncClient:
    # The app's ASGI signature is more precise than httpx's generic one; they are compatible.
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


def rpc(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: int | None = 1,
    meta: dict[str, Any] | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a conforming 2026-07-28 POST; ``meta`` adds ``_meta`` keys."""
    body_params = {
        **(params or {}),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            **(meta or {}),
        },
    }
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": body_params}
    if request_id is not None:
        body["id"] = request_id
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = body_params["name"]
    return json.dumps(body).encode(), headers


async def post(
    http: httpx.AsyncClient,
    method: str = "tools/list",
    params: dict[str, Any] | None = None,
    *,
    extra_headers: Mapping[str, str] | None = None,
    request_id: int | None = 1,
    meta: dict[str, Any] | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    body, headers = rpc(method, params, request_id=request_id, meta=meta)
    headers.update(extra_headers or {})
    with anyio.fail_after(5):
        return await http.post("/mcp", content=body if content is None else content, headers=headers)


def json_rpc_error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert payload["jsonrpc"] == "2.0"
    assert "id" in payload
    error: dict[str, Any] = payload["error"]
    return error


# --- the happy path ---------------------------------------------------------------------------------


async def test_request_from_loopback_gets_a_json_result(client: httpx.AsyncClient) -> None:
    response = await post(client)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert payload["id"] == 1
    assert payload["result"]["resultType"] == "complete"
    assert {tool["name"] for tool in payload["result"]["tools"]} == {"count", "echo"}


async def test_notification_is_accepted_with_202_and_no_body(client: httpx.AsyncClient) -> None:
    response = await post(client, "notifications/cancelled", {"requestId": 1}, request_id=None)

    assert response.status_code == 202
    assert response.content == b""


async def test_session_id_header_is_ignored_and_never_echoed(client: httpx.AsyncClient) -> None:
    response = await post(client, extra_headers={"Mcp-Session-Id": "abc123"})

    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers


# --- errors as HTTP statuses ------------------------------------------------------------------------


async def test_unknown_method_is_404_with_a_json_rpc_body(client: httpx.AsyncClient) -> None:
    response = await post(client, "ping")

    assert response.status_code == 404
    assert json_rpc_error(response)["code"] == METHOD_NOT_FOUND
    assert response.json()["id"] == 1


async def test_body_that_is_not_json_is_400_parse_error(client: httpx.AsyncClient) -> None:
    response = await post(client, content=b"{nope")

    assert response.status_code == 400
    assert json_rpc_error(response)["code"] == PARSE_ERROR


async def test_header_mismatch_is_400(client: httpx.AsyncClient) -> None:
    response = await post(client, extra_headers={"Mcp-Method": "prompts/list"})

    assert response.status_code == 400
    assert json_rpc_error(response)["code"] == HEADER_MISMATCH


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/event-stream"])
async def test_wrong_content_type_is_400(client: httpx.AsyncClient, content_type: str) -> None:
    response = await post(client, extra_headers={"Content-Type": content_type})

    assert response.status_code == 400
    assert json_rpc_error(response)["code"] == INVALID_REQUEST


async def test_json_content_type_with_a_charset_is_accepted(client: httpx.AsyncClient) -> None:
    response = await post(client, extra_headers={"Content-Type": "application/json; charset=utf-8"})

    assert response.status_code == 200


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_methods_other_than_post_are_405(client: httpx.AsyncClient, method: str) -> None:
    with anyio.fail_after(5):
        response = await client.request(method, "/mcp", headers={"Accept": "text/event-stream"})

    assert response.status_code == 405


async def test_body_over_the_limit_is_413_naming_the_limit(client: httpx.AsyncClient) -> None:
    body, _ = rpc("tools/call", {"name": "echo", "arguments": {"text": "x" * (LIMIT * 2)}})

    response = await post(client, "tools/call", {"name": "echo"}, content=body)

    assert response.status_code == 413
    error = json_rpc_error(response)
    assert error["code"] == INVALID_REQUEST
    assert str(LIMIT) in error["message"]


async def test_body_just_under_the_limit_is_served(client: httpx.AsyncClient) -> None:
    body, _ = rpc("tools/call", {"name": "echo", "arguments": {"text": ""}})
    padding = LIMIT - len(body) - 10
    body, _ = rpc("tools/call", {"name": "echo", "arguments": {"text": "y" * padding}})
    assert len(body) <= LIMIT

    response = await post(client, "tools/call", {"name": "echo"}, content=body)

    assert response.status_code == 200
    assert response.json()["result"]["content"][0]["text"] == "y" * padding


# --- DNS-rebinding protection -----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:3001", "127.0.0.1.evil.example.com"])
async def test_foreign_host_header_is_403_with_a_json_rpc_error(client: httpx.AsyncClient, host: str) -> None:
    response = await post(client, extra_headers={"Host": host})

    assert response.status_code == 403
    assert json_rpc_error(response)["code"] == INVALID_REQUEST


@pytest.mark.parametrize("origin", ["http://evil.example.com", "https://evil.example.com:3001", "null"])
async def test_foreign_origin_is_403_with_a_json_rpc_error(client: httpx.AsyncClient, origin: str) -> None:
    response = await post(client, extra_headers={"Origin": origin})

    assert response.status_code == 403
    assert json_rpc_error(response)["code"] == INVALID_REQUEST


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("localhost:3001", "http://localhost:3001"),
        ("127.0.0.1:3001", "http://127.0.0.1:3001"),
        ("127.0.0.1:3001", "http://localhost:5173"),
        ("[::1]:3001", "http://[::1]:3001"),
        ("localhost", None),
    ],
)
async def test_loopback_host_and_origin_are_accepted(client: httpx.AsyncClient, host: str, origin: str | None) -> None:
    headers = {"Host": host}
    if origin is not None:
        headers["Origin"] = origin

    response = await post(client, extra_headers=headers)

    assert response.status_code == 200


async def test_configured_origin_is_accepted_and_others_refused() -> None:
    settings = Settings(allowed_origins=("https://app.example.com",))
    async with connect(make_app(settings)) as http:
        allowed = await post(http, extra_headers={"Origin": "https://app.example.com"})
        refused = await post(http, extra_headers={"Origin": "http://localhost:3001"})

    assert allowed.status_code == 200
    assert refused.status_code == 403


async def test_a_foreign_host_stays_refused_after_allowed_ones_were_served(client: httpx.AsyncClient) -> None:
    # The policy remembers the Host values it allowed; what it has not allowed is checked every time.
    for _ in range(3):
        assert (await post(client, extra_headers={"Host": "localhost:3001"})).status_code == 200
        assert (await post(client, extra_headers={"Host": "evil.example.com"})).status_code == 403


def test_the_remembered_host_values_are_bounded_when_any_host_is_allowed() -> None:
    policy = OriginPolicy(Settings(host="0.0.0.0"))  # not loopback, no list: every Host passes

    for n in range(1000):
        policy.check({"host": [f"host-{n}.example.com"]})

    assert len(policy._allowed) <= 64


# --- authentication ---------------------------------------------------------------------------------


@pytest.fixture
async def guarded() -> AsyncIterator[httpx.AsyncClient]:
    authenticator = BearerTokenAuthenticator({"tok-alice": "alice"})
    async with connect(make_app(authenticator=authenticator)) as http:
        yield http


async def test_missing_bearer_token_is_401_with_www_authenticate(guarded: httpx.AsyncClient) -> None:
    response = await post(guarded)

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    json_rpc_error(response)


@pytest.mark.parametrize("authorization", ["Bearer tok-bob", "Bearer ", "Basic dG9rLWFsaWNlOg==", "tok-alice"])
async def test_unknown_bearer_token_is_401_with_www_authenticate(
    guarded: httpx.AsyncClient, authorization: str
) -> None:
    response = await post(guarded, extra_headers={"Authorization": authorization})

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_known_bearer_token_is_served(guarded: httpx.AsyncClient) -> None:
    response = await post(guarded, extra_headers={"Authorization": "Bearer tok-alice"})

    assert response.status_code == 200
    assert response.json()["result"]["resultType"] == "complete"


# --- server-sent events -----------------------------------------------------------------------------


def sse_events(text: str) -> list[dict[str, Any]]:
    """Parse ``event: message`` / ``data:`` frames; every frame must be a message event."""
    events = []
    for frame in text.split("\n\n"):
        if not frame.strip() or frame.startswith(":"):
            continue
        lines = frame.split("\n")
        assert lines[0] == "event: message", frame
        assert len(lines) == 2 and lines[1].startswith("data: "), frame
        events.append(json.loads(lines[1].removeprefix("data: ")))
    return events


async def test_progress_is_streamed_as_server_sent_events(client: httpx.AsyncClient) -> None:
    response = await post(
        client, "tools/call", {"name": "count", "arguments": {"n": 2}}, request_id=7, meta={"progressToken": "tok"}
    )

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-accel-buffering"] == "no"
    events = sse_events(response.text)
    assert [event.get("method") for event in events] == ["notifications/progress", "notifications/progress", None]
    assert [event["params"]["progress"] for event in events[:2]] == [1, 2]
    assert events[-1]["id"] == 7
    assert events[-1]["result"]["content"][0]["text"] == "counted to 2"
