"""Bad input, generated (issue 6, part 2): property-based tests with hypothesis against the live app.

The whole app (Litestar, engine, task methods, the in-process task worker, the conformance fixture's
tools, prompts, resources and task tools) runs in this process on one event loop, in a blocking portal
thread, and is driven through ``httpx.ASGITransport``: no sockets, so thousands of requests run fast.
The app is composed exactly as ``ext-tasks serve`` composes it (``ext_tasks.cli``), 2025-11-25 shim
included. Two of them run side by side and every generated request goes to both: one on the in-memory
store with signed ``requestState``, one on a real Valkey with sealed (encrypted) ``requestState``.

Generated: malformed JSON and raw bytes (invalid UTF-8 included), wrong JSON-RPC shapes, every method
with junk params, hostile ``_meta``, wrong / missing / duplicated headers, huge and deeply nested
bodies, random and mutated ``requestState`` (mutations of real ones, forged claims), random task ids,
answers (``tasks/update`` and MRTR retries) for keys never asked, and 2025-11-25 (session) traffic on
the same endpoint.

Every response must satisfy the same invariants (:func:`problems`): no 5xx; HTTP 202 with an empty
body; any other body one well-formed JSON-RPC message (``{"jsonrpc":"2.0","id":...,"error":{"code":
int,"message":str}}`` for errors; HTTP status >= 400 always an error), or an SSE stream ending with
one; no traceback text; and an answer within :data:`REQUEST_TIMEOUT_S` (no hang). Server-side, no
``internal error`` may be logged (caplog). Violations are collected, not raised one by one, so a run
reports the full figures; each test then fails, at its teardown, if it saw any (one example of each
kind is shown). Totals (requests, 5xx, status histogram) are printed by the last test, with or
without ``-s``.

Reproducible: ``derandomize=True``, no example database, ``deadline=None``.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ext_tasks.compose import Runtime, build_authenticator, load_registry
from ext_tasks.config import Settings
from ext_tasks.http import create_app
from ext_tasks.options import WorkerOptions
from ext_tasks.protocol.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from ext_tasks.protocol.resume import generate_key, parse_key
from tests.support.mcp_http import header_value
from tests.support.valkey import running_valkey

VERSION: Final = "2026-07-28"
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
BASE_URL: Final = "http://127.0.0.1:3001"
BODY_LIMIT: Final = 64 * 1024
REQUEST_TIMEOUT_S: Final = 10.0
#: The issue's bar: at least this many generated requests per run of this module.
MIN_REQUESTS: Final = 10_000
TOOLS_MODULE: Final = "ext_tasks.examples.conformance"
FULL_CAPABILITIES: Final[dict[str, Any]] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {},
    "roots": {},
    "extensions": {TASKS_EXTENSION: {}},
}
METHODS: Final = (
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    # Not subscriptions/listen: a valid one is an endless stream by design, which ASGITransport
    # (it buffers the whole body) would wait on forever.
)
NAME_FIELDS: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
LEAKS: Final = (b"Traceback (most recent", b'File "/', b"site-packages")

# --- totals and the response invariants -----------------------------------------------------------


@dataclass
class Totals:
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: int = 0
    per_test: Counter[str] = field(default_factory=Counter)
    per_test_statuses: dict[str, Counter[int]] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def report(self) -> str:
        lines = [
            f"fuzz totals: {self.requests} requests in {self.seconds:.1f}s, {self.server_errors} with status 5xx, "
            f"{sum(len(found) for found in self.violations.values())} invariant violations",
            f"  statuses: {dict(sorted(self.statuses.items()))}",
            f"  per test: {dict(self.per_test)}",
        ]
        return "\n".join(lines)


TOTALS = Totals()


@dataclass(frozen=True)
class Exchange:
    status: int
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def message(self) -> dict[str, Any] | None:
        """The JSON-RPC message answering the request (the last one of an SSE stream)."""
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            final = None
            for data in sse_data(self.body):
                parsed = json.loads(data)
                if isinstance(parsed, dict) and ("result" in parsed or "error" in parsed):
                    final = parsed
            return final
        parsed = json.loads(self.body)
        return parsed if isinstance(parsed, dict) else None

    def result(self) -> dict[str, Any] | None:
        message = self.message()
        if message is None or not isinstance(message.get("result"), dict):
            return None
        result: dict[str, Any] = message["result"]
        return result

    def error(self) -> dict[str, Any] | None:
        message = self.message()
        if message is None or not isinstance(message.get("error"), dict):
            return None
        error: dict[str, Any] = message["error"]
        return error


def sse_data(body: bytes) -> list[str]:
    events = body.decode("utf-8").replace("\r\n", "\n").split("\n\n")
    found = []
    for event in events:
        lines = [line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")]
        if lines:
            found.append("\n".join(lines))
    return found


def _is_id(value: object) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def message_problems(message: object, status: int) -> list[str]:
    if not isinstance(message, dict):
        return [f"not a JSON object: {message!r:.200}"]
    found = []
    if message.get("jsonrpc") != "2.0":
        found.append('"jsonrpc" is not "2.0"')
    if "id" not in message or not _is_id(message["id"]):
        found.append(f"missing or invalid id: {message.get('id', '<absent>')!r:.80}")
    if ("result" in message) == ("error" in message):
        found.append("not exactly one of result / error")
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict):
            found.append("error is not an object")
        else:
            code, text = error.get("code"), error.get("message")
            if not isinstance(code, int) or isinstance(code, bool):
                found.append(f"error.code is not an integer: {code!r}")
            if not isinstance(text, str) or not text:
                found.append(f"error.message is not a non-empty string: {text!r}")
    elif status >= 400:
        found.append(f"HTTP {status} without a JSON-RPC error")
    elif not isinstance(message.get("result"), dict):
        found.append("result is not an object")
    return found


def problems(exchange: Exchange) -> list[str]:
    """Every invariant the response breaks (empty: a well-formed answer)."""
    found = []
    if exchange.status >= 500:
        found.append(f"HTTP {exchange.status}")
    if any(leak in exchange.body for leak in LEAKS):
        found.append("traceback text in the body")
    if exchange.status == 202:
        if exchange.body:
            found.append("HTTP 202 with a body")
        return found
    content_type = exchange.headers.get("content-type", "")
    try:
        if content_type.startswith("text/event-stream"):
            data = sse_data(exchange.body)
            for item in data:
                json.loads(item)
            message = exchange.message()
            found += ["SSE stream without a final response"] if message is None else []
            found += message_problems(message, exchange.status) if message is not None else []
        elif content_type.startswith("application/json"):
            found += message_problems(exchange.json(), exchange.status)
        else:
            found.append(f"content-type {content_type!r}")
    except (ValueError, UnicodeDecodeError) as exc:
        found.append(f"body is not JSON ({exc})")
    return found


# --- the live app, in process ----------------------------------------------------------------------

Headers = list[tuple[str | bytes, str | bytes]]


class LiveApp:
    """One app on the portal's event loop; :meth:`send` posts raw bytes and checks the answer."""

    def __init__(self, name: str, portal: BlockingPortal, runtime: Runtime, client: httpx.AsyncClient) -> None:
        self.name = name
        self.portal = portal
        self.runtime = runtime
        self.client = client
        self.test = "setup"

    async def _post(self, body: bytes, headers: Headers) -> Exchange:
        raw = [(_bytes(name), _bytes(value)) for name, value in headers]
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            response = await self.client.post("/mcp", content=body, headers=raw)
        return Exchange(response.status_code, response.headers, response.content)

    def send(self, body: bytes, headers: Headers, *, what: str = "") -> Exchange:
        started = time.monotonic()
        try:
            exchange = self.portal.call(self._post, body, headers)
        except TimeoutError:
            exchange = Exchange(599, httpx.Headers(), b"no answer within the timeout")
        TOTALS.seconds += time.monotonic() - started
        TOTALS.requests += 1
        TOTALS.per_test[self.test] += 1
        TOTALS.statuses[exchange.status] += 1
        TOTALS.per_test_statuses.setdefault(self.test, Counter())[exchange.status] += 1
        if exchange.status >= 500:
            TOTALS.server_errors += 1
        found = problems(exchange)
        if found:
            report = (
                f"[{self.name}] {what} {'; '.join(found)}\n    request headers {headers!r:.300}\n"
                f"    request body {body[:300]!r}\n    response {exchange.status} {exchange.body[:400]!r}"
            )
            TOTALS.violations.setdefault(self.test, []).append(report)
        return exchange

    def rpc(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        capabilities: Mapping[str, Any] | None = None,
        request_id: Any = 1,
        what: str = "",
    ) -> Exchange:
        """A conforming request (headers mirroring the body), unless ``params`` make it otherwise."""
        body_params = {
            **(params or {}),
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": dict(
                    FULL_CAPABILITIES if capabilities is None else capabilities
                ),
                **dict((params or {}).get("_meta") or {}),
            },
        }
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body_params}
        return self.send(dumps(body), conforming_headers(method, body_params), what=what or method)


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("latin-1")


def dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8")


def conforming_headers(method: str, params: Mapping[str, Any]) -> Headers:
    headers: Headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", VERSION),
        ("Mcp-Method", method),
    ]
    name_field = NAME_FIELDS.get(method)
    value = params.get(name_field) if name_field else None
    if isinstance(value, str):
        headers.append(("Mcp-Name", header_value(value)))
    return headers


@dataclass
class Apps:
    signed: LiveApp
    sealed: LiveApp

    def both(self) -> tuple[LiveApp, LiveApp]:
        return self.signed, self.sealed

    def set_test(self, name: str) -> None:
        self.signed.test = self.sealed.test = name


def _settings(**overrides: Any) -> Settings:
    return Settings(
        tools=TOOLS_MODULE,
        state_keys=(parse_key(generate_key()),),
        max_body_bytes=BODY_LIMIT,
        worker=WorkerOptions(shutdown_grace_s=0, lease_s=5),
        **overrides,
    ).validate()


async def _open(runtime: Runtime, settings: Settings) -> httpx.AsyncClient:
    """The app exactly as ``ext-tasks serve`` composes it (``ext_tasks.cli``), legacy shim included;
    ASGITransport runs no lifespan, so the runtime is started here."""
    app = create_app(runtime.handler, settings, build_authenticator(settings), ready=runtime.store.ping)
    await runtime.start()
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


async def _close(runtime: Runtime, client: httpx.AsyncClient) -> None:
    await client.aclose()
    await runtime.stop()


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apps]:
    with running_valkey(tmp_path_factory.mktemp("fuzz-valkey")) as valkey, start_blocking_portal("asyncio") as portal:
        live = []
        for name, settings in (
            ("memory/signed", _settings()),
            ("valkey/sealed", _settings(valkey_url=valkey.url, valkey_prefix="fuzz", state_encrypt=True)),
        ):
            # The registry is loaded per app so a tool that edits its registry affects one app only.
            runtime = Runtime(load_registry(TOOLS_MODULE), settings)
            client = portal.call(_open, runtime, settings)
            live.append(LiveApp(name, portal, runtime, client))
        for app in live:
            # What some tests work on, made before any fuzzing (so no limit reached meanwhile is in the way).
            real_states(app)
            waiting_task(app)
            legacy_session(app)
        try:
            yield Apps(*live)
        finally:
            for app in live:
                portal.call(_close, app.runtime, app.client)


@pytest.fixture
def fuzz(apps: Apps, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> Iterator[Apps]:
    """Names the running test in the totals; afterwards fails on any violation and any logged internal
    error (one function-scoped caplog spans all of the test's hypothesis examples)."""
    apps.set_test(request.node.name)
    caplog.set_level(logging.ERROR)
    yield apps
    internal = [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if "internal error" in record.getMessage().lower() or record.levelno >= logging.ERROR
    ]
    violations = TOTALS.violations.get(request.node.name, [])
    statuses = dict(sorted(TOTALS.per_test_statuses.get(request.node.name, Counter()).items()))
    print(
        f"\n{request.node.name}: {TOTALS.per_test[request.node.name]} requests, statuses {statuses}, "
        f"{len(violations)} violations"
    )
    # One example of each kind of violation (what broke, and the first bytes of the answer).
    kinds: dict[str, str] = {}
    for violation in violations:
        kind = violation.split("\n")[0].split("] ", 1)[-1] + violation.rsplit("response", 1)[-1][:90]
        kinds.setdefault(kind, violation)
    assert not violations, f"{len(violations)} responses broke the invariants, {len(kinds)} kinds:\n" + "\n".join(
        list(kinds.values())[:10]
    )
    assert not internal, f"{len(internal)} internal errors logged; first ones:\n" + "\n".join(internal[:8])


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[
            # `fuzz` (caplog and the counters) is meant to span every example of a test.
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# --- strategies ---------------------------------------------------------------------------------------

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=16)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=10), json_values, max_size=4)
ids = st.integers() | st.text(max_size=10) | st.none() | st.booleans() | st.floats() | st.lists(scalars, max_size=2)


def meta(capabilities: Mapping[str, Any] = FULL_CAPABILITIES, **extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": dict(capabilities),
        **extra,
    }


# --- 1. raw bytes and malformed JSON -------------------------------------------------------------------

VALID_BODY: Final = dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}})


@st.composite
def mangled_json(draw: st.DrawFn) -> bytes:
    """A valid body cut, spliced, or sprinkled with bytes (invalid UTF-8 included)."""
    body = bytearray(VALID_BODY)
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(body)))
        action = draw(st.sampled_from(["cut", "insert", "replace", "delete"]))
        if action == "cut":
            del body[position:]
        elif action == "insert":
            body[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "replace" and position < len(body):
            body[position] = draw(st.integers(0, 255))
        elif action == "delete" and position < len(body):
            del body[position]
    return bytes(body)


@fuzz_settings(600)
@given(
    body=st.binary(max_size=200)
    | mangled_json()
    | st.text(max_size=100).map(lambda text: text.encode("utf-8", "surrogatepass"))
)
def test_raw_bytes_and_malformed_json(fuzz: Apps, body: bytes) -> None:
    for app in fuzz.both():
        exchange = app.send(body, conforming_headers("tools/list", {}), what="raw body")
        if exchange.result() is not None:
            # Only a body that still is a valid request may succeed.
            json.loads(body)


# --- 2. wrong JSON-RPC shapes ----------------------------------------------------------------------------


@st.composite
def rpc_shapes(draw: st.DrawFn) -> Any:
    """JSON values shaped more or less like a JSON-RPC message."""
    if draw(st.integers(0, 3)) == 0:
        return draw(json_values)
    message: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        message["jsonrpc"] = draw(st.sampled_from(["2.0", "1.0", "2", 2.0, None, ""]) | json_values)
    if draw(st.booleans()):
        message["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        message["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=12) | json_values)
    if draw(st.booleans()):
        message["params"] = draw(json_values | st.just({"_meta": meta()}))
    for member in ("result", "error"):
        if draw(st.integers(0, 4)) == 0:
            message[member] = draw(json_values)
    return message


@fuzz_settings(600)
@given(shape=rpc_shapes(), batch=st.integers(0, 6))
def test_wrong_json_rpc_shapes(fuzz: Apps, shape: Any, batch: int) -> None:
    value = [shape] * (batch - 4) if batch > 4 else shape
    method = shape.get("method") if isinstance(shape, dict) else None
    if not (isinstance(method, str) and method.isascii() and method.isprintable() and method == method.strip()):
        method = "tools/list"  # a header can only mirror a plain method name
    headers = conforming_headers(method, {})
    for app in fuzz.both():
        exchange = app.send(dumps(value), headers, what="shape")
        if isinstance(value, list):
            # No batches in 2026-07-28: -32600 (or -32700 if a float made it NaN/Infinity, not JSON).
            error = exchange.error()
            assert error is not None, exchange
            assert error["code"] in (INVALID_REQUEST, PARSE_ERROR), exchange


# --- 3. every method with junk params, headers mirroring the body --------------------------------------

FUZZ_TOOLS: Final = tuple(
    name
    for name in load_registry(TOOLS_MODULE).tools
    # slow_compute sleeps up to 600 s inline and test_tool_with_logging 0.1 s: both only slow the run down.
    if name not in {"slow_compute", "test_tool_with_logging"}
)
NAMES: Final = (*FUZZ_TOOLS, *load_registry(TOOLS_MODULE).prompts)
URIS: Final = ("test://static-text", "test://static-binary", "test://template/x/data", "test://watched-resource")


@st.composite
def junk_params(draw: st.DrawFn) -> dict[str, Any]:
    params = draw(json_objects)
    keys = ("name", "uri", "arguments", "taskId", "inputResponses", "requestState", "cursor", "ref", "argument")
    for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
        if key == "name" and draw(st.booleans()):
            params[key] = draw(st.sampled_from(NAMES))
        elif key == "uri" and draw(st.booleans()):
            params[key] = draw(st.sampled_from(URIS) | st.text(max_size=30))
        elif key == "ref" and draw(st.booleans()):
            params[key] = {"type": draw(st.sampled_from(["ref/prompt", "ref/resource", "x"])), "name": "x"}
        else:
            params[key] = draw(json_values)
    params.pop("_meta", None)
    return params


@fuzz_settings(900)
@given(
    method=st.sampled_from(METHODS),
    params=junk_params(),
    capabilities=st.sampled_from([FULL_CAPABILITIES, {}, {"extensions": {TASKS_EXTENSION: {}}}]),
)
def test_every_method_with_junk_params(
    fuzz: Apps, method: str, params: dict[str, Any], capabilities: dict[str, Any]
) -> None:
    for app in fuzz.both():
        app.rpc(method, params, capabilities=capabilities)


# --- 4. hostile _meta ------------------------------------------------------------------------------------

META_KEYS: Final = (
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/logLevel",
    "progressToken",
    "dev.ext-tasks/idempotencyKey",
)
hostile_capabilities: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "extensions": json_values | st.dictionaries(st.sampled_from([TASKS_EXTENSION, "x"]), json_values, max_size=2),
        "elicitation": json_values | st.just({"form": {}, "url": {}}),
        "sampling": json_values,
        "roots": json_values,
    },
)
meta_values = (
    json_values
    | hostile_capabilities
    | st.sampled_from([VERSION, "2025-11-25", "2024-11-05", "", "debug", "emergency", "loud"])
    | st.integers(-(2**70), 2**70)
    | st.text(min_size=200, max_size=300)
)


@fuzz_settings(700)
@given(
    tool=st.sampled_from(FUZZ_TOOLS),
    arguments=st.one_of(st.just({}), json_objects, st.just({"region": "eu", "name": "n", "filename": "f"})),
    replaced=st.dictionaries(st.sampled_from(META_KEYS), meta_values, max_size=4),
    dropped=st.lists(st.sampled_from(META_KEYS[:2]), max_size=2, unique=True),
    extra=st.dictionaries(st.text(max_size=30), json_values, max_size=3),
)
def test_hostile_meta(
    fuzz: Apps,
    tool: str,
    arguments: dict[str, Any],
    replaced: dict[str, Any],
    dropped: list[str],
    extra: dict[str, Any],
) -> None:
    hostile = {**meta(), **extra, **replaced}
    for key in dropped:
        hostile.pop(key, None)
    params = {"name": tool, "arguments": arguments, "_meta": hostile}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    headers = conforming_headers("tools/call", params)
    version = hostile.get("io.modelcontextprotocol/protocolVersion")
    if isinstance(version, str) and version.isascii() and version.isprintable() and version == version.strip():
        headers = [(name, version if name == "MCP-Protocol-Version" else value) for name, value in headers]
    if tool == "test_x_mcp_header" and isinstance(arguments.get("region"), str):
        headers.append(("Mcp-Param-Region", header_value(arguments["region"])))
    for app in fuzz.both():
        app.send(dumps(body), headers, what="hostile _meta")


# --- 5. wrong, missing and duplicated headers -------------------------------------------------------------

HEADER_NAMES: Final = (
    "Content-Type",
    "Accept",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Mcp-Param-Region",
    "Idempotency-Key",
    "Host",
    "Origin",
    "Authorization",
)
header_texts = (
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "APPLICATION/JSON",
            "text/plain",
            "",
            VERSION,
            "2025-11-25",
            "tools/call",
            "tools/list",
            "test_x_mcp_header",
            "=?base64?dGVzdA==?=",
            "=?base64?!!!?=",
            "=?base64??=",
            "127.0.0.1:3001",
            "localhost",
            "[::1]:3001",
            "evil.example",
            "http://evil.example",
            "http://127.0.0.1:3001",
            "null",
            "Bearer x",
            "  tools/call  ",
        ]
    )
    | st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
    | st.binary(max_size=20).filter(lambda raw: b"\r" not in raw and b"\n" not in raw)
)


@fuzz_settings(700)
@given(
    tool=st.sampled_from(["test_x_mcp_header", "test_simple_text", "confirm_delete", "greet"]),
    dropped=st.lists(st.sampled_from(HEADER_NAMES[:5]), max_size=3, unique=True),
    changed=st.lists(st.tuples(st.sampled_from(HEADER_NAMES), header_texts), max_size=4),
    duplicated=st.lists(st.sampled_from(HEADER_NAMES), max_size=2),
)
def test_wrong_missing_and_duplicated_headers(
    fuzz: Apps,
    tool: str,
    dropped: list[str],
    changed: list[tuple[str, str | bytes]],
    duplicated: list[str],
) -> None:
    params: dict[str, Any] = {
        "name": tool,
        "arguments": {"region": "eu-west", "name": "n", "filename": "f"},
        "_meta": meta(),
    }
    headers: Headers = [*conforming_headers("tools/call", params), ("Mcp-Param-Region", "eu-west")]
    headers = [(name, value) for name, value in headers if name not in dropped]
    changed_names = {name.lower() for name, _ in changed}
    headers = [(name, value) for name, value in headers if str(name).lower() not in changed_names]
    headers += changed
    for name in duplicated:
        value = next((v for n, v in headers if str(n).lower() == name.lower()), "x")
        headers.append((name, value))
    body = {"jsonrpc": "2.0", "id": "h", "method": "tools/call", "params": params}
    for app in fuzz.both():
        exchange = app.send(dumps(body), headers, what="headers")
        if not dropped and not changed and not duplicated:
            assert exchange.result() is not None, exchange


# --- 6. huge and deeply nested bodies ----------------------------------------------------------------------


def nested(depth: int, kind: str) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


@dataclass(frozen=True)
class _Raw:
    text: str


def dumps_deep(value: Any) -> bytes:
    """``json.dumps`` without recursion, for bodies deeper than Python's own recursion limit."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, list):
            out.append("[")
            stack.append(_Raw("]"))
            for index, element in enumerate(reversed(item)):
                stack.append(element)
                if index < len(item) - 1:
                    stack.append(_Raw(","))
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Raw("}"))
            entries = list(item.items())
            for index, (key, element) in enumerate(reversed(entries)):
                stack.append(element)
                stack.append(_Raw(json.dumps(key) + ":"))
                if index < len(entries) - 1:
                    stack.append(_Raw(","))
        else:
            out.append(json.dumps(item))
    return "".join(out).encode()


NEST_PLACES: Final = ("body", "params", "arguments", "meta", "capabilities", "inputResponses", "id", "state", "task")


@fuzz_settings(160)
@given(
    depth=st.integers(1, 3000) | st.sampled_from([100, 500, 900, 990, 1000, 1010, 2000, 10_000]),
    kind=st.sampled_from(["list", "dict"]),
    where=st.sampled_from(NEST_PLACES),
    tool=st.sampled_from(["test_simple_text", "json_schema_2020_12_tool", "confirm_delete", "greet"]),
)
def test_deeply_nested_bodies(fuzz: Apps, depth: int, kind: str, where: str, tool: str) -> None:
    deep = nested(depth, kind)
    method = "tools/call"
    hostile = meta()
    params: dict[str, Any] = {"name": tool, "arguments": {"name": "n", "filename": "f"}, "_meta": hostile}
    body: Any = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    if where == "body":
        body = deep
    elif where == "params":
        params["deep"] = deep
    elif where == "arguments":
        params["arguments"] = {"name": deep, "filename": deep, "deep": deep}
    elif where == "meta":
        hostile["deep"] = deep
    elif where == "capabilities":
        hostile["io.modelcontextprotocol/clientCapabilities"] = {**FULL_CAPABILITIES, "experimental": deep}
    elif where == "inputResponses":
        params["inputResponses"] = {"confirm": {"action": "accept", "content": deep}}
    elif where == "id":
        body["id"] = deep
    elif where == "state":
        params["requestState"] = deep
    else:
        method = body["method"] = "tasks/update"
        params["taskId"] = "nope"
        params["inputResponses"] = {"confirm": deep}
    encoded = dumps_deep(body)
    for app in fuzz.both():
        app.send(encoded, conforming_headers(method, params), what=f"nested {kind} x{depth} in {where}")


@fuzz_settings(60)
@given(
    size=st.sampled_from([BODY_LIMIT - 200, BODY_LIMIT - 1, BODY_LIMIT, BODY_LIMIT + 1, 4 * BODY_LIMIT])
    | st.integers(BODY_LIMIT // 2, 2 * BODY_LIMIT),
    where=st.sampled_from(["argument", "meta", "key", "id", "padding"]),
)
def test_huge_bodies(fuzz: Apps, size: int, where: str) -> None:
    filler = "x" * size
    hostile = meta()
    params: dict[str, Any] = {"name": "greet", "arguments": {"name": "n"}, "_meta": hostile}
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    if where == "argument":
        params["arguments"] = {"name": filler}
    elif where == "meta":
        hostile["big"] = filler
    elif where == "key":
        params["arguments"] = {filler: 1, "name": "n"}
    elif where == "id":
        body["id"] = filler
    encoded = dumps(body)
    if where == "padding":
        encoded = encoded + b" " * size
    for app in fuzz.both():
        exchange = app.send(encoded, conforming_headers("tools/call", params), what=f"{len(encoded)} bytes")
        if len(encoded) > BODY_LIMIT:
            assert exchange.status == 413, (len(encoded), exchange.status)
            error = exchange.error()
            assert error is not None
            assert error["code"] == INVALID_REQUEST
        else:
            assert exchange.status < 400, exchange


# --- 7. random and mutated requestState --------------------------------------------------------------------

STATE_TOOLS: Final = (
    ("test_input_required_result_elicitation", {"user_name": {"action": "accept", "content": {"name": "A"}}}),
    ("test_input_required_result_request_state", {"confirm": {"action": "accept", "content": {"ok": True}}}),
    ("test_input_required_result_multi_round", {"step1": {"action": "accept", "content": {"name": "A"}}}),
    ("test_input_required_result_tampered_state", {"confirm": {"action": "accept", "content": {"ok": True}}}),
)
INVALID_STATE: Final = "Invalid or expired requestState"


@dataclass(frozen=True)
class RealState:
    tool: str
    answers: dict[str, Any]
    state: str


_STATES: dict[str, list[RealState]] = {}


def real_states(app: LiveApp) -> list[RealState]:
    """One genuine ``requestState`` per MRTR tool of the fixture, issued by ``app`` (cached)."""
    if app.name not in _STATES:
        found = []
        for tool, answers in STATE_TOOLS:
            exchange = app.rpc("tools/call", {"name": tool, "arguments": {}}, what="first round")
            result = exchange.result()
            assert result is not None, exchange
            assert result["resultType"] == "input_required", result
            found.append(RealState(tool, answers, result["requestState"]))
        _STATES[app.name] = found
    return _STATES[app.name]


def forged(token: str, changes: dict[str, Any]) -> str:
    """A signed state whose readable claims were edited, under the original signature."""
    if not token.startswith("v1.") or token.count(".") != 2:
        return token[::-1]
    _, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    # Edit claims the server relies on (expiry, target, principal tag, answers ...), not only new ones.
    known = sorted(claims)
    for index, (key, value) in enumerate(changes.items()):
        claims[known[index % len(known)] if index % 2 == 0 else key] = value
    if not changes:
        claims["exp"] = claims.get("exp", 0) + 3600
    raw = json.dumps(claims, separators=(",", ":")).encode()
    return f"v1.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}.{signature}"


@st.composite
def mutated_state(draw: st.DrawFn, original: str) -> Any:
    text = original
    kind = draw(
        st.sampled_from(["flip", "truncate", "insert", "swap", "prefix", "forge", "random", "type", "repeat", "case"])
    )
    if kind == "flip":
        for _ in range(draw(st.integers(1, 3))):
            index = draw(st.integers(0, len(text) - 1))
            text = text[:index] + draw(st.characters(codec="ascii")) + text[index + 1 :]
    elif kind == "truncate":
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif kind == "insert":
        index = draw(st.integers(0, len(text)))
        text = text[:index] + draw(st.text(min_size=1, max_size=5)) + text[index:]
    elif kind == "swap":
        text = ".".join(draw(st.permutations(text.split("."))))
    elif kind == "prefix":
        text = draw(st.sampled_from(["v1.", "v1e.", "v2.", "", "v1.v1.", "v1e.v1."])) + text.split(".", 1)[-1]
    elif kind == "forge":
        text = forged(text, draw(json_objects))
    elif kind == "random":
        text = draw(st.text(max_size=300) | st.from_regex(r"v1e?\.[A-Za-z0-9_\-]{0,200}(\.[A-Za-z0-9_\-]{0,60})?"))
    elif kind == "type":
        return draw(json_values.filter(lambda value: not isinstance(value, str)))
    elif kind == "repeat":
        text = text * draw(st.integers(2, 4))
    else:
        text = text.swapcase()
    return text


@fuzz_settings(700)
@given(data=st.data(), pick=st.integers(0, len(STATE_TOOLS) - 1), elsewhere=st.integers(0, 7))
def test_random_and_mutated_request_state(fuzz: Apps, data: st.DataObject, pick: int, elsewhere: int) -> None:
    for app in fuzz.both():
        real = real_states(app)[pick]
        tool, arguments, state = real.tool, {}, data.draw(mutated_state(real.state), label="state")
        if elsewhere == 0:
            tool, state = STATE_TOOLS[(pick + 1) % len(STATE_TOOLS)][0], real.state  # genuine, other tool
        elif elsewhere == 1:
            arguments, state = {"extra": data.draw(json_values, label="argument")}, real.state  # other arguments
        elif elsewhere == 2:
            state = _other_app(fuzz, app)[pick].state  # genuine, from the other fleet (other key)
        params = {"name": tool, "arguments": arguments, "inputResponses": real.answers, "requestState": state}
        exchange = app.rpc("tools/call", params, what=f"requestState {state!r:.60}")
        error = exchange.error()
        if state == real.state and tool == real.tool and not arguments:
            assert error is None, exchange  # a no-op mutation (e.g. swapcase of a digit-only text)
            continue
        assert error is not None, (f"a changed requestState was accepted: {state!r}", exchange)
        assert error["code"] == INVALID_PARAMS, exchange
        if isinstance(state, str) and tool == real.tool and not arguments:
            assert error["message"] == INVALID_STATE, error  # one fixed message, whatever the reason


def _other_app(fuzz: Apps, app: LiveApp) -> list[RealState]:
    return real_states(fuzz.sealed if app is fuzz.signed else fuzz.signed)


# --- 8. random task ids ----------------------------------------------------------------------------------------

TASK_METHODS: Final = ("tasks/get", "tasks/update", "tasks/cancel")
NOT_FOUND: Final = "Failed to retrieve task: Task not found"


@fuzz_settings(500)
@given(
    method=st.sampled_from(TASK_METHODS),
    task_id=st.text(min_size=1, max_size=256)
    | st.from_regex(r"[A-Za-z0-9_\-]{24}", fullmatch=True)
    | st.sampled_from(["{", "}", "{x}", "*", "ext-tasks:runs", "fuzz:runs", "..", "%00", " x", "x ", "\u0000"]),
)
def test_random_task_ids(fuzz: Apps, method: str, task_id: str) -> None:
    params: dict[str, Any] = {"taskId": task_id}
    if method == "tasks/update":
        params["inputResponses"] = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    for app in fuzz.both():
        exchange = app.rpc(method, params, what=f"{method} {task_id!r:.40}")
        error = exchange.error()
        assert error is not None, exchange
        assert error["code"] == INVALID_PARAMS, exchange
        assert error["message"] == NOT_FOUND, exchange


@fuzz_settings(150)
@given(
    method=st.sampled_from(TASK_METHODS),
    task_id=json_values.filter(lambda value: not isinstance(value, str)) | st.just("") | st.text(min_size=257),
)
def test_task_ids_of_the_wrong_type_or_size(fuzz: Apps, method: str, task_id: Any) -> None:
    for app in fuzz.both():
        exchange = app.rpc(method, {"taskId": task_id}, what=f"{method} {task_id!r:.40}")
        error = exchange.error()
        assert error is not None, exchange
        assert error["code"] == INVALID_PARAMS, exchange


# --- 9. answers for keys never asked -----------------------------------------------------------------------------

_WAITING: dict[str, tuple[str, dict[str, Any]]] = {}


def waiting_task(app: LiveApp) -> tuple[str, dict[str, Any]]:
    """A ``confirm_delete`` task of ``app`` waiting for its one answer, and what it asks (cached)."""
    if app.name in _WAITING:
        return _WAITING[app.name]
    created = app.rpc("tools/call", {"name": "confirm_delete", "arguments": {"filename": "f.txt"}}, what="create")
    result = created.result()
    assert result is not None, created
    task_id: str = result["taskId"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        task = app.rpc("tasks/get", {"taskId": task_id}, what="poll").result()
        assert task is not None
        if task["status"] == "input_required":
            _WAITING[app.name] = task_id, task["inputRequests"]
            return _WAITING[app.name]
        time.sleep(0.02)
    raise AssertionError(f"task {task_id} never asked for input")


answers = st.dictionaries(st.text(max_size=20), json_objects | json_values, max_size=4)


@fuzz_settings(400)
@given(responses=answers, extra=json_objects)
def test_task_answers_for_keys_never_asked_are_ignored(
    fuzz: Apps, responses: dict[str, Any], extra: dict[str, Any]
) -> None:
    for app in fuzz.both():
        task_id, asked = waiting_task(app)
        unasked = {key: value for key, value in responses.items() if key not in asked}
        params = {**extra, "taskId": task_id, "inputResponses": unasked}
        params.pop("_meta", None)
        exchange = app.rpc("tasks/update", params, what=f"answers {unasked!r:.60}")
        if all(isinstance(value, dict) for value in unasked.values()):
            result = exchange.result()
            assert result is not None, exchange
            assert result["resultType"] == "complete", exchange
        else:
            error = exchange.error()
            assert error is not None, exchange
            assert error["code"] == INVALID_PARAMS, exchange
        task = app.rpc("tasks/get", {"taskId": task_id}, what="still waiting").result()
        assert task is not None
        assert task["status"] == "input_required", task
        assert task["inputRequests"] == asked, task


@fuzz_settings(400)
@given(responses=answers, pick=st.integers(0, len(STATE_TOOLS) - 1), with_state=st.booleans())
def test_mrtr_answers_for_keys_never_asked_are_asked_again(
    fuzz: Apps, responses: dict[str, Any], pick: int, with_state: bool
) -> None:
    for app in fuzz.both():
        real = real_states(app)[pick]
        unasked = {key: value for key, value in responses.items() if key not in real.answers}
        params: dict[str, Any] = {"name": real.tool, "arguments": {}, "inputResponses": unasked}
        if with_state:
            params["requestState"] = real.state
        exchange = app.rpc("tools/call", params, what=f"mrtr answers {unasked!r:.60}")
        if all(isinstance(value, dict) for value in unasked.values()):
            result = exchange.result()
            assert result is not None, exchange
            assert result["resultType"] == "input_required", result
            assert set(result["inputRequests"]) == set(real.answers), result
        else:
            error = exchange.error()
            assert error is not None, exchange
            assert error["code"] == INVALID_PARAMS, exchange


# --- 10. the 2025-11-25 era on the same endpoint (the migration shim) ------------------------------------------

LEGACY_VERSION: Final = "2025-11-25"
LEGACY_METHODS: Final = (
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "prompts/get",
    "resources/read",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "completion/complete",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "tasks/result",
    "notifications/initialized",
    "sampling/createMessage",
)
#: Tools a legacy session without client capabilities can call without the call legitimately waiting:
#: the input-asking ones fail fast (-32021) there; slow_compute would sleep, and a tasks/result on it block.
LEGACY_TOOLS: Final = tuple(name for name in FUZZ_TOOLS if name not in {"test_tool_with_task"})
_SESSIONS: dict[str, str] = {}


def legacy_headers(session: str | None, version: str | None = LEGACY_VERSION) -> Headers:
    headers: Headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
    if version is not None:
        headers.append(("MCP-Protocol-Version", version))
    if session is not None:
        headers.append(("Mcp-Session-Id", session))
    return headers


def legacy_session(app: LiveApp) -> str:
    """A 2025-11-25 session of ``app`` declaring no client capabilities (cached)."""
    if app.name not in _SESSIONS:
        params = {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}}
        body = dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        exchange = app.send(body, legacy_headers(None), what="initialize")
        assert exchange.result() is not None, exchange
        _SESSIONS[app.name] = exchange.headers["mcp-session-id"]
    return _SESSIONS[app.name]


@st.composite
def legacy_params(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    params = draw(json_objects)
    keys = ("name", "arguments", "uri", "taskId", "task", "level", "cursor", "protocolVersion", "capabilities")
    for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
        if key == "name" and draw(st.booleans()):
            params[key] = draw(st.sampled_from((*LEGACY_TOOLS, "test_simple_prompt", "test_prompt_with_arguments")))
        elif key == "uri" and draw(st.booleans()):
            params[key] = draw(st.sampled_from(URIS))
        elif key == "task" and draw(st.booleans()):
            params[key] = {"ttl": draw(st.integers(-5, 10**12) | json_values)}
        elif key == "level" and draw(st.booleans()):
            params[key] = draw(st.sampled_from(["debug", "info", "emergency", "loud"]))
        else:
            params[key] = draw(json_values)
    if isinstance(params.get("name"), str) and params["name"] not in LEGACY_TOOLS and draw(st.booleans()):
        params["name"] = "greet"
    return params


@fuzz_settings(500)
@given(
    method=st.sampled_from(LEGACY_METHODS) | st.text(max_size=12),
    params=legacy_params(),
    request_id=ids,
    session=st.sampled_from(["real", "real", "real", "none", "random", "twice", "other"]),
    version=st.sampled_from([LEGACY_VERSION, LEGACY_VERSION, "2025-06-18", None, "2024-01-01"]),
    response=st.integers(0, 9),
)
def test_legacy_era_requests(
    fuzz: Apps, method: str, params: Any, request_id: Any, session: str, version: str | None, response: int
) -> None:
    if method == "tools/call" and isinstance(params, dict) and params.get("name") not in LEGACY_TOOLS:
        params["name"] = "greet"  # a name the fixture might serve slowly is never called inline here
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    if response == 0:
        # A client "answer" to a server→client request that was never sent.
        message = {"jsonrpc": "2.0", "id": request_id, "result": params}
    for app in fuzz.both():
        real = legacy_session(app)
        session_id = {
            "real": real,
            "none": None,
            "random": "s-" + real[::-1],
            "twice": real,
            "other": legacy_session(fuzz.sealed if app is fuzz.signed else fuzz.signed),
        }[session]
        headers = legacy_headers(session_id, version)
        if session == "twice":
            headers.append(("Mcp-Session-Id", real))
        app.send(dumps(message), headers, what=f"legacy {method!r:.30}")


# --- 11. nesting around the recursion limit, in both eras ------------------------------------------------------

RECURSION_PLACES: Final = ("arguments", "inputResponses", "resumed", "meta", "params", "legacy", "legacy-params")
#: Every example sends every ``DEPTH_STRIDE``-th depth (from its own offset) of 900..1100, where the band
#: lies under the default recursion limit, and of the 200 depths around the limit in force while the
#: test runs (hypothesis raises it): the band of depths that used to break is only 3 to 5 levels wide,
#: and where it lies depends on how deep the server's stack is when it decodes, so a stride below its
#: width meets it wherever it is.
DEPTH_STRIDE: Final = 3


@fuzz_settings(24)
@given(
    offset=st.integers(0, DEPTH_STRIDE - 1),
    kind=st.sampled_from(["list", "dict"]),
    where=st.sampled_from(RECURSION_PLACES),
    pick=st.integers(0, len(STATE_TOOLS) - 1),
)
def test_nesting_around_the_recursion_limit(fuzz: Apps, offset: int, kind: str, where: str, pick: int) -> None:
    """Depths just under Python's recursion limit, which the JSON decoder still takes but which would
    overflow later (the arguments digest, sealing the answers into a state, the legacy shim): every one
    is refused at decode with -32700 and HTTP 400 (the limit is ``MAX_DEPTH`` levels), in both eras."""
    limit = sys.getrecursionlimit()
    depths = [*range(900 + offset, 1101, DEPTH_STRIDE), *range(limit - 100 + offset, limit + 101, DEPTH_STRIDE)]
    for depth in depths:
        deep = nested(depth, kind)
        for app in fuzz.both():
            real = real_states(app)[pick]
            method = "tools/call"
            params: dict[str, Any] = {"name": real.tool, "arguments": {}, "_meta": meta()}
            headers = conforming_headers(method, params)
            if where == "arguments":
                params["arguments"] = {"name": deep}
            elif where in ("inputResponses", "resumed"):
                params["inputResponses"] = {key: {"action": "accept", "content": {"x": deep}} for key in real.answers}
                if where == "resumed":
                    params["requestState"] = real.state
            elif where == "meta":
                params["_meta"]["deep"] = deep
            elif where == "params":
                params = nested(depth, "dict")  # params must stay an object
            elif where == "legacy":
                params = {"name": "greet", "arguments": {"name": deep}}
                headers = legacy_headers(legacy_session(app))
            else:  # legacy-params: a legacy body without a session, so its era is decided from the body
                method, params = "initialize", {"protocolVersion": LEGACY_VERSION, "capabilities": deep}
                headers = legacy_headers(None)
            body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
            exchange = app.send(dumps_deep(body), headers, what=f"nested {kind} x{depth} in {where}")
            assert exchange.status == 400, exchange
            error = exchange.error()
            assert error is not None, exchange
            assert error["code"] == PARSE_ERROR, exchange


# --- targeted cases ------------------------------------------------------------------------------------------------


def targeted(apps: Apps) -> Apps:
    """The apps for a targeted test, which asserts what it expects itself (its requests count in the totals)."""
    apps.set_test("targeted cases")
    return apps


@pytest.mark.parametrize("host", ["bad/host", "a b", "<script>"])
def test_a_malformed_host_header_gets_a_json_rpc_error(apps: Apps, host: str) -> None:
    """Host values outside the characters a host name may have are refused like any host that is not
    allowed (DNS-rebinding protection): with a JSON-RPC error, not the web framework's own error body."""
    fuzz = targeted(apps)
    params = {"_meta": meta()}
    headers: Headers = [("Host", host), *conforming_headers("tools/list", params)]
    body = dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": params})
    for app in fuzz.both():
        exchange = app.send(body, headers, what=f"Host {host!r}")
        assert exchange.status in (400, 403), exchange
        error = exchange.error()
        assert error is not None, exchange.body
        assert error["code"] == INVALID_REQUEST, exchange.body


def test_an_allowed_and_a_foreign_host_header(apps: Apps) -> None:
    fuzz = targeted(apps)
    params = {"_meta": meta()}
    body = dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": params})
    for app in fuzz.both():
        for host, status in (("localhost:3001", 200), ("[::1]:3001", 200), ("evil.example", 403)):
            exchange = app.send(body, [("Host", host), *conforming_headers("tools/list", params)], what=host)
            assert exchange.status == status, (host, exchange)


# --- the figures ---------------------------------------------------------------------------------------------------


def test_fuzz_totals(apps: Apps, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last: the module generated at least MIN_REQUESTS requests, none answered 5xx."""
    with capsys.disabled():  # the figures belong in CI logs, with or without -s
        print("\n" + TOTALS.report())
    missing = FUZZ_TESTS - set(TOTALS.per_test)
    if missing:
        pytest.skip(f"{len(missing)} fuzz tests did not run: the totals need the whole module")
    assert TOTALS.requests >= MIN_REQUESTS, TOTALS.report()
    assert TOTALS.server_errors == 0, TOTALS.report()


#: The property-based tests of this module (the ones the totals are about).
FUZZ_TESTS: Final = frozenset(
    name for name, value in list(globals().items()) if name.startswith("test_") and hasattr(value, "hypothesis")
)
