"""The multi round-trip driver (``ext_tasks.mrtr``), driven through the engine as a client drives it.

What a state carries from round to round: every answer to a key the function asked (in this round or
an earlier one of the same call), and nothing else; and never more than the codec accepts back
(``MAX_TOKEN_CHARS``): a state over the limit is refused when it would be sealed, with an error that
says so, instead of breaking the next round with "Invalid or expired requestState".

The tests run twice, with signed (``v1.``) and with encrypted (``v1e.``) states, except the one that
reads what a signed state shows the client.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from ext_tasks import Context, InputRequired, Principal, ToolRegistry, elicit
from ext_tasks.engine import Engine
from ext_tasks.protocol.envelope import NAME_FIELDS, encode_header_value
from ext_tasks.protocol.errors import INTERNAL_ERROR, PARSE_ERROR
from ext_tasks.protocol.resume import MAX_TOKEN_CHARS, ResumeCodec
from ext_tasks.replies import JsonReply

pytestmark = pytest.mark.anyio

VERSION = "2026-07-28"
KEY = b"mrtr-test-key-".ljust(32, b"!")
T0 = 1_800_000_000.0
ALICE = Principal(id="alice")
CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def said(text: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"text": text}}


# --- the tools and prompts ----------------------------------------------------------------------------


async def steps(ctx: Context) -> str:
    """Asks ``first``, then ``second`` (one per round), then tells which answers it was given."""
    first = await ctx.elicit("first", "First?", TEXT)
    second = await ctx.elicit("second", "Second?", TEXT)
    assert first.content is not None and second.content is not None
    return f"{first.content['text']}+{second.content['text']} from {','.join(sorted(ctx.answers))}"


async def by_hand(ctx: Context) -> str:
    """Raises InputRequired itself and reads ``ctx.answers`` directly, never through ``ctx.answer``."""
    if "a" not in ctx.answers:
        raise InputRequired({"a": elicit("A?", TEXT)})
    if "b" not in ctx.answers:
        raise InputRequired({"b": elicit("B?", TEXT)})
    return f"{ctx.answers['a']['content']['text']}/{ctx.answers['b']['content']['text']}"


async def hoard(ctx: Context, size: int) -> str:
    """Keeps ``size`` characters of its own state between rounds."""
    if ctx.state is None:
        raise InputRequired({"go": elicit("Go?", TEXT)}, state="s" * size)
    return f"kept {len(ctx.state)}"


async def topic(ctx: Context) -> str:
    """A prompt that asks for a topic, then for a tone."""
    subject = await ctx.elicit("topic", "Topic?", TEXT)
    tone = await ctx.elicit("tone", "Tone?", TEXT)
    assert subject.content is not None and tone.content is not None
    return f"Write about {subject.content['text']}, {tone.content['text']}."


def make_registry() -> ToolRegistry:
    registry = ToolRegistry("mrtr-test", version="1.0.0")
    registry.tool()(steps)
    registry.tool()(by_hand)
    registry.tool()(hoard)
    registry.prompt()(topic)
    return registry


@pytest.fixture(params=[False, True], ids=["signed", "encrypted"])
def encrypt(request: pytest.FixtureRequest) -> bool:
    mode: bool = request.param
    return mode


def make_engine(*, encrypt: bool) -> Engine:
    codec = ResumeCodec([KEY], audience="mrtr-test", ttl_s=600, encrypt=encrypt, clock=lambda: T0)
    return Engine(make_registry(), codec)


@pytest.fixture
def engine(encrypt: bool) -> Iterator[Engine]:
    engine = make_engine(encrypt=encrypt)
    yield engine
    engine.close()


@pytest.fixture
def signed_engine() -> Iterator[Engine]:
    engine = make_engine(encrypt=False)
    yield engine
    engine.close()


# --- helpers ------------------------------------------------------------------------------------------


async def send(engine: Engine, method: str, params: dict[str, Any], request_id: int = 1) -> JsonReply:
    """A conforming 2026-07-28 POST of ``method`` (body and headers), answered in-process."""
    body_params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
        },
    }
    headers = {
        "mcp-protocol-version": [VERSION],
        "mcp-method": [method],
        "mcp-name": [encode_header_value(body_params[NAME_FIELDS[method]])],
    }
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body_params}).encode()
    with anyio.fail_after(5):
        reply = await engine.handle(body, headers, ALICE)
    assert isinstance(reply, JsonReply), reply
    return reply


async def call(
    engine: Engine,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    answers: dict[str, Any] | None = None,
    state: str | None = None,
) -> JsonReply:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if answers is not None:
        params["inputResponses"] = answers
    if state is not None:
        params["requestState"] = state
    return await send(engine, "tools/call", params)


def result(reply: JsonReply) -> dict[str, Any]:
    assert reply.status == 200, reply
    assert reply.message is not None and "result" in reply.message, reply.message
    found: dict[str, Any] = reply.wire["result"]
    return found


def error(reply: JsonReply) -> dict[str, Any]:
    assert reply.message is not None and "error" in reply.message, reply.message
    assert reply.message["id"] == 1, reply.message
    found: dict[str, Any] = reply.wire["error"]
    return found


def text(found: dict[str, Any]) -> str:
    assert found["resultType"] == "complete", found
    value: str = found["content"][0]["text"]
    return value


def signed_claims(state: str) -> dict[str, Any]:
    """What any client can read of a signed state (its claims are not secret, only unforgeable)."""
    assert state.startswith("v1.")
    payload = state[len("v1.") :].rpartition(".")[0]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


# --- only the answers to keys that were asked are carried ---------------------------------------------


async def test_answers_under_keys_never_asked_are_not_carried_into_the_next_state(engine: Engine) -> None:
    first = result(await call(engine, "steps"))
    extra = {"junk": said("j" * 10_000), "more": said("m")}

    second = result(await call(engine, "steps", answers={"first": said("one"), **extra}, state=first["requestState"]))
    assert set(second["inputRequests"]) == {"second"}
    # 10 kB of answers nobody asked for would make this state over 10 kB long.
    assert len(second["requestState"]) < 2_000, len(second["requestState"])

    final = result(await call(engine, "steps", answers={"second": said("two")}, state=second["requestState"]))
    assert text(final) == "one+two from first,second"


async def test_a_signed_state_lists_only_answers_to_asked_keys(signed_engine: Engine) -> None:
    first = result(await call(signed_engine, "steps", answers={"junk": said("j")}))

    second = result(
        await call(
            signed_engine, "steps", answers={"first": said("one"), "also": said("a")}, state=first["requestState"]
        )
    )

    assert signed_claims(first["requestState"])["r"] == {}
    assert signed_claims(first["requestState"])["q"] == ["first"]
    assert set(signed_claims(second["requestState"])["r"]) == {"first"}
    assert signed_claims(second["requestState"])["q"] == ["first", "second"]


async def test_an_answer_given_before_it_was_asked_is_carried_once_the_function_looks_for_it(engine: Engine) -> None:
    first = result(await call(engine, "steps", answers={"first": said("early"), "junk": said("j")}))
    assert set(first["inputRequests"]) == {"second"}

    final = result(await call(engine, "steps", answers={"second": said("two")}, state=first["requestState"]))

    assert text(final) == "early+two from first,second"


async def test_an_answer_to_a_key_asked_in_an_earlier_round_is_carried_even_if_only_read_by_hand(
    engine: Engine,
) -> None:
    first = result(await call(engine, "by_hand"))
    assert set(first["inputRequests"]) == {"a"}

    second = result(
        await call(engine, "by_hand", answers={"a": said("A"), "z": said("Z")}, state=first["requestState"])
    )
    assert set(second["inputRequests"]) == {"b"}

    final = result(await call(engine, "by_hand", answers={"b": said("B")}, state=second["requestState"]))
    assert text(final) == "A/B"


async def test_answers_of_this_round_still_win_over_earlier_ones(engine: Engine) -> None:
    first = result(await call(engine, "steps"))
    second = result(await call(engine, "steps", answers={"first": said("one")}, state=first["requestState"]))

    final = result(
        await call(engine, "steps", answers={"first": said("uno"), "second": said("two")}, state=second["requestState"])
    )

    assert text(final) == "uno+two from first,second"


async def test_an_ill_fitting_answer_is_still_asked_again(engine: Engine) -> None:
    first = result(await call(engine, "steps"))

    again = result(await call(engine, "steps", answers={"first": {"action": "accept"}}, state=first["requestState"]))

    assert set(again["inputRequests"]) == {"first"}


# --- a state is never larger than the codec accepts back ----------------------------------------------


async def test_a_large_answer_that_still_fits_reaches_the_next_round(engine: Engine) -> None:
    big = "x" * (MAX_TOKEN_CHARS // 2)
    first = result(await call(engine, "steps"))

    second = result(await call(engine, "steps", answers={"first": said(big)}, state=first["requestState"]))
    final = result(await call(engine, "steps", answers={"second": said("two")}, state=second["requestState"]))

    assert text(final) == f"{big}+two from first,second"


async def test_an_answer_too_large_for_the_state_is_refused_with_an_error_naming_the_sizes(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "confidential-answer-"
    first = result(await call(engine, "steps"))
    caplog.set_level(logging.INFO)

    reply = await call(
        engine, "steps", answers={"first": said(secret * (MAX_TOKEN_CHARS // len(secret)))}, state=first["requestState"]
    )

    found = error(reply)
    assert found["code"] == INTERNAL_ERROR
    assert reply.status == 413  # client input (a large answer) never answers a 5xx
    assert "requestState" in found["message"]
    assert str(MAX_TOKEN_CHARS) in found["message"]
    size = found["data"]["stateChars"]
    assert size > MAX_TOKEN_CHARS
    assert str(size) in found["message"]
    assert found["data"]["maxStateChars"] == MAX_TOKEN_CHARS
    # Logged once, for the tool author, naming the tool; never the answers or the state themselves.
    logged = [record for record in caplog.records if "steps" in record.getMessage()]
    assert len(logged) == 1, [record.getMessage() for record in caplog.records]
    assert logged[0].levelno == logging.ERROR
    assert all(secret not in record.getMessage() for record in caplog.records)
    assert all(secret not in str(record.__dict__) for record in caplog.records)


async def test_a_tool_state_too_large_for_the_state_is_refused_the_same_way(engine: Engine) -> None:
    reply = await call(engine, "hoard", {"size": MAX_TOKEN_CHARS})

    found = error(reply)
    assert found["code"] == INTERNAL_ERROR
    assert found["data"]["maxStateChars"] == MAX_TOKEN_CHARS
    assert found["data"]["stateChars"] > MAX_TOKEN_CHARS


async def test_a_tool_state_that_fits_comes_back(engine: Engine) -> None:
    first = result(await call(engine, "hoard", {"size": MAX_TOKEN_CHARS // 2}))

    final = result(
        await call(
            engine, "hoard", {"size": MAX_TOKEN_CHARS // 2}, answers={"go": said("y")}, state=first["requestState"]
        )
    )

    assert text(final) == f"kept {MAX_TOKEN_CHARS // 2}"


async def test_a_prompt_whose_state_would_be_too_large_is_refused_and_logged_by_name(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    first = result(await send(engine, "prompts/get", {"name": "topic"}))
    caplog.set_level(logging.INFO)

    reply = await send(
        engine,
        "prompts/get",
        {
            "name": "topic",
            "inputResponses": {"topic": said("t" * MAX_TOKEN_CHARS)},
            "requestState": first["requestState"],
        },
    )

    assert error(reply)["code"] == INTERNAL_ERROR
    assert [record.levelno for record in caplog.records if "topic" in record.getMessage()] == [logging.ERROR]


# --- arguments and answers too deep to digest or seal never get that far ------------------------------


@pytest.mark.parametrize("where", ["arguments", "inputResponses"])
async def test_nesting_too_deep_to_digest_or_seal_is_a_parse_error_not_a_crash(engine: Engine, where: str) -> None:
    """Just under Python's recursion limit there is a band of depths that the decoder still takes but
    that would overflow later (the arguments digest, the sealing of the answers): refused at decode."""
    headers = {"mcp-protocol-version": [VERSION], "mcp-method": ["tools/call"], "mcp-name": ["steps"]}
    meta = json.dumps(
        {"io.modelcontextprotocol/protocolVersion": VERSION, "io.modelcontextprotocol/clientCapabilities": CAPABILITIES}
    )
    replies: dict[int, JsonReply] = {}
    limit = sys.getrecursionlimit()
    for depth in range(limit - 100, limit + 100):
        deep = "[" * depth + "0" + "]" * depth
        place = (
            f'"arguments":{{"x":{deep}}}'
            if where == "arguments"
            else f'"inputResponses":{{"first":{{"action":"accept","content":{{"text":{deep}}}}}}}'
        )
        body = f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"steps",{place},"_meta":{meta}}}}}'
        with anyio.fail_after(5):
            reply = await engine.handle(body.encode(), headers, ALICE)
        assert isinstance(reply, JsonReply), reply
        replies[depth] = reply

    assert [depth for depth, reply in replies.items() if reply.status >= 500] == []
    for depth, reply in replies.items():
        assert reply.status == 400, (depth, reply)
        assert reply.message is not None and reply.wire["error"]["code"] == PARSE_ERROR, (depth, reply.message)
